"""Scale figures for `shufflesim bench`: an all-to-all keyed job of N x N subtasks.

N generator sources (2,000 records/s each) -> key_by -> N keyed maps, on N/4 TaskManagers
with 4 slots each: N^2 channels, most of them remote. Each TaskManager gets 128 MiB of
network memory: at N=256 its four keyed-map gates need 4 x (256 x 2 + 8) buffers, more
than Flink's 64 MiB default holds (real Flink refuses the job the same way); memory is
only resident for buffers that hold data. Each size runs one virtual second in
a fresh child process, so its peak resident memory is its own; the figures are wall
seconds per virtual second and peak RSS, one pair per N, so the growth curve shows.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle.config import NetworkConfig
from taskmgr.cluster import execute

SIZES = (32, 64, 128, 256)
RATE = 2000  # records/s per source
SLOTS = 4
VIRTUAL_SECONDS = 1.0
NETWORK = NetworkConfig(network_memory=128 * 1024 * 1024)


def all_to_all(n: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(n)
    (env.from_generator(rate=RATE, record_size=32).name("Gen")
        .key_by(lambda record: record.key).map(cost="10us").name("KeyedMap")
        .sink_to(DiscardingSink()))
    return env


def measure(n: int) -> dict[str, Any]:
    """Run the N x N job for one virtual second in this process."""
    start = time.perf_counter()
    result = execute(all_to_all(n), duration=VIRTUAL_SECONDS, task_managers=n // SLOTS,
                     slots_per_task_manager=SLOTS, network=NETWORK).raise_for_status()
    wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"n": n, "channels": n * n, "wall_s": round(wall, 2), "virtual_s": result.duration,
            "records": result.records_received, "peak_gib": round(peak_kib / 2**20, 3)}


def scale_figures(sizes: tuple[int, ...] = SIZES) -> Iterator[dict[str, Any]]:
    """`scale_<N>x<N>_wall_s_per_virtual_s` and `scale_<N>x<N>_peak_gib` for each size,
    yielded as each size finishes."""
    for n in sizes:
        done = subprocess.run([sys.executable, "-m", "scenarios.bench_scale", str(n)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"scale run N={n} failed:\n{done.stderr[-2000:]}")
        run = json.loads(done.stdout)
        name = f"scale_{n}x{n}"
        yield {"figure": f"{name}_wall_s_per_virtual_s", "value": round(run["wall_s"] / run["virtual_s"], 2),
               **run, **({"target": 15} if n == 256 else {})}
        yield {"figure": f"{name}_peak_gib", "value": run["peak_gib"], **({"target": 2} if n == 256 else {})}


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
