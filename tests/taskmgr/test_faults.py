"""Faults injected at exact virtual times: the job ends as Flink's would, in bounded time,
with every network buffer back in its pool."""

from __future__ import annotations

import pytest

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobResult, JobStatus


def pipeline() -> StreamExecutionEnvironment:
    """A source on tm-0 sending to two map subtasks, one of them on tm-1 (a remote channel)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(rate=1000).name("Gen").rebalance()
        .map(cost="0.5ms").name("Work").set_parallelism(2).sink_to(DiscardingSink()))
    return env


def run(*faults: Fault, duration: float = 10.0) -> JobResult:
    return kernel.run(run_job, pipeline(), ClusterConfig(task_managers=2), JobConfig(duration, task_managers=2),
                      NULL_TRACER, None, None, faults, mode="sim")


def per_second(result: JobResult, vertex: str, metric: str) -> dict[int, float]:
    rows = result.metrics.to_pylist()
    values: dict[int, float] = {}
    for row in rows:
        if row["vertex"].startswith(vertex) and row["metric"] == metric:
            values[round(row["t"])] = values.get(round(row["t"]), 0.0) + row["value"]
    return values


def assert_failed_cleanly(result: JobResult, cause: str, before: float) -> None:
    assert result.status is JobStatus.FAILED
    assert cause in f"{type(result.error).__name__}: {result.error}", result.error
    assert result.duration < before
    assert result.invariants["buffers_leaked"] == 0


def test_a_killed_task_manager_fails_the_job() -> None:
    # the sink on tm-0 reads from Work's subtask on tm-1: its connection closes at once
    assert_failed_cleanly(run(Fault(3.0, "kill_task_manager", task_manager="tm-1")),
                          "RemoteTransportError: Connection unexpectedly closed by remote task manager 'tm-1'",
                          before=3.5)


def test_a_dropped_connection_fails_the_job_with_a_transport_error() -> None:
    # Flink's RemoteTransportException for a connection reset by the peer
    # (CreditBasedPartitionRequestClientHandler.exceptionCaught), not the I/O error's own text
    result = run(Fault(3.0, "drop_connection", between=("tm-0", "tm-1")))
    assert_failed_cleanly(result, "RemoteTransportError: Lost connection to task manager 'tm-1'. "
                          "This indicates that the remote task manager was lost.", before=3.5)


def test_a_corrupted_frame_fails_the_connection_as_flink_does() -> None:
    result = run(Fault(3.0, "corrupt_frame", between=("tm-0", "tm-1")))
    assert_failed_cleanly(result, "Network stream corrupted", before=3.5)


def test_a_user_function_failure_fails_the_job_with_it() -> None:
    result = run(Fault(3.0, "fail_task", vertex="Work", subtask=1, message="bad record"))
    assert_failed_cleanly(result, "InjectedFailure: bad record", before=3.5)


@pytest.mark.parametrize("name", ["Source: Gen", "Gen"])
def test_a_fault_names_a_source_by_its_vertex_or_by_the_name_the_program_gave_it(name: str) -> None:
    """Flink names the source's vertex `Source: Gen`; the program's own name finds it too."""
    result = run(Fault(3.0, "fail_task", vertex=name, message="bad record"))
    assert_failed_cleanly(result, "InjectedFailure: bad record", before=3.5)
    assert result.failed_task == "Source: Gen (1/1)"


def test_a_paused_task_stops_then_catches_up() -> None:
    result = run(Fault(3.0, "pause_task", vertex="Work", subtask=1, duration=3.0))
    assert result.status is JobStatus.FINISHED and result.invariant_violations() == []
    received = per_second(result, "Work", "numRecordsInPerSecond")
    assert received[2] == pytest.approx(1000, rel=0.05)
    assert received[5] == pytest.approx(500, rel=0.1)  # subtask 1 takes nothing: only subtask 0's half
    assert received[9] == pytest.approx(1000, rel=0.05)


def test_a_paused_link_stalls_the_remote_channel_until_it_resumes() -> None:
    result = run(Fault(3.0, "pause_link", between=("tm-0", "tm-1"), duration=3.0))
    assert result.status is JobStatus.FINISHED and result.invariant_violations() == []
    received = per_second(result, "Work", "numRecordsInPerSecond")
    assert received[2] == pytest.approx(1000, rel=0.05)
    assert received[5] == pytest.approx(500, rel=0.1)  # the remote subtask gets nothing
    assert received[7] > 1200  # what waited at the producer arrives at once
    assert received[9] == pytest.approx(1000, rel=0.05)


def test_a_slow_link_slows_the_job_only_while_it_lasts() -> None:
    # 500 records/s of 29 bytes need 14.5 kB/s; at 10 kB/s the remote subtask falls behind.
    slow = Fault(3.0, "slow_link", between=("tm-0", "tm-1"), duration=2.0, bandwidth=10_000.0, latency=0.05)
    result = run(slow)
    assert result.status is JobStatus.FINISHED and result.invariant_violations() == []
    received = per_second(result, "Work", "numRecordsInPerSecond")
    assert received[4] < 900 and received[9] == pytest.approx(1000, rel=0.05)
