"""The exactly-once barrier handler's states (Flink's `BarrierHandlerState` family in
`streaming/runtime/io/checkpointing`): aligned, unaligned and alternating (aligned with a
timeout that switches to unaligned).

A state reacts to a barrier, an announcement, an alignment timeout, an abort or an end of
partition and returns the next state. It acts on the inputs through `ChannelState` and
on the task through the `Controller` (the handler).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shuffle.api.events import CheckpointBarrier
from shuffle.consumer.input_channel import InputChannelInfo


class CheckpointableInput(Protocol):
    """What a handler does to an input gate (Flink's `CheckpointableInput`)."""

    gate_index: int

    def block_consumption(self, channel_info: InputChannelInfo) -> None: ...

    def resume_consumption(self, channel_info: InputChannelInfo) -> None: ...

    def checkpoint_started(self, barrier: CheckpointBarrier) -> None: ...

    def checkpoint_stopped(self, checkpoint_id: int) -> None: ...

    def convert_to_priority_event(self, channel_info: InputChannelInfo, sequence_number: int) -> None: ...


class Controller(Protocol):
    """What a state asks of the handler."""

    def trigger_global_checkpoint(self, barrier: CheckpointBarrier) -> None: ...

    def init_inputs_checkpoint(self, barrier: CheckpointBarrier) -> None: ...

    def all_barriers_received(self) -> bool: ...

    def is_timed_out(self, barrier: CheckpointBarrier) -> bool: ...

    @property
    def pending_checkpoint_barrier(self) -> CheckpointBarrier | None: ...


class ChannelState:
    """Blocked channels and seen announcements of the checkpoint being aligned."""

    def __init__(self, inputs: Sequence[CheckpointableInput]) -> None:
        self.inputs = list(inputs)
        self.blocked: set[InputChannelInfo] = set()
        self.announcements: dict[InputChannelInfo, int] = {}

    def block_channel(self, channel: InputChannelInfo) -> None:
        self.inputs[channel.gate_index].block_consumption(channel)
        self.blocked.add(channel)

    def channel_finished(self, channel: InputChannelInfo) -> None:
        self.blocked.discard(channel)
        self.announcements.pop(channel, None)

    def unblock_all_channels(self) -> None:
        for channel in sorted(self.blocked):
            self.inputs[channel.gate_index].resume_consumption(channel)
        self.blocked.clear()
        self.announcements.clear()

    def add_seen_announcement(self, channel: InputChannelInfo, sequence_number: int) -> None:
        self.announcements[channel] = sequence_number

    def remove_seen_announcement(self, channel: InputChannelInfo) -> None:
        """The channel's announced barrier was processed: nothing of it is left to prioritize."""
        self.announcements.pop(channel, None)

    def prioritize_all_announcements(self) -> None:
        for channel, sequence_number in sorted(self.announcements.items()):
            self.inputs[channel.gate_index].convert_to_priority_event(channel, sequence_number)
        self.announcements.clear()

    def start_persisting(self, barrier: CheckpointBarrier) -> None:
        for gate in self.inputs:
            gate.checkpoint_started(barrier)

    def stop_persisting(self, checkpoint_id: int) -> None:
        for gate in self.inputs:
            gate.checkpoint_stopped(checkpoint_id)


class BarrierHandlerState:
    """A state of the handler; the defaults are those of the aligned states."""

    def __init__(self, state: ChannelState, alternating: bool = False) -> None:
        self.state = state
        self.alternating = alternating

    def barrier_received(self, controller: Controller, channel: InputChannelInfo, barrier: CheckpointBarrier,
                         mark_channel_blocked: bool) -> BarrierHandlerState:
        raise NotImplementedError

    def announcement_received(self, controller: Controller, channel: InputChannelInfo,
                              sequence_number: int) -> BarrierHandlerState:
        self.state.add_seen_announcement(channel, sequence_number)
        return self

    def aligned_checkpoint_timeout(self, controller: Controller, barrier: CheckpointBarrier) -> BarrierHandlerState:
        """Alternating, no barrier processed yet: prioritize the announced barriers; the
        first of them to be processed starts the checkpoint, unaligned."""
        if not self.alternating:
            raise RuntimeError(f"{type(self).__name__} cannot time out an alignment")
        self.state.prioritize_all_announcements()
        return WaitingForFirstBarrierUnaligned(self.state, alternating=True)

    def end_of_partition_received(self, controller: Controller, channel: InputChannelInfo) -> BarrierHandlerState:
        """No barrier processed yet (a checkpoint pending by an announcement only): the
        channel is forgotten, nothing triggers (Flink's WaitingForFirstBarrier states)."""
        self.state.channel_finished(channel)
        return self

    def abort(self, checkpoint_id: int) -> BarrierHandlerState:
        return self._finish()

    def _finish(self) -> BarrierHandlerState:
        self.state.unblock_all_channels()
        return WaitingForFirstBarrier(self.state, self.alternating)


class WaitingForFirstBarrier(BarrierHandlerState):
    """Aligned (or alternating, before any barrier): the first barrier starts the alignment."""

    def barrier_received(self, controller: Controller, channel: InputChannelInfo, barrier: CheckpointBarrier,
                         mark_channel_blocked: bool) -> BarrierHandlerState:
        if barrier.options.is_unaligned:
            if not self.alternating:
                raise RuntimeError("an unaligned barrier reached an aligned-only handler")
            # an upstream task timed out already: go unaligned at once
            return (self.aligned_checkpoint_timeout(controller, barrier)
                    .barrier_received(controller, channel, barrier, mark_channel_blocked))
        self.state.remove_seen_announcement(channel)
        if mark_channel_blocked:
            self.state.block_channel(channel)
        if controller.all_barriers_received():
            controller.trigger_global_checkpoint(barrier)
            return self._finish()
        if self.alternating and controller.is_timed_out(barrier):
            return (self.aligned_checkpoint_timeout(controller, barrier)
                    .barrier_received(controller, channel, barrier.as_unaligned(), False))
        return CollectingBarriers(self.state, self.alternating)


class CollectingBarriers(WaitingForFirstBarrier):
    """Aligned: channels that delivered the barrier are blocked until all have."""

    def end_of_partition_received(self, controller: Controller, channel: InputChannelInfo) -> BarrierHandlerState:
        """The channel counts as aligned: the last one triggers. Alternating, an alignment
        already past its timeout (its timer not run yet) goes unaligned now, as a late
        barrier would (Flink's AlternatingCollectingBarriers)."""
        self.state.channel_finished(channel)
        barrier = controller.pending_checkpoint_barrier
        if barrier is None:
            return self
        if controller.all_barriers_received():
            controller.trigger_global_checkpoint(barrier)
            return self._finish()
        if self.alternating and controller.is_timed_out(barrier):
            return (self.aligned_checkpoint_timeout(controller, barrier)
                    .end_of_partition_received(controller, channel))
        return self

    def aligned_checkpoint_timeout(self, controller: Controller, barrier: CheckpointBarrier) -> BarrierHandlerState:
        """Alternating: prioritize the announced barriers and go unaligned now."""
        if not self.alternating:
            raise RuntimeError(f"{type(self).__name__} cannot time out an alignment")
        self.state.prioritize_all_announcements()
        unaligned = barrier.as_unaligned()
        controller.init_inputs_checkpoint(unaligned)
        self.state.start_persisting(unaligned)
        controller.trigger_global_checkpoint(unaligned)
        return CollectingBarriersUnaligned(self.state, alternating=True)


class WaitingForFirstBarrierUnaligned(BarrierHandlerState):
    """Unaligned: the first barrier starts persisting every input and triggers at once."""

    def announcement_received(self, controller: Controller, channel: InputChannelInfo,
                              sequence_number: int) -> BarrierHandlerState:
        self.state.inputs[channel.gate_index].convert_to_priority_event(channel, sequence_number)
        return self

    def aligned_checkpoint_timeout(self, controller: Controller, barrier: CheckpointBarrier) -> BarrierHandlerState:
        return self  # unaligned already

    def barrier_received(self, controller: Controller, channel: InputChannelInfo, barrier: CheckpointBarrier,
                         mark_channel_blocked: bool) -> BarrierHandlerState:
        if mark_channel_blocked and not barrier.options.is_unaligned:
            self.state.block_channel(channel)  # an aligned barrier out of order: its producer is blocked
        unaligned = barrier.as_unaligned()  # a savepoint's is refused, as in Flink
        controller.init_inputs_checkpoint(unaligned)
        self.state.start_persisting(unaligned)
        controller.trigger_global_checkpoint(unaligned)
        if controller.all_barriers_received():
            return self._stop(barrier.id)
        return CollectingBarriersUnaligned(self.state, self.alternating)

    def abort(self, checkpoint_id: int) -> BarrierHandlerState:
        """No barrier processed, so no input persists: only unblock (Flink's stopCheckpoint)."""
        self.state.unblock_all_channels()
        return self._waiting()

    def _stop(self, checkpoint_id: int) -> BarrierHandlerState:
        self.state.stop_persisting(checkpoint_id)
        self.state.unblock_all_channels()
        return self._waiting()

    def _waiting(self) -> BarrierHandlerState:
        if self.alternating:
            return WaitingForFirstBarrier(self.state, alternating=True)
        return WaitingForFirstBarrierUnaligned(self.state)


class CollectingBarriersUnaligned(WaitingForFirstBarrierUnaligned):
    """Unaligned, checkpoint triggered: later barriers only mark their channels."""

    def barrier_received(self, controller: Controller, channel: InputChannelInfo, barrier: CheckpointBarrier,
                         mark_channel_blocked: bool) -> BarrierHandlerState:
        if mark_channel_blocked and not barrier.options.is_unaligned:
            self.state.block_channel(channel)
        if controller.all_barriers_received():
            return self._stop(barrier.id)
        return self

    def end_of_partition_received(self, controller: Controller, channel: InputChannelInfo) -> BarrierHandlerState:
        self.state.channel_finished(channel)
        if controller.all_barriers_received():
            barrier = controller.pending_checkpoint_barrier
            return self._stop(barrier.id if barrier is not None else -1)
        return self

    def abort(self, checkpoint_id: int) -> BarrierHandlerState:
        return self._stop(checkpoint_id)
