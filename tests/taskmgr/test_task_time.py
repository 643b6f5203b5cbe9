"""Where task time goes (spec 7.1): hard back-pressure inside a record, costs that change
over time (sim mode)."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from graph import Cost, DiscardingSink, StreamExecutionEnvironment
from taskmgr.cluster import execute


def test_records_larger_than_a_buffer_cause_hard_backpressure() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    # 62 buffers a record: far more than the 20 overdraft buffers Flink 2.3 lends a gate
    (env.from_generator(record_size=2_000_000).name("Big").rebalance()
        .map(cost="20ms").slot_sharing_group("remote").sink_to(DiscardingSink()))
    result = execute(env, duration=4, task_managers=2).raise_for_status()
    source = result.vertex_summary("Source: Big")["metrics"]
    assert source["hardBackPressuredTimeMsPerSecond"] > 100
    assert source["backPressuredTimeMsPerSecond"] == pytest.approx(
        source["softBackPressuredTimeMsPerSecond"] + source["hardBackPressuredTimeMsPerSecond"], abs=1)


def series(result, vertex: str, metric: str) -> dict[float, float]:
    table = result.metrics.filter(pc.and_(pc.equal(result.metrics["vertex"], vertex),
                                          pc.equal(result.metrics["metric"], metric)))
    return dict(zip(table["t"].to_pylist(), table["value"].to_pylist()))


def test_sink_that_slows_down_between_10_and_20_seconds() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    slow_window = Cost(0.001, ((10.0, 20.0, 0.005),))
    env.from_generator(rate=400, record_size=1024).name("Gen").rebalance().sink_to(DiscardingSink(), cost=slow_window)
    result = execute(env, duration=30, task_managers=2).raise_for_status()
    sink_busy = series(result, "Sink: Writer", "busyTimeMsPerSecond")
    source_bp = series(result, "Source: Gen", "backPressuredTimeMsPerSecond")
    assert all(sink_busy[t] == pytest.approx(400, abs=50) for t in (3.0, 6.0, 9.0))
    assert all(sink_busy[t] > 990 for t in (15.0, 18.0, 20.0))
    assert max(source_bp[t] for t in (16.0, 18.0, 20.0)) > 500
    assert all(source_bp[t] == 0 for t in (3.0, 6.0, 9.0))


def test_throttled_source_catches_up_at_most_one_second_after_backpressure() -> None:
    """Flink's rate limiter (Guava's SmoothBursty) stores at most one second of permits,
    so a throttled source that was backpressured does not make up all it missed."""
    env = StreamExecutionEnvironment.get_execution_environment()
    slow_window = Cost(0.0001, ((2.0, 6.0, 0.01),))
    env.from_generator(rate=1000, record_size=1024).name("Gen").rebalance().sink_to(DiscardingSink(), cost=slow_window)
    result = execute(env, duration=10, task_managers=2).raise_for_status()
    out = series(result, "Source: Gen", "numRecordsOutPerSecond")
    assert max(out[t] for t in (4.0, 5.0, 6.0)) < 200
    assert out[7.0] <= 2000 + 50  # one second of stored permits on top of the rate
    assert all(out[t] == pytest.approx(1000, abs=10) for t in (8.0, 9.0))
