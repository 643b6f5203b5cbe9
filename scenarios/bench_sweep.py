"""`shufflesim bench sweep_speedup_local2`: a sweep on Spark `local[2]` against the same points in-process."""

from __future__ import annotations

import os
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


def sweep_speedup_local2(duration: str = "150s") -> list[dict[str, Any]]:
    """Wall time of the 8-point sweep serially over its time on a fresh `local[2]` session.

    The Spark side counts starting its Python workers; the session's own start-up is
    reported beside it (`spark_startup_s`), with the speed-up counting it too
    (`speedup_with_startup`). Other work on the machine shows in `load_average` (1 min,
    taken before the runs): the cores are shared.
    """
    from scenarios.spark_session import spark_session

    with tempfile.TemporaryDirectory(prefix="shufflesim-bench-") as tmp:
        folder = Path(tmp)
        (folder / "sweep.toml").write_text(BENCH_SWEEP.format(scenario=LIBRARY / "slow-map.toml", duration=duration))
        sweep = load_sweep(folder / "sweep.toml")
        load = os.getloadavg()[0]
        start = time.perf_counter()
        run_sweep(sweep, folder / "serial")
        serial = time.perf_counter() - start
        start = time.perf_counter()
        spark = spark_session("local[2]")
        startup = time.perf_counter() - start
        try:
            start = time.perf_counter()
            run_sweep(sweep, folder / "spark", spark)
            on_spark = time.perf_counter() - start
        finally:
            spark.stop()
        identical = read_results(folder / "serial").to_pylist() == read_results(folder / "spark").to_pylist()
    return [{"figure": "sweep_speedup_local2", "value": round(serial / on_spark, 2), "target": 1.5,
             "points": len(sweep.points), "serial_s": round(serial, 2), "spark_s": round(on_spark, 2),
             "spark_startup_s": round(startup, 2),
             "speedup_with_startup": round(serial / (startup + on_spark), 2),
             "identical_results": identical, "load_average": round(load, 2)}]
