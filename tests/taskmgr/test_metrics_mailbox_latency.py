"""Flink's `mailboxLatencyMs`: the measurement mail waits for the rest of the record in
progress (Flink's mailbox loop takes mails between records), at a point of it that real
time's jitter makes uniform; a waiting task runs it at once."""

from __future__ import annotations

import numpy as np
import pytest

from graph import DiscardingSink, StreamExecutionEnvironment
from taskmgr.cluster import execute
from taskmgr.metrics.mailbox_latency import WINDOW, MailboxLatency


def latency(seed: int = 1) -> MailboxLatency:
    return MailboxLatency(np.random.default_rng(seed))


def test_a_waiting_task_runs_the_mail_at_once() -> None:
    histogram = latency()
    histogram.record(sent=2.0, ran=2.0, record_cost=0.005)
    assert histogram.snapshot() == {"mailboxLatencyMs_mean": 0.0, "mailboxLatencyMs_median": 0.0,
                                    "mailboxLatencyMs_max": 0.0}


def test_a_busy_task_runs_the_mail_after_the_rest_of_a_record() -> None:
    """Whole milliseconds of the rest of a 5 ms record at a uniform point: 0 to 5, mean 2.5
    (real Flink 2.3's slow-map maps: 2.27 and 2.51, max 5-6), whenever our step of several
    records ended."""
    means = []
    for ran in (1.001, 1.010):
        histogram = MailboxLatency(np.random.default_rng(7))
        for k in range(WINDOW):
            histogram.record(sent=1.0 + k, ran=ran + k, record_cost=0.005)
        assert set(histogram._values) <= {0, 1, 2, 3, 4, 5}
        means.append(histogram.snapshot()["mailboxLatencyMs_mean"])
    assert means[0] == means[1] == pytest.approx(2.5, abs=0.4)


def test_a_blocked_zero_cost_task_reads_how_long_the_mail_waited() -> None:
    histogram = latency()
    histogram.record(sent=1.0, ran=1.0072, record_cost=0.0)
    assert histogram.snapshot()["mailboxLatencyMs_max"] in (7.0, 8.0)


def test_the_histogram_keeps_the_last_sixty_values() -> None:
    histogram = latency()
    for k in range(WINDOW):
        histogram.record(sent=1.0 + k, ran=1.0072 + k, record_cost=0.0)
    histogram.record(sent=100.0, ran=100.0, record_cost=0.005)
    values = list(histogram._values)
    assert len(values) == WINDOW and values[-1] == 0 and set(values[:-1]) <= {7, 8}


def busy_map(cost: str) -> dict[str, dict[str, float]]:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator().name("Seq").rebalance().map(cost=cost).name("Busy").sink_to(DiscardingSink())
    result = execute(env, duration=60, task_managers=1, seed=3).raise_for_status()
    return {name: result.vertex_summary(name)["metrics"] for name in ("Source: Seq", "Busy")}


def test_a_busy_map_reads_half_a_record_and_its_waiting_source_nothing() -> None:
    metrics = busy_map("5ms")
    assert metrics["Busy"]["busyTimeMsPerSecond"] == pytest.approx(1000, abs=1)
    assert metrics["Busy"]["mailboxLatencyMs_mean"] == pytest.approx(2.5, abs=0.5)
    assert metrics["Busy"]["mailboxLatencyMs_max"] == 5
    assert metrics["Source: Seq"]["backPressuredTimeMsPerSecond"] == pytest.approx(1000, abs=1)
    assert metrics["Source: Seq"]["mailboxLatencyMs_max"] == 0
