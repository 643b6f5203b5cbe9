"""A chained sink times each record when the chain is done with it (sim mode).

Flink's task takes one record at a time through the chain: record i of a run of records
reaches a sink chained after operators costing c a record (i+1)·c after the run started,
not when the last one does.
"""

from __future__ import annotations

import pytest

import taskmgr.task
from graph import DiscardingSink, StreamExecutionEnvironment
from taskmgr.cluster import execute


def test_a_record_through_a_costed_chain_is_as_late_as_its_own_processing() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(record_size=16).name("Gen").forward().map(cost="1ms").sink_to(DiscardingSink())
    latency = execute(env, duration=3).raise_for_status().latency_summary()
    # Timed at the end of its step of 10 records, the first would show 10 ms.
    assert latency["mean"] == pytest.approx(1.0, rel=0.02)
    assert latency["max"] == pytest.approx(1.0, rel=0.02)


def chained_sink_job() -> StreamExecutionEnvironment:
    """buffer-timeout-latency with a map of 0.5 ms: 1,000 records/s, a flush's ~100 records
    reach the map and its chained sink at once, processed in chunks of 20 (10 ms)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_buffer_timeout(0.1)
    (env.from_generator(rate=1000, record_size=16).name("Ticks").rebalance()
        .map(cost="0.5ms").name("Price").slot_sharing_group("other").sink_to(DiscardingSink()))
    return env


@pytest.mark.parametrize("seed", [0, 5])
def test_a_chained_sink_shows_the_latencies_of_steps_of_one_record(monkeypatch, seed) -> None:
    def latency() -> dict[str, float]:
        return execute(chained_sink_job(), duration=6, task_managers=2, seed=seed).raise_for_status().latency_summary()

    chunked = latency()
    monkeypatch.setattr(taskmgr.task, "MAX_CHUNK_TIME", 1e-7)  # steps of one record
    reference = latency()
    # Timed at the end of each chunk: mean 78.3 against 73.6 ms, p99 109.1 against 100.5 (seed 5).
    assert chunked["mean"] == pytest.approx(reference["mean"], rel=0.01)
    for q in ("p50", "p90", "p99"):
        assert chunked[q] == pytest.approx(reference[q], rel=0.02)
