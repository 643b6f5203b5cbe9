"""A failed producer cancels its remote consumers itself (Flink's ProducerFailedException).

Its partitions are released with its failure cause; the server answers a reader it polls
then (here: queued while the connection was busy) with the error, and the consumer ends
CANCELED, not FAILED, one link latency after the failure: before the JobManager's
cancellation (a round trip to it) reaches it. A local consumer is not told of the release
(as in Flink), so the JobManager cancels it. The job's root cause is the producer's own
failure either way."""

from __future__ import annotations

import pytest

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.execution_state import ExecutionState
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobResult, JobStatus
from taskmgr.restart_strategy import RestartStrategy
from taskmgr.task import Task

#: What a task's end is recorded as: its final state, whether it had been asked to cancel, when.
TaskEnd = tuple[ExecutionState, bool, float]


def pipeline() -> StreamExecutionEnvironment:
    """A source as fast as it can go to two map subtasks, one in its own TaskManager (a local
    channel) and one in the other (a remote channel), then a sink."""
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(rate=0).name("Gen").rebalance()
        .map().name("Work").set_parallelism(2).sink_to(DiscardingSink()))
    return env


@pytest.fixture
def task_ends(monkeypatch) -> dict[str, TaskEnd]:
    """Each task's end, by its name with subtask, as it happens (the first attempt's: a restart
    does not overwrite it)."""
    ends: dict[str, TaskEnd] = {}
    transition = Task._transition

    def recording(task: Task, state: ExecutionState, cause: BaseException | None = None) -> None:
        if state.is_terminal and not task.state.is_terminal:
            ends.setdefault(task.name, (state, task.cancel_requested, kernel.current_time()))
        transition(task, state, cause)
    monkeypatch.setattr(Task, "_transition", recording)
    return ends


def run(restart: RestartStrategy) -> JobResult:
    job = JobConfig(1.5, task_managers=2, restart=restart)
    return kernel.run(run_job, pipeline(), ClusterConfig(task_managers=2), job, NULL_TRACER, None, None,
                      [Fault(0.5, "fail_task", vertex="Gen", message="bad record")], mode="sim")


def remote_and_local_work(result: JobResult) -> tuple[str, str]:
    """The names of the Work subtasks in the other TaskManager than the source, and in its own."""
    [source_tm] = result.placement["Source: Gen"]
    remote = [f"Work ({i + 1}/2)" for i, tm in enumerate(result.placement["Work"]) if tm != source_tm]
    local = [f"Work ({i + 1}/2)" for i, tm in enumerate(result.placement["Work"]) if tm == source_tm]
    assert len(remote) == len(local) == 1, result.placement
    return remote[0], local[0]


def test_a_remote_consumer_of_a_failed_producer_cancels_itself(task_ends) -> None:
    result = run(RestartStrategy("none"))
    assert result.status is JobStatus.FAILED
    assert f"{type(result.error).__name__}: {result.error}" == "InjectedFailure: bad record"
    assert result.failed_task == "Source: Gen (1/1)"
    assert result.task_states == {"Source: Gen": ["FAILED"], "Work": ["CANCELED", "CANCELED"],
                                  "Sink: Writer": ["CANCELED"]}
    assert result.invariants["buffers_leaked"] == 0
    failed, _, failed_at = task_ends["Source: Gen (1/1)"]
    assert failed is ExecutionState.FAILED
    remote, local = remote_and_local_work(result)
    latency = NetworkConfig().link_latency
    state, asked, at = task_ends[remote]
    assert (state, asked) == (ExecutionState.CANCELED, False)  # by the ProducerFailedError it read
    assert at - failed_at == pytest.approx(latency, rel=0.01)
    state, asked, at = task_ends[local]
    assert (state, asked) == (ExecutionState.CANCELED, True)  # by the JobManager: one round trip
    assert at - failed_at == pytest.approx(2 * latency, rel=0.01)


def test_a_restart_after_a_producer_failure_names_the_producer_as_its_cause(task_ends) -> None:
    result = run(RestartStrategy("fixed_delay", attempts=1, delay=0.5))
    assert result.status is JobStatus.FINISHED, result.error
    first_attempt = sorted((name, state, asked) for name, (state, asked, _) in task_ends.items())
    assert first_attempt == [("Sink: Writer (1/1)", ExecutionState.CANCELED, True),
                             ("Source: Gen (1/1)", ExecutionState.FAILED, False),
                             ("Work (1/2)", ExecutionState.CANCELED, True),
                             ("Work (2/2)", ExecutionState.CANCELED, False)]
    [restart] = result.restart_history
    assert (restart.cause, restart.task) == ("InjectedFailure: bad record", "Source: Gen (1/1)")
    assert result.invariants["buffers_leaked"] == 0
