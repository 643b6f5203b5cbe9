import pytest

from taskmgr.metrics.backpressure import (
    BackpressureLevel,
    backpressure_level,
    vertex_backpressure_level,
)


@pytest.mark.parametrize(
    "ratio, level",
    [(0.0, "ok"), (0.10, "ok"), (0.1001, "low"), (0.5, "low"), (0.5001, "high"), (1.0, "high")],
)
def test_thresholds(ratio, level):
    assert backpressure_level(ratio) == BackpressureLevel(level)


def test_vertex_level_is_level_of_max_subtask():
    assert vertex_backpressure_level([0.0, 0.05, 0.7]) is BackpressureLevel.HIGH
    assert vertex_backpressure_level([0.2, 0.05]) is BackpressureLevel.LOW
    assert vertex_backpressure_level([]) is BackpressureLevel.OK
