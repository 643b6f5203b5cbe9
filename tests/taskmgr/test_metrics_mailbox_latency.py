"""Flink's `mailboxLatencyMs`: the measurement mail waits for the rest of the record in
progress (Flink's mailbox loop takes mails between records), at a point of it that real
time's jitter makes uniform; a waiting task runs it at once."""

from __future__ import annotations

import numpy as np
import pytest

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobResult
from taskmgr.metrics.mailbox_latency import WINDOW, MailboxLatency


def latency(seed: int = 1) -> MailboxLatency:
    return MailboxLatency(np.random.default_rng(seed))


def test_readings_are_whole_milliseconds_of_the_wait() -> None:
    histogram = latency()
    histogram.record(sent=2.0, waited=0.0)
    assert histogram.snapshot() == {"mailboxLatencyMs_mean": 0.0, "mailboxLatencyMs_median": 0.0,
                                    "mailboxLatencyMs_max": 0.0}
    histogram.record(sent=1.0, waited=0.0072)
    assert histogram.snapshot()["mailboxLatencyMs_max"] in (7.0, 8.0)  # where the clock's ticks fall


def test_the_rest_of_a_record_is_drawn_uniformly() -> None:
    """Whole milliseconds of the rest of a 5 ms record: 0 to 5, mean 2.5 (real Flink 2.3's
    slow-map maps: 2.27 and 2.51, max 5-6)."""
    histogram = latency(7)
    for k in range(WINDOW):
        histogram.record(sent=1.0 + k, waited=histogram.rest_of_record(0.005))
    assert set(histogram._values) <= {0, 1, 2, 3, 4, 5}
    assert histogram.snapshot()["mailboxLatencyMs_mean"] == pytest.approx(2.5, abs=0.4)
    assert histogram.rest_of_record(0.0) == 0.0


def test_the_histogram_keeps_the_last_sixty_values() -> None:
    histogram = latency()
    for k in range(WINDOW):
        histogram.record(sent=1.0 + k, waited=0.0072)
    histogram.record(sent=100.0, waited=0.0)
    values = list(histogram._values)
    assert len(values) == WINDOW and values[-1] == 0 and set(values[:-1]) <= {7, 8}


def run(cost: str, *faults: Fault, rate: float = 0, duration: float = 60) -> JobResult:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(rate=rate).name("Seq").rebalance().map(cost=cost).name("Busy").sink_to(DiscardingSink())
    return kernel.run(run_job, env, ClusterConfig(), JobConfig(duration, seed=3), NULL_TRACER, None, None, faults,
                      mode="sim").raise_for_status()


def test_a_busy_map_reads_half_a_record_and_its_waiting_source_nothing() -> None:
    result = run("5ms")
    busy, source = result.vertex_summary("Busy")["metrics"], result.vertex_summary("Source: Seq")["metrics"]
    assert busy["busyTimeMsPerSecond"] == pytest.approx(1000, abs=1)
    assert busy["mailboxLatencyMs_mean"] == pytest.approx(2.5, abs=0.5)
    assert busy["mailboxLatencyMs_max"] == 5
    assert source["backPressuredTimeMsPerSecond"] == pytest.approx(1000, abs=1)
    assert source["mailboxLatencyMs_max"] == 0


@pytest.mark.parametrize(("cost", "rate"), [("5ms", 0), ("0ms", 100)])
def test_a_stall_holds_the_measurement_up_whatever_the_records_cost(cost: str, rate: float) -> None:
    """A task blocked for 2.5 s (a `block_task` fault: a mail ahead of the measurement)
    reads that wait in full, busy with costly records or idle between free ones."""
    result = run(cost, Fault(5.0005, "block_task", vertex="Busy", duration=2.5), rate=rate, duration=12)
    readings = [row["value"] for row in result.metrics.to_pylist()
                if row["vertex"].startswith("Busy") and row["metric"] == "mailboxLatencyMs_max"]
    assert 2400 <= max(readings) <= 2500
