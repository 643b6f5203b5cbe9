"""At-least-once barrier handling (Flink's `CheckpointBarrierTracker`, spec 5.5): never
blocks a channel; triggers a checkpoint once its barrier came on every channel that was
open when its first barrier came, and silently drops older checkpoints that a newer one
overtook."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from shuffle.api.events import CancelCheckpointMarker, CheckpointBarrier
from shuffle.consumer.input_channel import InputChannelInfo
from taskmgr.checkpointing.single_checkpoint_barrier_handler import (
    CHECKPOINT_DECLINED_INPUT_END_OF_STREAM,
    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER,
    CheckpointableTask,
    CheckpointBarrierHandler,
    Clock,
)

#: Flink's MAX_CHECKPOINTS_TO_TRACK.
MAX_CHECKPOINTS_TO_TRACK = 50


@dataclass
class _Pending:
    """Flink's CheckpointBarrierCount: the channels seen of one checkpoint."""

    checkpoint_id: int
    barrier: CheckpointBarrier | None
    target_channel_count: int
    channels: set[InputChannelInfo] = field(default_factory=set)
    aborted: bool = False

    def mark_channel_aligned(self, channel: InputChannelInfo) -> bool:
        """Count `channel`; True once every target channel is in."""
        self.channels.add(channel)
        return len(self.channels) == self.target_channel_count

    def mark_aborted(self) -> bool:
        """True the first time only."""
        first, self.aborted = not self.aborted, True
        return first


class CheckpointBarrierTracker(CheckpointBarrierHandler):
    def __init__(self, task: CheckpointableTask, num_channels: int, clock: Clock,
                 enable_checkpoint_after_tasks_finished: bool = True) -> None:
        super().__init__(task, clock)
        #: Off: an EndOfPartition aborts every pending checkpoint (Flink before FLIP-147).
        self.enable_checkpoint_after_tasks_finished = enable_checkpoint_after_tasks_finished
        self.num_open_channels = num_channels
        self.pending: deque[_Pending] = deque()
        self.latest_pending_checkpoint_id = -1

    def process_barrier(self, barrier: CheckpointBarrier, channel: InputChannelInfo,
                        is_rpc_triggered: bool = False) -> None:
        if barrier.id > self.latest_pending_checkpoint_id and self.num_open_channels == 1:
            self._mark_alignment_start(barrier.id, barrier.timestamp)
            self._mark_alignment_end()
            self._trigger(barrier)
            return
        position = next((i for i, p in enumerate(self.pending) if p.checkpoint_id == barrier.id), None)
        if position is not None:
            entry = self.pending[position]
            if entry.mark_channel_aligned(channel):
                self._complete(position)
        elif barrier.id > self.latest_pending_checkpoint_id:
            self._mark_alignment_start(barrier.id, barrier.timestamp)
            self.latest_pending_checkpoint_id = barrier.id
            self.pending.append(_Pending(barrier.id, barrier, self.num_open_channels, {channel}))
            if len(self.pending) > MAX_CHECKPOINTS_TO_TRACK:
                self.pending.popleft()
        # else: a late barrier of a checkpoint that was dropped or completed

    def _complete(self, position: int) -> None:
        """The entry at `position` has all its barriers: drop it and all older ones; trigger
        unless it was aborted."""
        entry = self.pending[position]
        for _ in range(position + 1):
            self.pending.popleft()
        if not entry.aborted and entry.barrier is not None:
            if entry.checkpoint_id == self.latest_pending_checkpoint_id:
                self._mark_alignment_end()  # one alignment is measured at a time: the latest
            self._trigger(entry.barrier)

    def _trigger(self, barrier: CheckpointBarrier) -> None:
        self._notify_checkpoint(barrier)
        self.task.inputs_finished(barrier.id)

    def process_cancellation_barrier(self, marker: CancelCheckpointMarker, channel: InputChannelInfo) -> None:
        checkpoint_id = marker.checkpoint_id
        if checkpoint_id > self.latest_pending_checkpoint_id and self.num_open_channels == 1:
            self._reset_alignment()
            self._abort(checkpoint_id, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
            return
        while self.pending and self.pending[0].checkpoint_id < checkpoint_id:
            older = self.pending.popleft()
            if older.mark_aborted():
                self._abort(older.checkpoint_id, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
        entry = self.pending[0] if self.pending and self.pending[0].checkpoint_id == checkpoint_id else None
        if entry is not None:
            if entry.mark_aborted():
                self._abort(checkpoint_id, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
            if entry.mark_channel_aligned(channel):  # every channel seen: forget it
                self.pending.popleft()
        elif checkpoint_id > self.latest_pending_checkpoint_id:
            self._abort(checkpoint_id, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
            self.latest_pending_checkpoint_id = checkpoint_id
            marker_entry = _Pending(checkpoint_id, None, self.num_open_channels, {channel}, aborted=True)
            self.pending.appendleft(marker_entry)
        # else: a trailing marker of a checkpoint aborted already

    def _abort(self, checkpoint_id: int, reason: str) -> None:
        self.task.abort_checkpoint_on_barrier(checkpoint_id, reason)

    def process_end_of_partition(self, channel: InputChannelInfo) -> None:
        """One channel fewer. With checkpoints after tasks finish, it counts as aligned for
        the pending checkpoints, newest first, until one has all its barriers: that one
        triggers (older ones are dropped); without, every pending checkpoint is aborted."""
        self.num_open_channels -= 1
        if not self.enable_checkpoint_after_tasks_finished:
            while self.pending:
                entry = self.pending.popleft()
                if entry.mark_aborted():
                    self._abort(entry.checkpoint_id, CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)
            self._reset_alignment()
            return
        for position in range(len(self.pending) - 1, -1, -1):
            if self.pending[position].mark_channel_aligned(channel):
                self._complete(position)
                return
