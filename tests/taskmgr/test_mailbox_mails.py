"""Mails a Flink task gets without any checkpoint, and what they do to its back-pressure
periods: each mail ends a soft back-pressured (or idle) period, and the task waits again
after it (Flink's MailboxProcessor pauses the suspension timer around every mail). So
Flink's `maxSoftBackPressureTimeMs` of a task back-pressured for seconds on end reads
the gap between two mails: 1,001 ms (the mailbox latency measurement's timer, 1,000 ms
ahead of the millisecond clock, fires a millisecond late), and ~200 ms for a streaming
job's source (its periodic watermark emission, `pipeline.auto-watermark-interval`).
Real Flink 2.3 on slow-sink: source 201-204 ms, maps 1,001-1,002 ms."""

from __future__ import annotations

import pytest

from graph import DiscardingSink, RuntimeExecutionMode, StreamExecutionEnvironment
from taskmgr.cluster import execute


def behind_a_slow_sink(batch: bool = False) -> StreamExecutionEnvironment:
    """A source and a cheap map, each behind a rebalance, before a sink of 20 ms a record:
    a 32 KiB buffer of ~480 records frees every ~9.6 s, so both wait for seconds at a time."""
    env = StreamExecutionEnvironment.get_execution_environment()
    if batch:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    (env.from_generator(count=10**6 if batch else None).name("Seq").rebalance()
        .map(cost="0.1ms").name("Map").rebalance()
        .map(cost="20ms").name("Slow").sink_to(DiscardingSink()))
    return env


def longest_waits(batch: bool) -> tuple[float, float]:
    result = execute(behind_a_slow_sink(batch), duration=20, task_managers=3 if batch else 1,
                     seed=7).raise_for_status()
    source, cheap = result.vertex_summary("Source: Seq"), result.vertex_summary("Map")
    for vertex in (source, cheap):
        assert vertex["metrics"]["softBackPressuredTimeMsPerSecond"] > 990
    return source["metrics"]["maxSoftBackPressureTimeMs"], cheap["metrics"]["maxSoftBackPressureTimeMs"]


def test_mails_end_every_back_pressured_period_as_in_flink():
    source, cheap = longest_waits(batch=False)
    assert source == pytest.approx(200, abs=0.5)  # the watermark mail, every 200 ms
    assert cheap == pytest.approx(1001, abs=0.5)  # the mailbox latency mail, every 1,001 ms


def test_a_batch_jobs_source_emits_no_periodic_watermarks():
    source, cheap = longest_waits(batch=True)
    assert source == pytest.approx(1001, abs=0.5)  # only the mailbox latency mail splits its waits
    assert cheap == pytest.approx(1001, abs=0.5)
