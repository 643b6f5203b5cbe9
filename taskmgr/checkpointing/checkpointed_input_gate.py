"""`CheckpointedInputGate` (spec 5.2): one logical input of a task (one gate, or the gates
of a union read through a `UnionInputGate`, as Flink's `InputGateUtil.createInputGate`
makes it) whose events go through the task's barrier handler.

The input processor decides *when* an event is handled: priority events (unaligned
barriers, announcements) at once, other events after the records polled before them,
as Flink's task thread meets them in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

from shuffle.api.events import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartitionEvent,
    EventAnnouncement,
)
from shuffle.consumer.input_channel import InputChannelInfo
from shuffle.consumer.single_input_gate import BufferOrEvent, SingleInputGate
from shuffle.consumer.union_input_gate import UnionInputGate
from shuffle.trace import NULL_TRACER, Tracer
from taskmgr.checkpointing.single_checkpoint_barrier_handler import CheckpointBarrierHandler


class CheckpointedInputGate:
    def __init__(self, gates: Sequence[SingleInputGate], input_index: int,
                 handler: CheckpointBarrierHandler | None = None, tracer: Tracer = NULL_TRACER,
                 task_name: str = "") -> None:
        self.gates = list(gates)
        self._by_index = {gate.gate_index: gate for gate in self.gates}
        self.input_index = input_index
        self.handler = handler
        self.tracer = tracer
        self.task_name = task_name
        #: What is read: the one gate, or several as Flink's union reads them (by when
        #: their data came; Flink's `InputGateUtil.createInputGate`).
        self._input: SingleInputGate | UnionInputGate = (
            UnionInputGate(self.gates) if len(self.gates) > 1 else self.gates[0])

    def poll_next(self) -> BufferOrEvent | None:
        """The next buffer or event (of the gate whose turn it is, priority events first)."""
        return self._input.poll_next()

    @property
    def has_priority_events(self) -> bool:
        return self._input.has_priority_events

    async def wait_priority_event(self) -> None:
        await self._input.priority_availability.wait()

    def handle_event(self, result: BufferOrEvent) -> None:
        """Hand an event to the barrier handler (spec 5.2's table); EndOfData is answered
        to the producer: every record of the channel has been processed."""
        handler, event, channel = self.handler, result.event, result.channel_info
        if isinstance(event, EndOfData):
            self._by_index[channel.gate_index].acknowledge_all_records_processed(channel)
            return
        if handler is None:
            return
        if isinstance(event, CheckpointBarrier):
            if self.tracer.enabled:
                self.tracer.emit("barrier_received", task=self.task_name, gate=channel.gate_index,
                                 channel=channel.channel_index, checkpoint=event.id,
                                 unaligned=event.options.is_unaligned or result.has_priority)
            handler.process_barrier(event, channel)
        elif isinstance(event, CancelCheckpointMarker):
            handler.process_cancellation_barrier(event, channel)
        elif isinstance(event, EndOfPartitionEvent):
            handler.process_end_of_partition(channel)
        elif isinstance(event, EventAnnouncement) and isinstance(event.announced_event, CheckpointBarrier):
            handler.process_barrier_announcement(event.announced_event, event.sequence_number, channel)

    @property
    def is_finished(self) -> bool:
        return self._input.is_finished

    def unfinished_channels(self) -> list[InputChannelInfo]:
        return [channel for gate in self.gates for channel in gate.unfinished_channels()]

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once a gate has data or every gate finished (the gate's or the
        union's wait itself, not a coroutine around it)."""
        return self._input.wait_available()
