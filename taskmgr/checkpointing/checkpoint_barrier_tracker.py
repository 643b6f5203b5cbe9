"""At-least-once barrier handling (Flink's `CheckpointBarrierTracker`, spec 5.5): never
blocks a channel; triggers a checkpoint once its barrier came on every open channel, and
silently drops older checkpoints that a newer one overtook."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from shuffle.api.events import CancelCheckpointMarker, CheckpointBarrier
from shuffle.consumer.input_channel import InputChannelInfo
from taskmgr.checkpointing.single_checkpoint_barrier_handler import (
    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER,
    CheckpointableTask,
    CheckpointBarrierHandler,
    Clock,
)

#: Flink's MAX_CHECKPOINTS_TO_TRACK.
MAX_CHECKPOINTS_TO_TRACK = 50


@dataclass
class _Pending:
    checkpoint_id: int
    barrier: CheckpointBarrier | None
    channels: set[InputChannelInfo] = field(default_factory=set)
    aborted: bool = False


class CheckpointBarrierTracker(CheckpointBarrierHandler):
    def __init__(self, task: CheckpointableTask, num_channels: int, clock: Clock) -> None:
        super().__init__(task, clock)
        self.num_open_channels = num_channels
        self.pending: deque[_Pending] = deque()
        self.latest_pending_checkpoint_id = -1

    def process_barrier(self, barrier: CheckpointBarrier, channel: InputChannelInfo,
                        is_rpc_triggered: bool = False) -> None:
        if self.num_open_channels == 1:
            self._mark_alignment_start(barrier.id, barrier.timestamp)
            self._mark_alignment_end()
            self._trigger(barrier)
            return
        entry = next((p for p in self.pending if p.checkpoint_id == barrier.id), None)
        if entry is not None:
            entry.channels.add(channel)
            if len(entry.channels) == self.num_open_channels:
                self._complete(entry)
        elif barrier.id > self.latest_pending_checkpoint_id:
            self._mark_alignment_start(barrier.id, barrier.timestamp)
            self.latest_pending_checkpoint_id = barrier.id
            self.pending.append(_Pending(barrier.id, barrier, {channel}))
            if len(self.pending) > MAX_CHECKPOINTS_TO_TRACK:
                self.pending.popleft()
        # else: a late barrier of a checkpoint that was dropped or completed

    def _complete(self, entry: _Pending) -> None:
        """Drop this entry and all older ones; trigger unless it was aborted."""
        while self.pending and self.pending[0].checkpoint_id <= entry.checkpoint_id:
            self.pending.popleft()
        if not entry.aborted and entry.barrier is not None:
            self._mark_alignment_end()
            self._trigger(entry.barrier)

    def _trigger(self, barrier: CheckpointBarrier) -> None:
        assert self._metrics is not None
        self.task.trigger_checkpoint_on_barrier(barrier, self._metrics)
        self.task.inputs_finished(barrier.id)

    def process_cancellation_barrier(self, marker: CancelCheckpointMarker, channel: InputChannelInfo) -> None:
        checkpoint_id = marker.checkpoint_id
        if self.num_open_channels == 1:
            self._reset_alignment()
            self.task.abort_checkpoint_on_barrier(checkpoint_id, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
            return
        while self.pending and self.pending[0].checkpoint_id < checkpoint_id:
            self.pending.popleft()
        entry = self.pending[0] if self.pending and self.pending[0].checkpoint_id == checkpoint_id else None
        if entry is not None:
            if not entry.aborted:
                entry.aborted = True
                self._reset_alignment()
                self.task.abort_checkpoint_on_barrier(checkpoint_id, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
        elif checkpoint_id > self.latest_pending_checkpoint_id:
            self._reset_alignment()
            self.latest_pending_checkpoint_id = checkpoint_id
            self.pending.appendleft(_Pending(checkpoint_id, None, aborted=True))
            self.task.abort_checkpoint_on_barrier(checkpoint_id, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)

    def process_end_of_partition(self, channel: InputChannelInfo) -> None:
        """One channel fewer: the newest checkpoint that now has all its barriers triggers."""
        self.num_open_channels -= 1
        complete = [p for p in self.pending if len(p.channels - {channel}) >= self.num_open_channels]
        if complete:
            self._complete(complete[-1])
