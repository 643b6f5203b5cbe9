"""The sweep figure of `shufflesim bench` runs and reports consistent raw numbers (not timed).

It starts its own Spark session (about 5 s) and runs the sweep twice: slow.
"""

import pytest

from scenarios import bench, bench_sweep


@pytest.mark.slow
def test_sweep_speedup_figure_reports_consistent_numbers() -> None:
    assert bench.FIGURES["sweep_speedup_local2"] is bench_sweep.sweep_speedup_local2
    (figure,) = bench_sweep.sweep_speedup_local2(duration="2s")
    assert figure["figure"] == "sweep_speedup_local2" and figure["points"] == 8
    assert figure["value"] == pytest.approx(figure["serial_s"] / figure["spark_s"], rel=0.05)
    assert figure["spark_startup_s"] > 0 and figure["identical_results"] is True
