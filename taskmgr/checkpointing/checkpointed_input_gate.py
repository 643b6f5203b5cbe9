"""`CheckpointedInputGate` (spec 5.2): one logical input of a task (one gate, or the gates
of a union, read round-robin) whose events go through the task's barrier handler.

The input processor decides *when* an event is handled: priority events (unaligned
barriers, announcements) at once, other events after the records polled before them,
as Flink's task thread meets them in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

from shuffle import kernel
from shuffle.api.events import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartitionEvent,
    EventAnnouncement,
)
from shuffle.consumer.input_channel import InputChannelInfo
from shuffle.consumer.single_input_gate import BufferOrEvent, SingleInputGate
from shuffle.trace import NULL_TRACER, Tracer
from taskmgr.checkpointing.single_checkpoint_barrier_handler import CheckpointBarrierHandler


class CheckpointedInputGate:
    def __init__(self, gates: Sequence[SingleInputGate], input_index: int,
                 handler: CheckpointBarrierHandler | None = None, tracer: Tracer = NULL_TRACER,
                 task_name: str = "") -> None:
        self.gates = list(gates)
        #: How many gates (they never change; `poll_next` asks per buffer).
        self._num_gates = len(self.gates)
        self._by_index = {gate.gate_index: gate for gate in self.gates}
        self.input_index = input_index
        self.handler = handler
        self.tracer = tracer
        self.task_name = task_name
        self._next = 0

    def poll_next(self) -> BufferOrEvent | None:
        """The next buffer or event of any gate (a gate with a priority event first: one
        gate alone polls its own priority events first itself)."""
        gates, num_gates = self.gates, self._num_gates
        if num_gates > 1:
            for gate in gates:
                if gate.has_priority_events:
                    return gate.poll_next()
        for _ in range(num_gates):
            gate = gates[self._next]
            self._next = (self._next + 1) % num_gates
            if not gate.is_finished:
                result = gate.poll_next()
                if result is not None:
                    return result
        return None

    @property
    def has_priority_events(self) -> bool:
        for gate in self.gates:  # loops, not any()/all(): asked before every chunk of records
            if gate.has_priority_events:
                return True
        return False

    async def wait_priority_event(self) -> None:
        await kernel.wait_any([gate.priority_availability.wait for gate in self.gates])

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
        for gate in self.gates:
            if not gate.is_finished:
                return False
        return True

    def unfinished_channels(self) -> list[InputChannelInfo]:
        return [channel for gate in self.gates for channel in gate.unfinished_channels()]

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once a gate has data or every gate finished. One gate: that
        gate's wait itself (a finished gate stays available: it returns at once), not a
        coroutine around it, and without wait_any's list (once per idle wait)."""
        gates = self.gates
        if len(gates) == 1:
            return gates[0].wait_available()
        return kernel.wait_any([gate.wait_available for gate in gates if not gate.is_finished])
