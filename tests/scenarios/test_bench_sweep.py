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
    figure, startup = bench_sweep.sweep_speedup_local2(duration="2s", pairs=1)  # measured by a child process
    assert figure["figure"] == "sweep_speedup_local2" and figure["points"] == 8
    assert figure["value"] == pytest.approx(figure["serial_s"] / figure["spark_s"], rel=0.05)
    assert figure["ratios"] == [figure["value"]] and startup["values"] == [startup["value"]]
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


def test_the_sweep_figure_is_the_median_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = iter([(10.0, 5.0, 3.0), (10.0, 8.0, 2.0), (12.0, 6.0, 4.0)])  # ratios 2.0, 1.25, 2.0

    def pair(_duration: str) -> dict[str, object]:
        serial, spark, startup = next(pairs)
        return {"points": 8, "serial_s": serial, "spark_s": spark, "startup_s": startup,
                "serial_cpu_s": serial, "spark_cpu_s": spark, "identical_results": True}

    monkeypatch.setattr(bench_sweep, "_pair_in_a_process", pair)
    figure, startup = bench_sweep.sweep_speedup_local2(pairs=3)
    assert figure["ratios"] == [2.0, 1.25, 2.0] and figure["value"] == 2.0
    # the figures beside it are the median pair's own (the first of the two at 2.0)
    assert (figure["serial_s"], figure["spark_s"], startup["value"]) == (10.0, 5.0, 3.0)
    assert figure["speedup_with_startup"] == 1.25 and startup["values"] == [3.0, 2.0, 4.0]
    with pytest.raises(ValueError, match="pairs must be at least 1"):
        bench_sweep.sweep_speedup_local2(pairs=0)
