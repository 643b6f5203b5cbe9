"""CheckpointFailureManager (Flink's execution.checkpointing.tolerable-failed-checkpoints):
which checkpoint failures count, and when they fail the job; end to end, an aligned
checkpoint that expires under backpressure fails the job, which restarts; and a checkpoint
pending when the job ends fails with the coordinator's shutdown, uncounted."""

import pytest

from graph import CheckpointingMode, DiscardingSink, StreamExecutionEnvironment
from taskmgr.checkpointing.checkpoint_failure_manager import CheckpointFailureManager, FlinkRuntimeException
from taskmgr.cluster import execute


def manager(tolerable: int) -> tuple[CheckpointFailureManager, list[BaseException]]:
    failures: list[BaseException] = []
    return CheckpointFailureManager(tolerable, failures.append), failures


def test_the_first_counted_failure_fails_the_job_by_default() -> None:
    m, failures = manager(0)
    m.handle_checkpoint_failure(1, "CHECKPOINT_DECLINED_TASK_NOT_READY")  # not counted, as in Flink
    m.handle_checkpoint_failure(2, "JOB_FAILOVER_REGION")
    assert failures == []
    m.handle_checkpoint_failure(3, "CHECKPOINT_EXPIRED")
    [failure] = failures
    assert isinstance(failure, FlinkRuntimeException)
    assert str(failure).startswith("Exceeded checkpoint tolerable failure threshold. The latest checkpoint "
                                   "failed due to Checkpoint expired before completing.")


def test_consecutive_failures_count_until_a_checkpoint_completes() -> None:
    m, failures = manager(2)
    m.handle_checkpoint_failure(1, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_failure(2, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_success(3)
    m.handle_checkpoint_failure(2, "CHECKPOINT_EXPIRED")  # older than the last completed: ignored
    m.handle_checkpoint_failure(4, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_failure(4, "CHECKPOINT_EXPIRED")  # one checkpoint counts once
    m.handle_checkpoint_failure(5, "CHECKPOINT_EXPIRED")
    assert failures == []
    m.handle_checkpoint_failure(6, "CHECKPOINT_EXPIRED")
    assert len(failures) == 1


def slow_map(tolerable: int | None) -> StreamExecutionEnvironment:
    """Issue 8's job with aligned checkpoints that expire after 20 s (they need ~148 s)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(3)
    config = env.get_checkpoint_config().set_checkpoint_timeout("20s")
    if tolerable is not None:
        config.set_tolerable_checkpoint_failure_number(tolerable)
    (env.from_generator(record_size=8).name("Seq").rebalance()
        .map(cost="5ms").name("Slow").slot_sharing_group("slow").sink_to(DiscardingSink()))
    return env


def test_an_expired_checkpoint_fails_the_job_which_restarts_by_flinks_default() -> None:
    result = execute(slow_map(None), duration=30, task_managers=2)
    expired = [c for c in result.checkpoints if c["failure"] == "CHECKPOINT_EXPIRED"]
    assert expired and expired[0]["trigger_s"] + 20 == pytest.approx(result.restart_history[0].failed_at_s, abs=0.01)
    restart = result.restart_history[0]
    assert restart.cause.startswith("FlinkRuntimeException: Exceeded checkpoint tolerable failure threshold")
    assert 1000 <= restart.downtime_ms <= 1110  # exponential-delay's first backoff
    assert (restart.task, restart.task_manager) == (None, None)  # the job's failure, no task's
    tolerant = execute(slow_map(10), duration=30, task_managers=2).raise_for_status()
    assert tolerant.restart_history == [] and any(c["failure"] == "CHECKPOINT_EXPIRED" for c in tolerant.checkpoints)


def test_a_checkpoint_pending_when_the_job_finishes_fails_as_the_scheduler_stops() -> None:
    """A bounded job that finishes by itself: its status leaves RUNNING, so Flink's
    deactivator stops the periodic scheduler, which fails what is pending (not counted
    against the tolerable failures) before the coordinator shuts down; the run does not fail."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(0.5)
    env.get_checkpoint_config().set_checkpointing_mode(CheckpointingMode.AT_LEAST_ONCE)
    (env.from_generator(record_size=8, count=300).name("Seq").rebalance()
        .map(cost="5ms").name("Slow").slot_sharing_group("slow").sink_to(DiscardingSink()))
    result = execute(env, duration=30, task_managers=2).raise_for_status()
    assert result.duration < 2  # 300 records at 5 ms: the job ended by itself
    statuses = [(c["status"], c["failure"]) for c in result.checkpoints]
    assert ("COMPLETED", None) in statuses
    assert ("FAILED", "CHECKPOINT_COORDINATOR_SUSPEND") in statuses
    assert all(status != "IN_PROGRESS" for status, _ in statuses)
