"""The CheckpointCoordinator against the single-threaded cases of Flink's
CheckpointCoordinatorTest, CheckpointCoordinatorTriggeringTest and CheckpointRequestDeciderTest
(behaviour ported, each test names its Flink case). Two tasks, "a" and "b", take every
checkpoint; the test acknowledges or declines for them and reads what the coordinator sent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from graph.api.environment import CheckpointConfig
from scenarios.run import format_checkpoints
from shuffle import kernel
from shuffle.api.events import CheckpointBarrier
from shuffle.channel_state import ChannelStateSnapshot
from taskmgr.checkpointing.checkpoint_coordinator import (
    CHECKPOINT_COORDINATOR_SUSPEND,
    CHECKPOINT_EXPIRED,
    CHECKPOINT_SUBSUMED,
    CheckpointCoordinator,
    PendingCheckpoint,
)
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.checkpointing.checkpoint_failure_manager import CheckpointFailureManager, FlinkRuntimeException
from taskmgr.checkpointing.checkpoint_plan import NOT_ALL_REQUIRED_TASKS_RUNNING, CheckpointPlan, CheckpointPlanError
from taskmgr.checkpointing.single_checkpoint_barrier_handler import CheckpointMetrics
from taskmgr.checkpointing.subtask_checkpoint_coordinator import SubtaskCheckpointAck

TASKS = ("a", "b")


class TwoTasksPlan:
    """Every checkpoint waits for both tasks; the plans numbered in `fail` cannot be made."""

    def __init__(self, fail: frozenset[int] = frozenset()) -> None:
        self.fail = fail
        self.calls = 0

    def calculate_checkpoint_plan(self, finished: object) -> CheckpointPlan:
        self.calls += 1
        if self.calls in self.fail:
            raise CheckpointPlanError(f"{NOT_ALL_REQUIRED_TASKS_RUNNING}: a task is not running")
        return CheckpointPlan(TASKS, TASKS, (), ())


class Job:
    """The coordinator and what it sent to the tasks (checkpoint ids, in order)."""

    def __init__(self, config: CheckpointConfig, failure_manager: CheckpointFailureManager | None,
                 plan: TwoTasksPlan) -> None:
        self.triggered: list[int] = []  # one entry per checkpoint (its barrier went to both tasks)
        self.aborted: list[int] = []
        self.completed: list[int] = []
        costs = CheckpointCosts(trigger_delay=0.0, ack_latency=0.0)
        self.coordinator = CheckpointCoordinator(config, costs, plan, set, self._trigger, self._abort,
                                                 self._complete, kernel.current_time, np.random.default_rng(7),
                                                 failure_manager=failure_manager)

    async def _trigger(self, execution_id: str, barrier: CheckpointBarrier) -> None:
        if execution_id == TASKS[0]:
            self.triggered.append(barrier.id)

    async def _abort(self, checkpoint_id: int) -> None:
        self.aborted.append(checkpoint_id)

    async def _complete(self, checkpoint_id: int) -> None:
        self.completed.append(checkpoint_id)

    def ack(self, task: str, checkpoint_id: int) -> None:
        self.coordinator.receive_acknowledge(task, SubtaskCheckpointAck(
            checkpoint_id, CheckpointMetrics(checkpoint_id), 0, ChannelStateSnapshot()))

    def ack_all(self, checkpoint_id: int) -> None:
        for task in TASKS:
            self.ack(task, checkpoint_id)

    def checkpoint(self, checkpoint_id: int) -> PendingCheckpoint:
        [checkpoint] = [c for c in self.coordinator.checkpoints
                        if isinstance(c, PendingCheckpoint) and c.checkpoint_id == checkpoint_id]
        return checkpoint

    async def until_triggered(self, count: int) -> None:
        """Let time pass (1 ms steps) until `count` checkpoints were triggered."""
        while len(self.triggered) < count:
            await kernel.sleep(0.001)

    async def settle(self) -> None:
        """Let the coordinator's spawned work (RPCs, queued requests) run at this instant."""
        for _ in range(5):
            await kernel.sleep(0)


def run(config: CheckpointConfig, script: Callable[[Job], Awaitable[None]],
        failure_manager: CheckpointFailureManager | None = None, plan: TwoTasksPlan | None = None) -> Job:
    """Start the periodic scheduler at t = 0 and run `script` in the sim kernel."""

    async def main() -> Job:
        job = Job(config, failure_manager, plan or TwoTasksPlan())
        async with kernel.open_nursery() as nursery:
            await nursery.start(job.coordinator.run)
            job.coordinator.start_checkpoint_scheduler()
            await script(job)
            nursery.cancel_scope.cancel()
        return job

    return kernel.run(main, mode="sim")


def test_trigger_and_confirm_a_checkpoint():
    """testTriggerAndConfirmSimpleCheckpoint: the checkpoint waits for both tasks; a repeated
    acknowledgement or one from a task the checkpoint does not wait for changes nothing; the
    last one completes it and the tasks are told (notifyCheckpointComplete)."""

    async def script(job: Job) -> None:
        await job.until_triggered(1)
        job.ack("a", 1)
        job.ack("a", 1)
        job.ack("z", 1)
        pending = job.coordinator.pending[1]
        assert pending.not_yet_acknowledged == {"b"} and list(pending.acks) == ["a"]
        job.ack("b", 1)
        await job.settle()
        assert job.coordinator.pending == {} and job.checkpoint(1).status == "COMPLETED"
        assert job.completed == [1] and job.aborted == []

    run(CheckpointConfig(interval=10.0), script)


def test_a_decline_fails_the_checkpoint_and_the_tasks_are_told():
    """testTriggerAndDeclineCheckpointSimple: a decline from one task (after the other
    acknowledged) fails the checkpoint with the task's reason, the tasks are told
    (notifyCheckpointAborted); declines after that change nothing, and no checkpoint is
    triggered in its place before the next tick."""

    async def script(job: Job) -> None:
        await job.until_triggered(1)
        job.ack("b", 1)
        job.coordinator.receive_decline("a", 1, "CHECKPOINT_DECLINED_TASK_NOT_READY")
        job.coordinator.receive_decline("a", 1, "CHECKPOINT_DECLINED_TASK_NOT_READY")
        job.coordinator.receive_decline("b", 1, "CHECKPOINT_DECLINED")
        await job.settle()
        checkpoint = job.checkpoint(1)
        assert checkpoint.status == "FAILED" and checkpoint.failure == "CHECKPOINT_DECLINED_TASK_NOT_READY (declined by a)"
        assert job.coordinator.pending == {} and job.aborted == [1] and job.triggered == [1]

    run(CheckpointConfig(interval=10.0), script)


def test_a_decline_fails_only_its_checkpoint():
    """testTriggerAndDeclineCheckpointComplex: of two pending checkpoints, the declined one
    fails; the other goes on and completes."""

    async def script(job: Job) -> None:
        await job.until_triggered(2)
        job.coordinator.receive_decline("a", 1, "CHECKPOINT_DECLINED")
        await job.settle()
        assert list(job.coordinator.pending) == [2] and job.aborted == [1]
        job.ack_all(2)
        await job.settle()
        assert job.completed == [2]

    run(CheckpointConfig(interval=1.0, max_concurrent=2), script)


def test_concurrent_checkpoints_complete_in_any_order_with_ids_increasing():
    """testMultipleConcurrentCheckpoints: with two at once, the older completing first
    leaves the newer pending; ids go 1, 2, 3 and each completion is told."""

    async def script(job: Job) -> None:
        await job.until_triggered(2)
        job.ack_all(1)
        await job.settle()
        assert list(job.coordinator.pending) == [2]
        await job.until_triggered(3)
        job.ack_all(3)
        job.ack_all(2)  # 3 completed: 2 was subsumed, its late acks change nothing
        await job.settle()
        assert job.triggered == [1, 2, 3] and job.completed == [1, 3] and job.aborted == [2]
        assert job.checkpoint(2).failure == CHECKPOINT_SUBSUMED

    run(CheckpointConfig(interval=1.0, max_concurrent=2), script)


def test_a_newer_completed_checkpoint_subsumes_the_older_pending_one_and_the_tasks_are_told():
    """testSuccessfulCheckpointSubsumesUnsuccessful / testMaxConcurrentAttemptsWithSubsumption:
    2 completing fails 1 (CHECKPOINT_SUBSUMED, its abort is told), which frees both slots:
    the next two ticks trigger 3 and 4."""

    async def script(job: Job) -> None:
        await job.until_triggered(2)
        job.ack("a", 1)
        job.ack_all(2)
        await job.settle()
        assert job.coordinator.pending == {} and job.aborted == [1] and job.completed == [2]
        assert job.checkpoint(1).failure == CHECKPOINT_SUBSUMED
        await job.until_triggered(4)
        assert sorted(job.coordinator.pending) == [3, 4]

    run(CheckpointConfig(interval=1.0, max_concurrent=2), script)


def test_the_timeout_expires_a_pending_checkpoint_and_late_messages_change_nothing():
    """testCheckpointTimeoutIsolated / testStateCleanupForLateOrUnknownMessages: expiry at the
    timeout after the trigger (CHECKPOINT_EXPIRED, told to the tasks); late acknowledgements
    and declines, and those for checkpoints never triggered, are dropped."""

    async def script(job: Job) -> None:
        await job.until_triggered(1)
        job.ack("a", 1)
        await kernel.sleep(job.checkpoint(1).trigger_time + 0.5 - 0.001 - kernel.current_time())
        assert 1 in job.coordinator.pending
        await kernel.sleep(0.002)
        checkpoint = job.checkpoint(1)
        assert checkpoint.status == "FAILED" and checkpoint.failure == CHECKPOINT_EXPIRED
        assert checkpoint.end_time - checkpoint.trigger_time == pytest.approx(0.5)
        job.ack("b", 1)
        job.coordinator.receive_decline("b", 1, "CHECKPOINT_DECLINED")
        job.ack_all(99)
        job.coordinator.receive_decline("a", 99, "CHECKPOINT_DECLINED")
        await job.settle()
        assert checkpoint.failure == CHECKPOINT_EXPIRED and job.aborted == [1] and job.completed == []
        assert [c.checkpoint_id for c in job.coordinator.checkpoints] == [1]

    run(CheckpointConfig(interval=10.0, timeout=0.5), script)


@pytest.mark.parametrize("max_concurrent", [1, 2, 5])
def test_at_most_max_concurrent_checkpoints_and_one_more_once_one_completes(max_concurrent: int):
    """testMaxConcurrentAttempts1/2/5: the ticks trigger `max_concurrent` checkpoints, the
    next ones wait; the first completing lets one go (at once: it was queued); then no more."""
    interval = 1.0

    async def script(job: Job) -> None:
        await job.until_triggered(max_concurrent)
        first = job.checkpoint(1).trigger_time
        await kernel.sleep(first + max_concurrent + 0.5 - kernel.current_time())  # one tick more
        assert job.triggered == list(range(1, max_concurrent + 1))
        job.ack_all(1)
        await job.settle()
        assert job.triggered == list(range(1, max_concurrent + 2)) and job.completed == [1]
        await kernel.sleep(2.0)
        assert len(job.triggered) == max_concurrent + 1

    run(CheckpointConfig(interval=interval, max_concurrent=max_concurrent), script)


def test_ids_increase_across_failed_checkpoints():
    """checkRecordedTriggeredCheckpoints / CheckpointIDCounter: every checkpoint, also one
    that expired or was declined, takes the next id; the barriers' timestamps do not go back."""

    async def script(job: Job) -> None:
        await job.until_triggered(1)
        job.coordinator.receive_decline("a", 1, "CHECKPOINT_DECLINED")
        await job.until_triggered(2)
        await kernel.sleep(0.6)  # 2 expires
        await job.until_triggered(3)
        job.ack_all(3)
        await job.settle()

    job = run(CheckpointConfig(interval=1.0, timeout=0.5), script)
    assert [(c.checkpoint_id, c.status) for c in job.coordinator.checkpoints] == [
        (1, "FAILED"), (2, "FAILED"), (3, "COMPLETED")]
    stamps = [c.barrier.timestamp for c in job.coordinator.checkpoints]
    assert stamps == sorted(stamps)


def test_an_expired_checkpoint_fails_the_job_when_none_is_tolerated():
    """testExpiredCheckpointExceedsTolerableFailureNumber: expiry counts (tolerable 0: the
    job fails); a decline with a task-not-ready reason does not."""
    failures: list[BaseException] = []

    async def script(job: Job) -> None:
        await job.until_triggered(1)
        job.coordinator.receive_decline("a", 1, "CHECKPOINT_DECLINED_TASK_NOT_READY")
        await job.until_triggered(2)
        assert failures == []
        await kernel.sleep(0.6)

    run(CheckpointConfig(interval=1.0, timeout=0.5), script, CheckpointFailureManager(0, failures.append))
    [failure] = failures
    assert isinstance(failure, FlinkRuntimeException) and "Checkpoint expired before completing." in str(failure)


def test_stopping_ends_the_ticks_and_a_restart_triggers_after_the_min_pause():
    """testPeriodicTriggering (stop: no more triggers; start again: triggers again, ids go
    on) and Flink 2.3's startCheckpointScheduler: only its first start waits the random
    initial delay; a later start (a restarted job) waits the min pause, here 0: at once."""

    async def script(job: Job) -> None:
        await job.until_triggered(2)
        job.ack_all(1)
        job.coordinator.stop_checkpoint_scheduler()
        await job.settle()
        assert job.checkpoint(2).failure == CHECKPOINT_COORDINATOR_SUSPEND and job.aborted == [2]
        await kernel.sleep(5.0)
        assert job.triggered == [1, 2]
        restart = kernel.current_time()
        job.coordinator.start_checkpoint_scheduler()
        await job.until_triggered(3)
        assert job.checkpoint(3).trigger_time == restart
        await job.until_triggered(4)
        assert job.checkpoint(4).trigger_time == restart + 1.0

    run(CheckpointConfig(interval=1.0, max_concurrent=2), script)


def test_a_restart_waits_the_min_pause_since_it_started():
    """Flink 2.3: triggerDelay is the min pause after the first start (the min pause since the
    last completed checkpoint is the decider's, and has passed here)."""

    async def script(job: Job) -> None:
        await job.until_triggered(1)
        job.ack_all(1)
        await kernel.sleep(3.0)
        job.coordinator.stop_checkpoint_scheduler()
        restart = kernel.current_time()
        job.coordinator.start_checkpoint_scheduler()
        await job.until_triggered(len(job.triggered) + 1)
        assert job.coordinator.checkpoints[-1].trigger_time == pytest.approx(restart + 0.4)

    run(CheckpointConfig(interval=1.0, min_pause=0.4), script)


def test_the_counts_of_completed_failed_and_in_progress_checkpoints():
    """CheckpointStatsCountsTest / DefaultCheckpointStatsTrackerTest: a trigger whose plan
    failed counts as failed without having been in progress (no id, no history figures);
    summary.json lists it and the run's line counts it among the failed."""

    async def script(job: Job) -> None:
        await job.until_triggered(1)
        job.ack_all(1)
        await job.until_triggered(2)  # the second plan failed at the tick before
        job.coordinator.receive_decline("b", 2, "CHECKPOINT_DECLINED_TASK_NOT_READY")
        await job.until_triggered(3)

    job = run(CheckpointConfig(interval=1.0), script, plan=TwoTasksPlan(fail=frozenset({2})))
    stats = [c.stats() for c in job.coordinator.checkpoints]
    assert [(s["id"], s["status"]) for s in stats] == [(1, "COMPLETED"), (None, "FAILED"), (2, "FAILED"),
                                                      (3, "IN_PROGRESS")]
    assert format_checkpoints({"checkpoints": stats}).startswith("checkpoints: 1 completed, 2 failed, 1 in progress")
