import pytest

from taskmgr.metrics.summary import VertexLayout, steady_state, vertex_summaries
from taskmgr.metrics.table import MetricTable


def make_table():
    table = MetricTable()
    # Sink subtask 0 on tm-0: backpressure 0 in the first half, 600 in the second half.
    # Sink subtask 1 on tm-1: 100 throughout.
    for t in range(1, 11):
        table.append(float(t), "Sink", 0, "tm-0", "backPressuredTimeMsPerSecond", 0.0 if t < 5 else 600.0)
        table.append(float(t), "Sink", 1, "tm-1", "backPressuredTimeMsPerSecond", 100.0)
        table.append(float(t), "Sink", 0, "tm-0", "numRecordsInPerSecond", float(t))
        table.append(float(t), "Source", 0, "tm-0", "backPressuredTimeMsPerSecond", 50.0)
    return table


def test_steady_state_is_mean_over_second_half():
    steady = steady_state(make_table().to_arrow(), end=10.0)
    assert steady["Sink", 0, "backPressuredTimeMsPerSecond"] == 600.0
    assert steady["Sink", 0, "numRecordsInPerSecond"] == pytest.approx((5 + 6 + 7 + 8 + 9 + 10) / 6)
    # default end = last sample time
    assert steady_state(make_table().to_arrow()) == steady


def test_vertex_summaries_shape_levels_and_means():
    layouts = [VertexLayout("Source", ["tm-0"]), VertexLayout("Sink", ["tm-0", "tm-1"])]
    source, sink = vertex_summaries(make_table().to_arrow(), layouts, end=10.0)
    assert source == {
        "name": "Source",
        "parallelism": 1,
        "backpressure_level": "ok",
        "metrics": {"backPressuredTimeMsPerSecond": 50.0},
        "subtasks": [{"index": 0, "task_manager": "tm-0", "metrics": {"backPressuredTimeMsPerSecond": 50.0}}],
    }
    assert sink["parallelism"] == 2
    assert sink["backpressure_level"] == "high"  # max subtask ratio 0.6
    assert sink["metrics"]["backPressuredTimeMsPerSecond"] == 350.0  # mean of 600 and 100
    assert [s["task_manager"] for s in sink["subtasks"]] == ["tm-0", "tm-1"]
    assert sink["subtasks"][1]["metrics"] == {"backPressuredTimeMsPerSecond": 100.0}


def test_empty_table():
    assert vertex_summaries(MetricTable().to_arrow(), [VertexLayout("A", ["tm-0"])])[0]["metrics"] == {}
