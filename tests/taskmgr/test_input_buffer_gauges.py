"""A task's input buffer gauges over its gates, as Flink's AbstractBuffersUsageGauge: per gate
used and total, summed over the task's gates, then one ratio (0 when the total is 0);
`inPoolUsage` (CreditBasedInputBuffersUsageGauge) adds the exclusive and floating figures."""

from types import SimpleNamespace

import pytest

from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.task import TaskMetrics

GAUGES = ("inPoolUsage", "inputExclusiveBuffersUsage", "inputFloatingBuffersUsage")


def _gate(exclusive: tuple[int, int], floating: tuple[int, int]) -> SimpleNamespace:
    return SimpleNamespace(exclusive_buffers_usage=lambda: exclusive, floating_buffers_usage=lambda: floating,
                           input_queue_length=0, input_queue_size=0, buffer_debloater=None, channels=[])


def _gauges(*gates: SimpleNamespace) -> dict[str, float]:
    snapshot = TaskMetrics(TaskIOMetricGroup(clock=lambda: 0.0), [], list(gates)).snapshot()
    return {name: snapshot[name] for name in GAUGES}


def test_task_gauges_are_one_ratio_of_sums_over_its_gates():
    # gate 1: its 4 exclusive buffers used, 0 of 8 floating; gate 2: 0 of 2 exclusive, 10 of 18 floating
    gauges = _gauges(_gate((4, 4), (0, 8)), _gate((0, 2), (10, 18)))
    assert gauges["inPoolUsage"] == pytest.approx(14 / 32)  # not the mean of 4/12 and 10/20
    assert gauges["inputExclusiveBuffersUsage"] == pytest.approx(4 / 6)  # not the mean of 1 and 0
    assert gauges["inputFloatingBuffersUsage"] == pytest.approx(10 / 26)  # not the mean of 0 and 10/18


def test_gates_without_buffers_count_for_nothing_and_zero_totals_read_zero():
    assert _gauges(_gate((0, 0), (0, 0))) == dict.fromkeys(GAUGES, 0.0)
    gauges = _gauges(_gate((0, 0), (0, 0)), _gate((1, 2), (2, 10)))
    assert gauges == pytest.approx({"inPoolUsage": 3 / 12, "inputExclusiveBuffersUsage": 1 / 2,
                                    "inputFloatingBuffersUsage": 2 / 10})
