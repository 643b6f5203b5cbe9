"""Exactly-once barrier handling of one task over all its input gates (Flink's
`SingleCheckpointBarrierHandler`, spec 5.3), and the interface handlers share.

The handler tracks the pending checkpoint (its barrier, the channels aligned so far, the
channels still open), measures start delay and alignment, owns the alignment timer of
timeoutable barriers and delegates what to do with the channels to its state
(`barrier_handler_states`). Clock and timers are injected, so the same code runs on the
sim kernel, on trio, and in plain unit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from shuffle.api.events import CancelCheckpointMarker, CheckpointBarrier
from shuffle.consumer.input_channel import InputChannelInfo
from shuffle.errors import CheckpointException
from taskmgr.checkpointing.barrier_handler_states import (
    BarrierHandlerState,
    ChannelState,
    CheckpointableInput,
    WaitingForFirstBarrier,
    WaitingForFirstBarrierUnaligned,
)
from taskmgr.processing_time import absolute_time_millis, timer_delay

#: Flink's CheckpointFailureReason names for what a handler aborts with.
CHECKPOINT_DECLINED_SUBSUMED = "CHECKPOINT_DECLINED_SUBSUMED"
CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER = "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER"
CHECKPOINT_DECLINED_INPUT_END_OF_STREAM = "CHECKPOINT_DECLINED_INPUT_END_OF_STREAM"

Clock = Callable[[], float]
#: `register_timer(delay_s, action)` runs `action` on the task's thread after `delay_s`;
#: it returns a function that cancels the timer.
TimerService = Callable[[float, Callable[[], None]], Callable[[], None]]


def checkpoint_start_delay_ns(now: float, timestamp_ms: int) -> int:
    """Flink's `checkpointStartDelayNanos`: from the barrier's timestamp to `now` (s), in whole
    milliseconds (`1_000_000 * max(0, absoluteTimeMillis - timestamp)`)."""
    return 1_000_000 * max(0, absolute_time_millis(now) - timestamp_ms)


def alignment_timer_delay(now: float, barrier: CheckpointBarrier) -> float:
    """How long after `now` (s) the alignment timer of a timeoutable barrier fires, in s:
    Flink's `BarrierAlignmentUtil.getTimerDelay` (the timeout less the whole milliseconds
    since the barrier's creation, at least 0) ahead of the clock, on a processing-time timer."""
    timeout_ms = round(barrier.options.aligned_checkpoint_timeout * 1000)
    current_ms = absolute_time_millis(now)
    return timer_delay(current_ms + max(timeout_ms - (current_ms - barrier.timestamp), 0), now)


@dataclass
class CheckpointMetrics:
    """What the handler measured for one checkpoint at this task (spec 5.8); nanoseconds as Flink."""

    checkpoint_id: int
    start_delay_ns: int = 0
    alignment_duration_ns: int = 0
    bytes_processed_during_alignment: int = 0


class CheckpointableTask(Protocol):
    """What a handler asks of its task."""

    def init_inputs_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """An unaligned checkpoint starts: open it in the channel state writer."""

    def alignment_started(self, checkpoint_id: int, start_delay_ns: int) -> None:
        """The first barrier of `checkpoint_id` arrived (for the trace)."""

    def trigger_checkpoint_on_barrier(self, barrier: CheckpointBarrier, metrics: CheckpointMetrics) -> None: ...

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: str) -> None: ...

    def inputs_finished(self, checkpoint_id: int) -> None:
        """Every barrier of `checkpoint_id` is in: its in-flight input data is complete."""

    def inputs_failed(self, checkpoint_id: int, reason: str) -> None:
        """The barriers of `checkpoint_id` will never all come: an abort (of it, or of a newer
        checkpoint) ended its alignment, for `reason`."""


class CheckpointBarrierHandler:
    """Shared by the exactly-once handler and the at-least-once tracker: alignment metrics."""

    def __init__(self, task: CheckpointableTask, clock: Clock) -> None:
        self.task = task
        self.clock = clock
        self.latest_alignment_duration_ns = 0
        self.latest_start_delay_ns = 0
        self._alignment_start: float | None = None
        self._metrics: CheckpointMetrics | None = None

    def process_barrier(self, barrier: CheckpointBarrier, channel: InputChannelInfo,
                        is_rpc_triggered: bool = False) -> None:
        """`is_rpc_triggered`: the coordinator triggered the task (its predecessors have
        finished) and the barrier stands in for one the channel will never deliver."""
        raise NotImplementedError

    def process_barrier_announcement(self, barrier: CheckpointBarrier, sequence_number: int,
                                     channel: InputChannelInfo) -> None:
        """At-least-once and aligned-only handlers never see announcements."""

    def process_cancellation_barrier(self, marker: CancelCheckpointMarker, channel: InputChannelInfo) -> None:
        raise NotImplementedError

    def process_end_of_partition(self, channel: InputChannelInfo) -> None:
        raise NotImplementedError

    def add_processed_bytes(self, n: int) -> None:
        if self._alignment_start is not None and self._metrics is not None:
            self._metrics.bytes_processed_during_alignment += n

    @property
    def alignment_time_ns(self) -> int:
        """`checkpointAlignmentTime`: the running alignment, else the last one."""
        if self._alignment_start is not None:
            return round((self.clock() - self._alignment_start) * 1e9)
        return self.latest_alignment_duration_ns

    def _mark_alignment_start(self, checkpoint_id: int, timestamp_ms: int) -> None:
        now = self.clock()
        self.latest_start_delay_ns = checkpoint_start_delay_ns(now, timestamp_ms)
        self._metrics = CheckpointMetrics(checkpoint_id, start_delay_ns=self.latest_start_delay_ns)
        self._alignment_start = now
        self.task.alignment_started(checkpoint_id, self.latest_start_delay_ns)

    def _mark_alignment_end(self) -> None:
        if self._alignment_start is None or self._metrics is None:
            return
        self.latest_alignment_duration_ns = round((self.clock() - self._alignment_start) * 1e9)
        self._metrics.alignment_duration_ns = self.latest_alignment_duration_ns
        self._alignment_start = None

    def _reset_alignment(self) -> None:
        """Flink's resetAlignment: no alignment running, and none measured (the gauge reads 0)."""
        self._alignment_start = None
        self.latest_alignment_duration_ns = 0

    def _notify_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """Trigger the task's checkpoint with what was measured for it (Flink's
        `notifyCheckpoint`: zeros unless the last alignment started for this checkpoint)."""
        metrics = self._metrics
        if metrics is None or metrics.checkpoint_id != barrier.id:
            metrics = CheckpointMetrics(barrier.id)
        self.task.trigger_checkpoint_on_barrier(barrier, metrics)


class SingleCheckpointBarrierHandler(CheckpointBarrierHandler):
    """Exactly-once: aligned, unaligned or alternating, depending on the initial state."""

    def __init__(self, task: CheckpointableTask, inputs: Sequence[CheckpointableInput], num_channels: int,
                 clock: Clock, register_timer: TimerService, initial: type[BarrierHandlerState],
                 alternating: bool = False, enable_checkpoint_after_tasks_finished: bool = True) -> None:
        super().__init__(task, clock)
        #: Off: an EndOfPartition during an alignment aborts it (Flink before FLIP-147).
        self.enable_checkpoint_after_tasks_finished = enable_checkpoint_after_tasks_finished
        self.register_timer = register_timer
        self.num_open_channels = num_channels
        self.target_channel_count = 0
        self.current_checkpoint_id = -1
        self.last_cancelled_or_completed_checkpoint_id = -1
        self.pending_checkpoint_barrier: CheckpointBarrier | None = None
        self.aligned_channels: set[InputChannelInfo] = set()
        self.state: BarrierHandlerState = initial(ChannelState(inputs), alternating)
        self._cancel_timer: Callable[[], None] | None = None
        self._inputs = list(inputs)
        #: The checkpoint whose barriers are awaited (Flink's `allBarriersReceivedFuture`,
        #: renewed for each new checkpoint); None once they are all in or it failed.
        self._awaiting_barriers_of: int | None = None

    @classmethod
    def aligned(cls, task: CheckpointableTask, inputs: Sequence[CheckpointableInput], num_channels: int,
                clock: Clock, register_timer: TimerService,
                enable_checkpoint_after_tasks_finished: bool = True) -> SingleCheckpointBarrierHandler:
        return cls(task, inputs, num_channels, clock, register_timer, WaitingForFirstBarrier,
                   enable_checkpoint_after_tasks_finished=enable_checkpoint_after_tasks_finished)

    @classmethod
    def unaligned(cls, task: CheckpointableTask, inputs: Sequence[CheckpointableInput], num_channels: int,
                  clock: Clock, register_timer: TimerService,
                  enable_checkpoint_after_tasks_finished: bool = True) -> SingleCheckpointBarrierHandler:
        return cls(task, inputs, num_channels, clock, register_timer, WaitingForFirstBarrierUnaligned,
                   enable_checkpoint_after_tasks_finished=enable_checkpoint_after_tasks_finished)

    @classmethod
    def alternating(cls, task: CheckpointableTask, inputs: Sequence[CheckpointableInput], num_channels: int,
                    clock: Clock, register_timer: TimerService,
                    enable_checkpoint_after_tasks_finished: bool = True) -> SingleCheckpointBarrierHandler:
        return cls(task, inputs, num_channels, clock, register_timer, WaitingForFirstBarrier, alternating=True,
                   enable_checkpoint_after_tasks_finished=enable_checkpoint_after_tasks_finished)

    # -- the Controller the states use -----------------------------------------------------

    def trigger_global_checkpoint(self, barrier: CheckpointBarrier) -> None:
        self._notify_checkpoint(barrier)

    def init_inputs_checkpoint(self, barrier: CheckpointBarrier) -> None:
        self.task.init_inputs_checkpoint(barrier)

    def all_barriers_received(self) -> bool:
        return len(self.aligned_channels) == self.target_channel_count

    def is_timed_out(self, barrier: CheckpointBarrier) -> bool:
        options = barrier.options
        return (options.is_timeoutable and barrier.id <= self.current_checkpoint_id
                and round(options.aligned_checkpoint_timeout * 1000)
                < absolute_time_millis(self.clock()) - barrier.timestamp)

    # -- events --------------------------------------------------------------------------------

    @property
    def is_checkpoint_pending(self) -> bool:
        return (self.current_checkpoint_id != self.last_cancelled_or_completed_checkpoint_id
                and self.current_checkpoint_id >= 0)

    def process_barrier(self, barrier: CheckpointBarrier, channel: InputChannelInfo,
                        is_rpc_triggered: bool = False) -> None:
        checkpoint_id = barrier.id
        blocked = not barrier.options.is_unaligned and not is_rpc_triggered  # its producer blocked itself
        if (checkpoint_id < self.current_checkpoint_id
                or (checkpoint_id == self.current_checkpoint_id and not self.is_checkpoint_pending)):
            if blocked:
                self._inputs[channel.gate_index].resume_consumption(channel)
            return
        self._check_new_checkpoint(barrier)
        self._mark_aligned(channel, barrier, lambda state: state.barrier_received(self, channel, barrier, blocked))

    def process_barrier_announcement(self, barrier: CheckpointBarrier, sequence_number: int,
                                     channel: InputChannelInfo) -> None:
        self._check_new_checkpoint(barrier)
        if barrier.id < self.current_checkpoint_id or not self.is_checkpoint_pending:
            return  # obsolete: its checkpoint completed or was aborted here
        self.state = self.state.announcement_received(self, channel, sequence_number)

    def process_cancellation_barrier(self, marker: CancelCheckpointMarker, channel: InputChannelInfo) -> None:
        checkpoint_id = marker.checkpoint_id
        if checkpoint_id > self.current_checkpoint_id or (
                checkpoint_id == self.current_checkpoint_id and self.aligned_channels):
            self._abort(checkpoint_id, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)

    def process_end_of_partition(self, channel: InputChannelInfo) -> None:
        self.num_open_channels -= 1
        if not self.enable_checkpoint_after_tasks_finished:
            if self.is_checkpoint_pending:
                self._abort(self.current_checkpoint_id, CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)
            return
        if self.is_checkpoint_pending and channel not in self.aligned_channels:
            self._mark_aligned(channel, self.pending_checkpoint_barrier,
                               lambda state: state.end_of_partition_received(self, channel))

    # -- internals -------------------------------------------------------------------------------

    def _check_new_checkpoint(self, barrier: CheckpointBarrier) -> None:
        if barrier.id <= self.current_checkpoint_id:
            return
        if self.is_checkpoint_pending:
            self._abort(self.current_checkpoint_id, CHECKPOINT_DECLINED_SUBSUMED)
        self.current_checkpoint_id = barrier.id
        self.pending_checkpoint_barrier = barrier
        self.aligned_channels.clear()
        self.target_channel_count = self.num_open_channels
        self._awaiting_barriers_of = barrier.id
        if barrier.options.is_timeoutable:
            self._cancel_timer = self.register_timer(alignment_timer_delay(self.clock(), barrier),
                                                     lambda: self._on_alignment_timeout(barrier))

    def _on_alignment_timeout(self, barrier: CheckpointBarrier) -> None:
        self._cancel_timer = None
        if (barrier.id == self.current_checkpoint_id and self.is_checkpoint_pending
                and not self.all_barriers_received()):
            self.state = self.state.aligned_checkpoint_timeout(self, barrier)

    def _mark_aligned(self, channel: InputChannelInfo, barrier: CheckpointBarrier,
                      transform: Callable[[BarrierHandlerState], BarrierHandlerState]) -> None:
        self.aligned_channels.add(channel)
        if len(self.aligned_channels) == 1:
            self._mark_alignment_start(barrier.id, barrier.timestamp)
            if self.target_channel_count == 1:
                self._mark_alignment_end()
        elif self.all_barriers_received():
            self._mark_alignment_end()
        try:
            self.state = transform(self.state)
        except CheckpointException as e:  # Flink's markCheckpointAlignedAndTransformState: declined, not failed
            self._abort(barrier.id, e.reason)
        if self.all_barriers_received():
            self.aligned_channels.clear()
            self.last_cancelled_or_completed_checkpoint_id = barrier.id
            self._cancel_alignment_timer()
            self._awaiting_barriers_of = None
            self.task.inputs_finished(barrier.id)

    def _cancel_alignment_timer(self) -> None:
        if self._cancel_timer is not None:
            self._cancel_timer()
            self._cancel_timer = None

    def _abort(self, checkpoint_id: int, reason: str) -> None:
        """Flink's abortInternal: `checkpoint_id` becomes the current checkpoint if newer, and
        the alignment gauges reset when it is the current one (also when it was newer: a
        CancelCheckpointMarker ahead of any barrier leaves no alignment time). The checkpoint
        whose barriers were awaited fails with `reason` even when `checkpoint_id` is a newer
        one: a CancelCheckpointMarker of checkpoint 2 ends the alignment of an unaligned
        checkpoint 1 already taken, whose in-flight data is then never complete."""
        self.current_checkpoint_id = max(self.current_checkpoint_id, checkpoint_id)
        self.last_cancelled_or_completed_checkpoint_id = max(self.last_cancelled_or_completed_checkpoint_id,
                                                             checkpoint_id)
        self.pending_checkpoint_barrier = None
        self.aligned_channels.clear()
        self._cancel_alignment_timer()
        self.state = self.state.abort(checkpoint_id)
        if checkpoint_id == self.current_checkpoint_id:
            self._reset_alignment()
        self.task.abort_checkpoint_on_barrier(checkpoint_id, reason)
        if self._awaiting_barriers_of is not None:
            awaited, self._awaiting_barriers_of = self._awaiting_barriers_of, None
            self.task.inputs_failed(awaited, reason)
