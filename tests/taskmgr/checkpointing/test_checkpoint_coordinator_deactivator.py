"""When the periodic checkpoint scheduler runs: Flink 2.x's
ExecutionTrackingCheckpointCoordinatorDeActivator, on its own and in a job that loses a task."""

from __future__ import annotations

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import NULL_TRACER
from taskmgr.checkpointing.checkpoint_coordinator_deactivator import ExecutionTrackingCheckpointCoordinatorDeActivator
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.execution_state import ExecutionState
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobStatus
from taskmgr.restart_strategy import RestartStrategy

DEPLOYING, RUNNING, FINISHED = ExecutionState.DEPLOYING, ExecutionState.RUNNING, ExecutionState.FINISHED


class Scheduler:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start_checkpoint_scheduler(self) -> None:
        self.calls.append("start")

    def stop_checkpoint_scheduler(self) -> None:
        self.calls.append("stop")


def deactivator() -> tuple[ExecutionTrackingCheckpointCoordinatorDeActivator, Scheduler]:
    scheduler = Scheduler()
    return ExecutionTrackingCheckpointCoordinatorDeActivator(scheduler, {"a": DEPLOYING, "b": DEPLOYING}), scheduler


def test_the_scheduler_starts_once_the_job_runs_and_every_task_runs():
    d, scheduler = deactivator()
    d.on_state_update("a", RUNNING)
    d.job_status_changes(running=True)
    assert scheduler.calls == []  # b is still being deployed
    d.on_state_update("b", RUNNING)
    assert scheduler.calls == ["start"]
    d.on_state_update("a", FINISHED)  # a finished task does not stop it
    assert scheduler.calls == ["start"]


def test_a_task_that_stops_running_or_the_job_stop_the_scheduler():
    for leaves in (ExecutionState.CANCELED, ExecutionState.FAILED):
        d, scheduler = deactivator()
        d.job_status_changes(running=True)
        d.on_state_update("a", RUNNING)
        d.on_state_update("b", RUNNING)
        d.on_state_update("a", leaves)
        assert scheduler.calls == ["start", "stop"]
    d.on_state_update("a", RUNNING)
    d.job_status_changes(running=False)
    assert scheduler.calls == ["start", "stop", "start", "stop"]


def test_flink_lifecycle_task_failure_restart_and_finish():
    """Flink's ExecutionTrackingCheckpointCoordinatorDeActivatorTest: testBasicLifecycle
    (deploying tasks keep it off; all running starts it; the job finishing stops it),
    testTaskFailure, testJobRestart (FAILED, RESTARTING, INITIALIZING stop it; RUNNING again
    with the tasks running starts it) and testJobFinish (no tasks: the job's status alone)."""
    d, scheduler = deactivator()
    d.job_status_changes(running=True)
    d.on_state_update("a", RUNNING)
    d.on_state_update("b", RUNNING)
    d.job_status_changes(running=False)  # FINISHED
    assert scheduler.calls == ["start", "stop"]

    d, scheduler = deactivator()
    d.job_status_changes(running=True)
    d.on_state_update("a", RUNNING)
    d.on_state_update("b", RUNNING)
    d.on_state_update("a", ExecutionState.FAILED)
    assert scheduler.calls == ["start", "stop"]

    d, scheduler = deactivator()
    d.job_status_changes(running=True)
    d.on_state_update("a", RUNNING)
    d.on_state_update("b", RUNNING)
    for _ in ("FAILED", "RESTARTING", "INITIALIZING"):
        d.job_status_changes(running=False)
    d.job_status_changes(running=True)
    assert scheduler.calls == ["start", "stop", "start"]

    scheduler = Scheduler()
    d = ExecutionTrackingCheckpointCoordinatorDeActivator(scheduler, {})
    d.job_status_changes(running=True)
    d.job_status_changes(running=False)
    assert scheduler.calls == ["start", "stop"]


def test_a_dropped_connection_leaves_the_source_running_and_one_checkpoint_pending():
    """The connection drops at 2 s while the map still works through the buffers it holds
    (its failure comes after the run). The source's partition outlives its dropped reader
    (Flink 2.x counts the producer among its users), so the source runs on, back-pressured,
    and the scheduler with it: the checkpoint triggered next stays in progress, its barrier
    queued for the gone reader, and no other is triggered while it is (one at a time)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(0.25)
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    (env.from_generator().name("Seq").rebalance().map(cost="5ms").name("Slow")
        .slot_sharing_group("slow").sink_to(DiscardingSink()))
    job = JobConfig(4, task_managers=2, restart=RestartStrategy("none"))
    result = kernel.run(run_job, env, ClusterConfig(task_managers=2), job, NULL_TRACER, None, None,
                        (Fault(2.0, "drop_connection", between=("tm-0", "tm-1")),), mode="sim")
    assert result.status is JobStatus.FAILED and "Lost connection" in str(result.error)
    *before, after = result.checkpoints
    assert len(before) == 8  # every 250 ms until 2 s
    assert all(c["status"] == "COMPLETED" and c["trigger_s"] < 2.0 for c in before)
    assert after["status"] == "IN_PROGRESS" and after["trigger_s"] > 2.0
