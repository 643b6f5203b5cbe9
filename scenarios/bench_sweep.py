"""`shufflesim bench sweep_speedup_local2`: a sweep on Spark `local[2]` against the same points in-process,
and the start-up of that Spark session (`spark_startup_local2_s`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scenarios.sweep import read_results, run_sweep
from scenarios.sweep_file import load_sweep

LIBRARY = Path(__file__).with_name("library")

#: 8 points of slow-map; at 150 s of virtual time each takes a few wall seconds.
BENCH_SWEEP = """
scenario = "{scenario}"
[grid]
duration = ["{duration}"]
"job.stages[SlowMap].cost" = ["1ms", "2ms", "5ms", "10ms"]
"network.buffer_timeout" = ["10ms", "100ms"]
"""


def cpu_seconds_of_process_tree() -> float | None:
    """CPU seconds (user + system) this process and its descendants have used so far:
    on Spark the driver JVM, its Python daemon and workers too (Linux's /proc; None elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if name.isdigit():
            try:
                fields = Path("/proc", name, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            parents[int(name)] = int(fields[1])
            used[int(name)] = sum(int(field) for field in fields[11:15]) / ticks  # own and reaped children's
    tree, frontier = set(), {os.getpid()}
    while frontier:
        tree |= frontier
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
    return sum(used.get(pid, 0.0) for pid in tree)


def _timed(fn: Any, *args: Any) -> tuple[float, float | None]:
    """Wall and CPU seconds (of the process tree) that `fn(*args)` takes."""
    cpu, start = cpu_seconds_of_process_tree(), time.perf_counter()
    fn(*args)
    wall, cpu_after = time.perf_counter() - start, cpu_seconds_of_process_tree()
    return wall, None if cpu is None or cpu_after is None else cpu_after - cpu


def _import_plotting() -> None:
    """Import what drawing sweep.png needs (~0.6 s), which this process would otherwise pay
    on the first side it times only: both sides draw the plot here, in the driver."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401


def sweep_speedup_local2(duration: str = "150s", pairs: int = 3) -> list[dict[str, Any]]:
    """Wall time of the 8-point sweep run one by one in-process (`--master serial`, each point
    what `shufflesim run` runs) over its wall time on a fresh `local[2]` session, measured
    `pairs` times, each pair in a process of its own (so each Spark side starts its own JVM,
    as a `shufflesim sweep` does). The value is the median pair's ratio (of an even count,
    the upper middle one), with every pair's ratio in `ratios`: this machine's speed drifts
    by ±20 % within a minute, which one pair (~30 s) cannot tell from Spark's cost.

    The Spark side counts everything after the session is up: starting the Python workers,
    shipping the points, running them, collecting the results and writing
    results.parquet and sweep.png (as the serial side does; matplotlib is imported before
    either side is timed). The session's start-up is a figure of its own,
    `spark_startup_local2_s` (the median pair's); `speedup_with_startup` counts it too.
    `serial_cpu_s` / `spark_cpu_s` are the CPU seconds each side used (on Spark: driver,
    JVM and Python workers): their difference is Spark's overhead in CPU, which other work
    on the machine blurs less than the wall times (the cores are shared; `load_average`,
    1 min, taken before the first pair, shows that other work).
    """
    if pairs < 1:
        raise ValueError(f"pairs must be at least 1, not {pairs}")
    load = os.getloadavg()[0]
    measured = [_pair_in_a_process(duration) for _ in range(pairs)]
    pair = sorted(measured, key=lambda one: one["serial_s"] / one["spark_s"])[len(measured) // 2]
    serial, on_spark, startup = pair["serial_s"], pair["spark_s"], pair["startup_s"]
    cpu = {"serial_cpu_s": pair["serial_cpu_s"], "spark_cpu_s": pair["spark_cpu_s"]}
    return [{"figure": "sweep_speedup_local2", "value": round(serial / on_spark, 2), "target": 1.5,
             "points": pair["points"], "serial_s": round(serial, 2), "spark_s": round(on_spark, 2),
             "speedup_with_startup": round(serial / (startup + on_spark), 2),
             **{key: None if value is None else round(value, 2) for key, value in cpu.items()},
             "ratios": [round(one["serial_s"] / one["spark_s"], 2) for one in measured],
             "identical_results": all(one["identical_results"] for one in measured), "load_average": round(load, 2)},
            {"figure": "spark_startup_local2_s", "value": round(startup, 2), "master": "local[2]",
             "values": [round(one["startup_s"], 2) for one in measured], "load_average": round(load, 2)}]


#: How the child process marks its result among what the JVM, which shares its stdout, prints.
_RESULT_LINE = "sweep pair:"

#: Longest a pair may take (two sweeps and a session, ~30 s on our machines).
PAIR_TIMEOUT = 900.0


def _pair_in_a_process(duration: str) -> dict[str, Any]:
    """One pair, measured by a child process (`python -m scenarios.bench_sweep DURATION`)."""
    try:
        child = subprocess.run([sys.executable, "-m", "scenarios.bench_sweep", duration],
                               capture_output=True, text=True, timeout=PAIR_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"a pair of the sweep figure took longer than {PAIR_TIMEOUT:.0f} s") from None
    result = next((line for line in child.stdout.splitlines() if line.startswith(_RESULT_LINE)), None)
    if child.returncode != 0 or result is None:
        tail = child.stderr.strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        raise RuntimeError(f"a pair of the sweep figure failed: {tail[0]}")
    return json.loads(result.removeprefix(_RESULT_LINE))


def measure_pair(duration: str) -> dict[str, Any]:
    """In this process: the sweep one by one, then a fresh `local[2]` session's start-up
    and the sweep on it (raw seconds)."""
    from scenarios.spark_session import spark_session

    with tempfile.TemporaryDirectory(prefix="shufflesim-bench-") as tmp:
        folder = Path(tmp)
        (folder / "sweep.toml").write_text(BENCH_SWEEP.format(scenario=LIBRARY / "slow-map.toml", duration=duration))
        sweep = load_sweep(folder / "sweep.toml")
        _import_plotting()
        serial, serial_cpu = _timed(run_sweep, sweep, folder / "serial")
        start = time.perf_counter()
        spark = spark_session("local[2]")
        startup = time.perf_counter() - start
        try:
            on_spark, spark_cpu = _timed(run_sweep, sweep, folder / "spark", spark)
        finally:
            spark.stop()
        identical = read_results(folder / "serial").to_pylist() == read_results(folder / "spark").to_pylist()
    return {"points": len(sweep.points), "serial_s": serial, "spark_s": on_spark, "startup_s": startup,
            "serial_cpu_s": serial_cpu, "spark_cpu_s": spark_cpu, "identical_results": identical}


if __name__ == "__main__":
    print(_RESULT_LINE, json.dumps(measure_pair(sys.argv[1])), flush=True)
