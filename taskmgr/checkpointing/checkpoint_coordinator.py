"""The JobManager's CheckpointCoordinator: periodic triggers at the sources, acknowledgements,
completion, expiry, declines (Flink's `CheckpointCoordinator` and `CheckpointRequestDecider`).

Flink's rules kept here:

- the periodic scheduler runs while the job runs and every task runs or has finished
  (`checkpoint_coordinator_deactivator`); its first start waits a random delay in [min
  pause, base interval], a start after that (a restarted job's) only the min pause (Flink
  2.3's triggerDelay), and it fires every base interval, the interval or the min pause if
  that is longer; stopping it fails the pending checkpoints and the queued requests
  (`CHECKPOINT_COORDINATOR_SUSPEND`);
- each tick is a trigger request; requests queue (up to 1,000) while `max_concurrent`
  checkpoints are pending, and each completed or failed checkpoint lets one queued request
  go, so a backlog left by checkpoints slower than the interval fires back to back;
- a request that comes before the min pause since the last *completed* checkpoint has
  passed is dropped and the scheduler restarts its ticks after the rest of the pause
  (`rescheduleTrigger`: later ticks keep that new phase);
- a plan that cannot be made fails the request before it gets an id (Flink counts it as a
  failed checkpoint with no entry in its history); a checkpoint that is not complete
  within `timeout` expires; a decline fails it and every task is told; one that completes
  fails the older ones still pending (`CHECKPOINT_SUBSUMED`).

Each checkpoint follows the plan of `checkpoint_plan` (FLIP-147): after some tasks have
finished it starts at the first running tasks and counts the finished ones as finished.
A finished task's share of the checkpoint is its final state: the operator state it
acknowledged to the last completed checkpoint before it ended (after its end of data,
so nothing changed since), without in-flight data (all of it was consumed before the
task finished). Flink keeps only a "finished" mark; the operator state is kept here so
that the exactly-once accounting and a restore see where a finished source stopped.
Every task is notified of a completed checkpoint (`notifyCheckpointComplete`): a task
that ended its input waits for one before it finishes.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shuffle import kernel
from shuffle.api.events import CheckpointBarrier, CheckpointOptions
from shuffle.channel_state import ChannelStateSnapshot
from shuffle.trace import NULL_TRACER, Tracer
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.checkpointing.checkpoint_failure_manager import CheckpointFailureManager
from taskmgr.checkpointing.checkpoint_plan import CheckpointPlanError, DefaultCheckpointPlanCalculator
from taskmgr.checkpointing.subtask_checkpoint_coordinator import SubtaskCheckpointAck
from taskmgr.processing_time import absolute_time_millis

CHECKPOINT_EXPIRED = "CHECKPOINT_EXPIRED"
#: Flink's reason for a pending checkpoint older than one that completed.
CHECKPOINT_SUBSUMED = "CHECKPOINT_SUBSUMED"
#: Flink's reason for what is pending or queued when the periodic scheduler stops (the job
#: or one of its tasks stopped running).
CHECKPOINT_COORDINATOR_SUSPEND = "CHECKPOINT_COORDINATOR_SUSPEND"
#: Flink's CheckpointRequestDecider queues at most this many trigger requests.
MAX_QUEUED_REQUESTS = 1000


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    trigger_time: float
    barrier: CheckpointBarrier
    not_yet_acknowledged: set[str]
    acks: dict[str, SubtaskCheckpointAck] = field(default_factory=dict)
    status: str = "IN_PROGRESS"
    failure: str | None = None
    end_time: float | None = None
    #: When the coordinator received the latest acknowledgement.
    latest_ack_time: float | None = None
    #: Finished tasks (execution id) -> their final state (None: the task ended without one).
    finished: dict[str, SubtaskCheckpointAck | None] = field(default_factory=dict)

    def task_states(self) -> dict[str, SubtaskCheckpointAck]:
        """Every task's share, the finished tasks' final states included (what a restore
        and the exactly-once accounting read)."""
        return {eid: ack for eid, ack in self.finished.items() if ack is not None} | self.acks

    @property
    def end_to_end_duration_ms(self) -> int | None:
        """Flink's end-to-end duration: from the trigger timestamp to the failure, else to the
        latest acknowledgement (the last, once completed), both the JobManager's clock in
        whole milliseconds; None while nothing was acknowledged (Flink's -1)."""
        end = self.end_time if self.status == "FAILED" else self.latest_ack_time
        if end is None:
            return None
        return max(0, absolute_time_millis(end) - self.barrier.timestamp)

    def stats(self) -> dict[str, Any]:
        """The checkpoint as summary.json lists it (Flink's names)."""
        acks = list(self.acks.values())
        # Flink's PendingCheckpointStats: unaligned once a subtask persisted in-flight data
        unaligned = any(a.unaligned_checkpoint for a in acks)
        return {
            "id": self.checkpoint_id,
            "status": self.status,
            "type": "UNALIGNED_CHECKPOINT" if unaligned else "CHECKPOINT",
            "trigger_s": round(self.trigger_time, 6),
            "duration_ms": self.end_to_end_duration_ms,
            "start_delay_ms": max((a.metrics.start_delay_ns / 1e6 for a in acks), default=0.0),
            "alignment_ms": max((a.metrics.alignment_duration_ns / 1e6 for a in acks), default=0.0),
            "sync_ms": max((a.sync_duration_ms for a in acks), default=0),
            "async_ms": max((a.async_duration_ms for a in acks), default=0),
            # Flink's processed_data: the bytes the subtasks processed during their alignments
            "processed_bytes": sum(a.metrics.bytes_processed_during_alignment for a in acks),
            "persisted_bytes": sum(a.persisted_bytes for a in acks),
            "state_bytes": sum(a.state_bytes for a in acks),
            # Flink reports finished tasks as acknowledged subtasks at the trigger
            "acknowledged": len(acks) + len(self.finished),
            "finished_tasks": len(self.finished),
            "failure": self.failure,
        }


@dataclass
class FailedTrigger:
    """A trigger request that failed before its checkpoint got an id (its plan could not be
    made). Flink counts it among the failed checkpoints, without an entry in its history."""

    trigger_time: float
    unaligned: bool
    failure: str
    status: str = "FAILED"

    def stats(self) -> dict[str, Any]:
        """The summary.json entry: an id of None and no figures."""
        return {"id": None, "status": self.status, "type": "UNALIGNED_CHECKPOINT" if self.unaligned else "CHECKPOINT",
                "trigger_s": round(self.trigger_time, 6), "duration_ms": None, "start_delay_ms": None,
                "alignment_ms": None, "sync_ms": None, "async_ms": None, "processed_bytes": None,
                "persisted_bytes": None, "state_bytes": None, "acknowledged": 0,
                "finished_tasks": 0, "failure": self.failure}


class CheckpointCoordinator:
    def __init__(self, config: Any, costs: CheckpointCosts, plan_calculator: DefaultCheckpointPlanCalculator,
                 finished_tasks: Callable[[], Collection[str]],
                 send_trigger: Callable[[str, CheckpointBarrier], Awaitable[None]],
                 send_abort: Callable[[int], Awaitable[None]],
                 send_complete: Callable[[int], Awaitable[None]],
                 job_time: Callable[[], float], rng: np.random.Generator, tracer: Tracer = NULL_TRACER,
                 failure_manager: CheckpointFailureManager | None = None) -> None:
        self.config = config
        self.costs = costs
        self.plan_calculator = plan_calculator
        self.finished_tasks = finished_tasks
        self.send_trigger = send_trigger
        self.send_abort = send_abort
        self.send_complete = send_complete
        self.job_time = job_time
        self.tracer = tracer
        #: Fails the job when too many checkpoints fail in a row (tolerable-failed-checkpoints).
        self.failure_manager = failure_manager
        #: Checkpoints with an id, and trigger requests that failed before they got one.
        self.checkpoints: list[PendingCheckpoint | FailedTrigger] = []
        self.pending: dict[int, PendingCheckpoint] = {}
        #: Flink's: it makes no sense to tick more often than the min pause allows.
        self.base_interval = max(config.interval, config.min_pause)
        #: Periodic trigger requests waiting for the request decider (all alike: a count).
        self.num_queued_requests = 0
        #: Flink 2.3's triggerDelay: the delay of the scheduler's next start, a random one
        #: in [min pause, base interval] for the first, the min pause for the later ones.
        self._trigger_delay = float(rng.uniform(config.min_pause, self.base_interval))
        self._ids = itertools.count(1)
        self._last_completion_ms: int | None = None
        self._next_trigger_time = 0.0
        self._periodic_trigger: Any = None
        self._nursery: Any = None
        #: Each task's share of the last completed checkpoint it acknowledged, without
        #: in-flight data: a finished task's final state.
        self._final_states: dict[str, SubtaskCheckpointAck] = {}
        self.options = CheckpointOptions.for_config(
            "CHECKPOINT", is_exactly_once_mode=config.mode.value == "EXACTLY_ONCE",
            is_unaligned_enabled=config.unaligned, aligned_checkpoint_timeout=config.aligned_checkpoint_timeout)

    def restore_latest_checkpointed_state(self) -> PendingCheckpoint | None:
        """What the job's next attempt starts from: the completed checkpoint with the highest
        id. The failed attempt's final states go (its finished tasks finish again)."""
        self._final_states.clear()
        return max((c for c in self.checkpoints if isinstance(c, PendingCheckpoint) and c.status == "COMPLETED"),
                   key=lambda c: c.checkpoint_id, default=None)

    async def run(self, *, task_status: Any = kernel.TASK_STATUS_IGNORED) -> None:
        """The coordinator's timer for one attempt of the job (periodic ticks, expiries, RPCs),
        until cancelled (the attempt ended); `task_status` learns when it is ready."""
        try:
            async with kernel.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await kernel.sleep_forever()
        finally:
            self._nursery = None

    # -- the periodic scheduler (Flink's startCheckpointScheduler / stopCheckpointScheduler) -----

    def start_checkpoint_scheduler(self) -> None:
        """Tick every base interval, the first tick after the trigger delay: on the first start
        a random one in [min pause, base interval], on a later start (the job restarted) the
        min pause, so a restarted job checkpoints as soon as the pause since its last
        completed checkpoint allows."""
        self.stop_checkpoint_scheduler()
        self._schedule_trigger_with_delay(self._trigger_delay)
        self._trigger_delay = self.config.min_pause

    def stop_checkpoint_scheduler(self) -> None:
        """No more ticks; the queued requests and the pending checkpoints fail."""
        if self._periodic_trigger is not None:
            self._periodic_trigger.cancel()
            self._periodic_trigger = None
        self.num_queued_requests = 0
        for pending in list(self.pending.values()):
            self._fail(pending, CHECKPOINT_COORDINATOR_SUSPEND)

    def _schedule_trigger_with_delay(self, delay: float) -> None:
        self._next_trigger_time = self.job_time() + delay
        self._periodic_trigger = scope = kernel.CancelScope()
        self._nursery.start_soon(self._scheduled_trigger, scope)

    async def _scheduled_trigger(self, scope: Any) -> None:
        """Flink's ScheduledTrigger: the next tick is due one base interval after this one,
        however late this one comes."""
        with scope:
            while True:
                await kernel.sleep(max(0.0, self._next_trigger_time - self.job_time()))
                self._next_trigger_time += self.base_interval
                self._trigger_request()

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run `fn(*args)` in the coordinator's nursery; dropped once the attempt ended
        (a late ack or decline while the job drains or restarts)."""
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    # -- trigger requests (Flink's CheckpointRequestDecider) -------------------------------------

    def _trigger_request(self) -> None:
        """A periodic request: queued (the newest is dropped past MAX_QUEUED_REQUESTS, Flink's
        TOO_MANY_CHECKPOINT_REQUESTS), then the decider picks what may run now."""
        self.num_queued_requests = min(self.num_queued_requests + 1, MAX_QUEUED_REQUESTS)
        self._execute_queued_request()

    def _execute_queued_request(self) -> None:
        if self._choose_request_to_execute():
            self._start_triggering_checkpoint()

    async def _execute_queued_request_later(self) -> None:
        """Flink's scheduleTriggerRequest: the timer looks at the queue once the current work is done."""
        self._execute_queued_request()

    def _choose_request_to_execute(self) -> bool:
        """Take the first queued request if a checkpoint may start now. Before the min pause
        since the last completed checkpoint has passed, the request is dropped (Flink's
        MINIMUM_TIME_BETWEEN_CHECKPOINTS) and the ticks start again after the rest of it."""
        if self.num_queued_requests == 0 or len(self.pending) >= self.config.max_concurrent:
            return False
        self.num_queued_requests -= 1
        if self._last_completion_ms is not None:
            pause_left_ms = self._last_completion_ms + round(self.config.min_pause * 1000) - self._now_ms()
            if pause_left_ms > 0:
                self._reschedule_trigger(pause_left_ms / 1000)
                return False
        return True

    def _reschedule_trigger(self, delay: float) -> None:
        if self._periodic_trigger is not None:
            self._periodic_trigger.cancel()
        self._schedule_trigger_with_delay(delay)

    def _now_ms(self) -> int:
        return absolute_time_millis(self.job_time())

    def _start_triggering_checkpoint(self) -> None:
        now = self.job_time()
        try:
            plan = self.plan_calculator.calculate_checkpoint_plan(self.finished_tasks())
        except CheckpointPlanError as exc:  # fails before the checkpoint gets an id
            self._fail_trigger(now, str(exc))
            return
        pending = self._new_checkpoint(now, plan.tasks_to_wait_for)
        pending.finished = {eid: self._final_states.get(eid) for eid in plan.finished_tasks}
        if self.tracer.enabled:
            self.tracer.emit("checkpoint_triggered", checkpoint=pending.checkpoint_id,
                             unaligned=self.options.is_unaligned, tasks=list(plan.tasks_to_trigger),
                             finished_tasks=len(plan.finished_tasks))
        self._spawn(self._send_triggers, pending.barrier, plan.tasks_to_trigger)
        self._spawn(self._expire, pending)

    def _new_checkpoint(self, now: float, tasks_to_wait_for: Collection[str]) -> PendingCheckpoint:
        checkpoint_id = next(self._ids)
        barrier = CheckpointBarrier(checkpoint_id, absolute_time_millis(now), self.options)
        pending = PendingCheckpoint(checkpoint_id, now, barrier, set(tasks_to_wait_for))
        self.checkpoints.append(pending)
        self.pending[checkpoint_id] = pending
        return pending

    def _fail_trigger(self, now: float, reason: str) -> None:
        """Flink's onTriggerFailure without a pending checkpoint: counted as failed
        (reportFailedCheckpointsWithoutInProgress), then the next queued request may go.
        (Flink also tells the failure manager, which does not count the one reason a plan
        fails for here, NOT_ALL_REQUIRED_TASKS_RUNNING.)"""
        self.checkpoints.append(FailedTrigger(now, self.options.is_unaligned, reason))
        if self.tracer.enabled:
            self.tracer.emit("checkpoint_failed", checkpoint=None, reason=reason)
        self._spawn(self._execute_queued_request_later)

    async def _send_triggers(self, barrier: CheckpointBarrier, tasks: Sequence[str]) -> None:
        await kernel.sleep(self.costs.trigger_delay)
        for execution_id in tasks:
            await self.send_trigger(execution_id, barrier)

    async def _notify_complete(self, checkpoint_id: int) -> None:
        await kernel.sleep(self.costs.ack_latency)
        await self.send_complete(checkpoint_id)

    async def _expire(self, pending: PendingCheckpoint) -> None:
        await kernel.sleep(self.config.timeout)
        if pending.status == "IN_PROGRESS":
            self._fail(pending, CHECKPOINT_EXPIRED)

    # -- from the tasks ---------------------------------------------------------------------

    def receive_acknowledge(self, execution_id: str, ack: SubtaskCheckpointAck) -> None:
        pending = self.pending.get(ack.checkpoint_id)
        if pending is None or execution_id not in pending.not_yet_acknowledged:
            return  # late, or for a checkpoint that failed already
        pending.not_yet_acknowledged.discard(execution_id)
        pending.acks[execution_id] = ack
        pending.latest_ack_time = self.job_time()
        if not pending.not_yet_acknowledged:
            self._end(pending, "COMPLETED")
            # the min pause runs from here (failed checkpoints do not move it)
            self._last_completion_ms = self._now_ms()
            self._drop_subsumed_checkpoints(pending.checkpoint_id)
            if self.failure_manager is not None:
                self.failure_manager.handle_checkpoint_success(pending.checkpoint_id)
            for eid, task_ack in pending.acks.items():
                self._final_states[eid] = dataclasses.replace(task_ack, channel_state=ChannelStateSnapshot())
            if self.tracer.enabled:
                self.tracer.emit("checkpoint_completed", checkpoint=pending.checkpoint_id,
                                 duration_ms=pending.end_to_end_duration_ms)
            self._spawn(self._notify_complete, pending.checkpoint_id)

    def _drop_subsumed_checkpoints(self, checkpoint_id: int) -> None:
        """Flink's dropSubsumedCheckpoints: the pending checkpoints older than the one that
        completed fail (CHECKPOINT_SUBSUMED, not counted against the tolerable failures)."""
        for older in [p for p in self.pending.values() if p.checkpoint_id < checkpoint_id]:
            self._fail(older, CHECKPOINT_SUBSUMED)

    def receive_decline(self, execution_id: str, checkpoint_id: int, reason: str) -> None:
        pending = self.pending.get(checkpoint_id)
        if pending is not None:
            self._fail(pending, reason, f" (declined by {execution_id})")

    def _fail(self, pending: PendingCheckpoint, reason: str, detail: str = "") -> None:
        """Fail `pending` for `reason` (Flink's CheckpointFailureReason name; `detail` adds who)."""
        pending.failure = reason + detail
        self._end(pending, "FAILED")
        if self.tracer.enabled:
            self.tracer.emit("checkpoint_failed", checkpoint=pending.checkpoint_id, reason=pending.failure)
        self._spawn(self.send_abort, pending.checkpoint_id)
        if self.failure_manager is not None:
            self.failure_manager.handle_checkpoint_failure(pending.checkpoint_id, reason)

    def _end(self, pending: PendingCheckpoint, status: str) -> None:
        """`pending` is no longer pending: one queued request may go (Flink's scheduleTriggerRequest)."""
        pending.status = status
        pending.end_time = self.job_time()
        del self.pending[pending.checkpoint_id]
        self._spawn(self._execute_queued_request_later)
