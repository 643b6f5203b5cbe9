"""Scale figures for `shufflesim bench`: an all-to-all keyed job of N x N subtasks.

N generator sources (2,000 records/s each) -> key_by -> N keyed maps, on N/4 TaskManagers
with 4 slots each: N^2 channels, most of them remote. Each TaskManager gets 128 MiB of
network memory: at N=256 its four keyed-map gates need 4 x (256 x 2 + 8) buffers, more
than Flink's 64 MiB default holds (real Flink refuses the job the same way); memory is
only resident for buffers that hold data. Each size runs one virtual second in
a fresh child process, so its peak resident memory is its own; the figures are wall
seconds per virtual second and peak RSS, one pair per N, so the growth curve shows.
`idle_channel_bytes` deploys the same job with nearly silent sources at ten sizes on the
same TaskManagers and fits its Python memory as a + b*N + c*N^2: c is what one channel
costs, apart from what grows with the subtasks (b) and what does not grow (a).
"""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import numpy as np

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, execute, run_job
from taskmgr.jobmanager import JobConfig

SIZES = (32, 64, 128, 256)
RATE = 2000  # records/s per source
SLOTS = 4
VIRTUAL_SECONDS = 1.0
NETWORK = NetworkConfig(network_memory=128 * 1024 * 1024)


#: Sizes whose deployed jobs give the memory per idle channel, all on IDLE_TASK_MANAGERS:
#: channels grow with N^2, subtasks with N, TaskManagers and their connections not at all.
#: Ten sizes over a fourfold span: containers grow in steps (a list or dict resizing), so a
#: fit through three close sizes can put a step into the N^2 term (181 to 2,983 B).
IDLE_SIZES = tuple(range(24, 97, 8))
IDLE_TASK_MANAGERS = 8
#: Records per second per source in the idle runs: the channels are set up, hardly used.
IDLE_RATE = 1
#: Job time (s) at which an idle run's memory is taken: long after deployment.
IDLE_AT = 0.5


def all_to_all(n: int, rate: int = RATE) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(n)
    (env.from_generator(rate=rate, record_size=32).name("Gen")
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


def deployed_bytes(n: int, task_managers: int) -> dict[str, Any]:
    """Python memory (tracemalloc) of the N x N job deployed and idle on `task_managers`
    TaskManagers, in this process: taken at job time IDLE_AT, after a full garbage
    collection, with sources at IDLE_RATE."""
    if n % task_managers:
        raise ValueError(f"{n} subtasks do not fill {task_managers} TaskManagers evenly")
    taken: list[int] = []

    def progress(job_time: float, _records: int | None) -> None:
        if not taken and job_time >= IDLE_AT:
            gc.collect()
            taken.append(tracemalloc.get_traced_memory()[0])

    tracemalloc.start()
    try:
        cluster = ClusterConfig("sim", task_managers, n // task_managers, NETWORK)
        job = JobConfig(VIRTUAL_SECONDS, task_managers=task_managers)
        kernel.run(run_job, all_to_all(n, IDLE_RATE), cluster, job, NULL_TRACER, progress, mode="sim")
    finally:
        tracemalloc.stop()
    if not taken:
        raise RuntimeError(f"the {n} x {n} idle run ended before job time {IDLE_AT} s")
    return {"n": n, "channels": n * n, "task_managers": task_managers, "traced_bytes": taken[0]}


def _child(*args: str) -> dict[str, Any]:
    """Run this module with `args` in a fresh process (its memory its own); its JSON line."""
    done = subprocess.run([sys.executable, "-m", "scenarios.bench_scale", *args],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scale run {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def fit_growth(runs: list[dict[str, Any]]) -> tuple[float, float, float, float]:
    """Least-squares fit of the runs' `traced_bytes` as `fixed + per_subtask_pair * N +
    per_channel * N^2` over their sizes N; returns the three coefficients and the root mean
    square of the residuals (bytes)."""
    if len({run["n"] for run in runs}) < 3:
        raise ValueError("the fit needs runs at three sizes at least")
    n = np.array([run["n"] for run in runs], dtype=float)
    traced = np.array([run["traced_bytes"] for run in runs], dtype=float)
    design = np.vstack([np.ones_like(n), n, n * n]).T
    coefficients, *_ = np.linalg.lstsq(design, traced, rcond=None)
    residual_rms = float(np.sqrt(np.mean((design @ coefficients - traced) ** 2)))
    fixed, per_pair, per_channel = (float(c) for c in coefficients)
    return fixed, per_pair, per_channel, residual_rms


def idle_channel_bytes(sizes: tuple[int, ...] = IDLE_SIZES,
                       task_managers: int = IDLE_TASK_MANAGERS) -> list[dict[str, Any]]:
    """`idle_channel_bytes`: what one more set-up, idle channel costs in Python memory (both
    its ends: input channel, buffer manager, subpartition, view, reader, ...): the N^2 term
    of the deployed job's memory over sizes N on the same TaskManagers (`fit_growth`)."""
    runs = [_child("idle", str(n), str(task_managers)) for n in sizes]
    fixed, per_pair, per_channel, residual_rms = fit_growth(runs)
    return [{"figure": "idle_channel_bytes", "value": round(per_channel),
             "per_subtask_pair_bytes": round(per_pair), "fixed_bytes": round(fixed),
             "residual_rms_bytes": round(residual_rms), "runs": runs}]


def scale_figures(sizes: tuple[int, ...] = SIZES) -> Iterator[dict[str, Any]]:
    """`scale_<N>x<N>_wall_s_per_virtual_s` and `scale_<N>x<N>_peak_gib` for each size,
    yielded as each size finishes."""
    for n in sizes:
        run = _child(str(n))
        name = f"scale_{n}x{n}"
        yield {"figure": f"{name}_wall_s_per_virtual_s", "value": round(run["wall_s"] / run["virtual_s"], 2),
               **run, **({"target": 15} if n == 256 else {})}
        yield {"figure": f"{name}_peak_gib", "value": run["peak_gib"], **({"target": 2} if n == 256 else {})}


if __name__ == "__main__":
    if sys.argv[1] == "idle":
        print(json.dumps(deployed_bytes(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        print(json.dumps(measure(int(sys.argv[1]))))
