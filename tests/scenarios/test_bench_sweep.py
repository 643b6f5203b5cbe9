"""The sweep figures of `shufflesim bench` run and report consistent raw numbers (not timed).

Each pair starts its own Spark session (3-8 s) and runs the sweep twice: slow.
"""

import os
import time

import pytest

from scenarios import bench, bench_sweep


@pytest.mark.slow
def test_sweep_speedup_figure_reports_consistent_numbers() -> None:
    assert bench.FIGURES["sweep_speedup_local2"] is bench_sweep.sweep_speedup_local2
    figure, startup = bench_sweep.sweep_speedup_local2(duration="2s", pairs=3)
    assert figure["figure"] == "sweep_speedup_local2" and figure["points"] == 8
    assert figure["value"] == pytest.approx(figure["serial_s"] / figure["spark_s"], rel=0.05)
    # the median of three pairs, each measured by a process of its own
    assert len(figure["ratios"]) == 3 and figure["value"] == sorted(figure["ratios"])[1]
    assert len(startup["values"]) == 3 and startup["value"] in startup["values"]
    assert figure["identical_results"] is True
    # the Spark side's CPU counts the JVM and the Python workers, not only this process
    assert figure["serial_cpu_s"] > 0 and figure["spark_cpu_s"] > figure["serial_cpu_s"] / 2
    assert startup["figure"] == "spark_startup_local2_s" and startup["value"] > 0
    assert figure["speedup_with_startup"] == pytest.approx(
        figure["serial_s"] / (startup["value"] + figure["spark_s"]), rel=0.05)


def test_cpu_of_the_process_tree_counts_children() -> None:
    before = bench_sweep.cpu_seconds_of_process_tree()
    pid = os.fork()
    if pid == 0:  # a child that uses 0.3 s of CPU (however busy the machine)
        while time.process_time() < 0.3:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
    assert bench_sweep.cpu_seconds_of_process_tree() - before >= 0.25
