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


#: Flink 2.3's CheckpointFailureReason names (all of them).
ALL_REASONS = ("PERIODIC_SCHEDULER_SHUTDOWN", "TOO_MANY_CHECKPOINT_REQUESTS", "MINIMUM_TIME_BETWEEN_CHECKPOINTS",
               "NOT_ALL_REQUIRED_TASKS_RUNNING", "CHECKPOINT_SUBSUMED", "CHECKPOINT_COORDINATOR_SUSPEND",
               "CHECKPOINT_COORDINATOR_SHUTDOWN", "CHANNEL_STATE_SHARED_STREAM_EXCEPTION", "JOB_FAILOVER_REGION",
               "CHECKPOINT_DECLINED_TASK_NOT_READY", "CHECKPOINT_DECLINED_TASK_CLOSING",
               "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER", "CHECKPOINT_DECLINED_SUBSUMED",
               "CHECKPOINT_DECLINED_INPUT_END_OF_STREAM", "TASK_FAILURE", "TASK_CHECKPOINT_FAILURE",
               "UNKNOWN_TASK_CHECKPOINT_NOTIFICATION_FAILURE", "TRIGGER_CHECKPOINT_FAILURE", "BLOCKING_OUTPUT_EXIST",
               "IO_EXCEPTION", "CHECKPOINT_ASYNC_EXCEPTION", "CHECKPOINT_DECLINED", "CHECKPOINT_EXPIRED",
               "FINALIZE_CHECKPOINT_FAILURE")


def test_which_reasons_count() -> None:
    """Flink's testTotalCountValue, with Flink 2.3's reasons: with none tolerated, each of
    the five counted reasons fails the job, no other does (BLOCKING_OUTPUT_EXIST included)."""
    m, failures = manager(0)
    failed_by = []
    for checkpoint_id, reason in enumerate(ALL_REASONS, start=1):
        m.handle_checkpoint_failure(checkpoint_id, reason)
        if len(failures) > len(failed_by):
            failed_by.append(reason)
    assert failed_by == ["IO_EXCEPTION", "CHECKPOINT_ASYNC_EXCEPTION", "CHECKPOINT_DECLINED", "CHECKPOINT_EXPIRED",
                         "FINALIZE_CHECKPOINT_FAILURE"]


def test_continuous_failures_fail_the_job_once_more_than_tolerated() -> None:
    """Flink's testContinuousFailure: a failover's abort does not count, nor break the run."""
    m, failures = manager(2)
    m.handle_checkpoint_failure(1, "CHECKPOINT_DECLINED")
    m.handle_checkpoint_failure(2, "CHECKPOINT_DECLINED")
    m.handle_checkpoint_failure(3, "JOB_FAILOVER_REGION")
    assert failures == []
    m.handle_checkpoint_failure(4, "CHECKPOINT_DECLINED")
    assert len(failures) == 1


def test_a_success_breaks_the_run_of_failures() -> None:
    """Flink's testBreakContinuousFailure."""
    m, failures = manager(2)
    m.handle_checkpoint_failure(1, "IO_EXCEPTION")
    m.handle_checkpoint_failure(2, "CHECKPOINT_DECLINED")
    m.handle_checkpoint_failure(3, "JOB_FAILOVER_REGION")
    m.handle_checkpoint_success(4)
    m.handle_checkpoint_failure(5, "CHECKPOINT_EXPIRED")
    assert failures == []


def test_failures_of_past_or_already_counted_checkpoints_do_not_count() -> None:
    """Flink's testIgnoresPastCheckpoints and testIgnoreOneCheckpointRepeatedlyCountMultiTimes:
    only failures of checkpoints after the last completed one count (Flink: id >
    lastSucceededCheckpointId), each checkpoint once."""
    m, failures = manager(2)
    m.handle_checkpoint_failure(1, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_failure(2, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_success(2)
    m.handle_checkpoint_failure(1, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_failure(2, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_failure(3, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_failure(3, "CHECKPOINT_EXPIRED")
    m.handle_checkpoint_failure(4, "CHECKPOINT_EXPIRED")
    assert failures == []
    m.handle_checkpoint_failure(5, "CHECKPOINT_EXPIRED")
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
