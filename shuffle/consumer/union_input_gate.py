"""UnionInputGate: several gates read as one input (spec 4.7), as Flink's `UnionInputGate`.

Gates with data wait in a FIFO with a priority section, in the order they became
available: a gate joins when its availability (or priority availability) turns on, the
way Flink's union runs `getAvailableFuture().thenRun(queue)`, and a gate that still has
data after a poll goes to the back. A gate that is polled empty, or whose last data was
taken, is queued again only when it next becomes available. What is polled keeps the
channel info of the gate it came from (`channel_index` is the gate's own).
"""

from __future__ import annotations

from collections.abc import Awaitable
from functools import partial

from shuffle.api.events import EndOfData, EndOfDataStatus, EndOfPartitionEvent
from shuffle.availability import AvailabilityHelper
from shuffle.consumer.input_channel import InputChannel, InputChannelInfo
from shuffle.consumer.single_input_gate import BufferOrEvent, SingleInputGate
from shuffle.errors import IllegalStateError
from shuffle.prioritized_deque import PrioritizedDeque


class UnionInputGate:
    def __init__(self, gates: list[SingleInputGate]) -> None:
        if len(gates) < 2:
            raise ValueError("a UnionInputGate combines at least two gates")
        if len({gate.gate_index for gate in gates}) != len(gates):
            raise ValueError(f"gate indexes of a union must differ: {[gate.gate_index for gate in gates]}")
        self.gates = gates
        self._by_index = {gate.gate_index: gate for gate in gates}
        self._offsets: list[int] = []
        offset = 0
        for gate in gates:
            self._offsets.append(offset)
            offset += gate.num_channels
        self._with_data: PrioritizedDeque[int] = PrioritizedDeque()
        self._queued = [False] * len(gates)
        #: Flink's inputGatesWithRemainingData / ...RemainingUserData (by position).
        self._remaining = set(range(len(gates)))
        self._remaining_user_data = set(range(len(gates)))
        self._drain_on_end_of_data = True
        self.availability = AvailabilityHelper()
        self.priority_availability = AvailabilityHelper()
        for index, gate in enumerate(gates):
            if gate.is_available():
                self._with_data.add(index)
                self._queued[index] = True
            else:
                self._when_available(index)
            gate.priority_availability.when_available(partial(self._queue_gate, index, True))
        if self._with_data:
            self.availability.set_available()

    def _when_available(self, index: int) -> None:
        self.gates[index].availability.when_available(partial(self._queue_gate, index, False))

    def _queue_gate(self, index: int, priority: bool) -> None:
        """Flink's queueInputGate: a notification of data (or of a priority event, if still
        pending) queues the gate once, or moves it into the priority section."""
        with_data = self._with_data
        if self._queued[index]:
            if not priority or not with_data.prioritize(index):
                return
        elif priority and not self.gates[index].priority_availability.is_available:
            return  # stale: the priority event was polled meanwhile
        else:
            with_data.add(index, priority)
            self._queued[index] = True
        if priority and with_data.num_priority_elements == 1:
            self.priority_availability.set_available()
        if len(with_data) == 1:
            self.availability.set_available()

    def poll_next(self) -> BufferOrEvent | None:
        if not self._remaining:
            return None
        with_data = self._with_data
        while True:
            if not with_data:
                self.availability.set_unavailable()
                return None
            index = with_data.poll()
            self._queued[index] = False
            gate = self.gates[index]
            result = gate.poll_next()
            if result is None:
                self._when_available(index)
                continue
            if result.more_available:
                with_data.add(index, result.more_priority_events)
                self._queued[index] = True
            elif not gate.is_finished:
                self._when_available(index)
            if result.has_priority and not result.more_priority_events:
                gate.priority_availability.when_available(partial(self._queue_gate, index, True))
            if result.has_priority and not with_data.num_priority_elements:
                self.priority_availability.set_unavailable()
            self._on_event(index, result)
            if not result.more_available and with_data:
                result = result._replace(more_available=True)
            return result

    def _on_event(self, index: int, result: BufferOrEvent) -> None:
        """Flink's handleEndOfPartitionEvent / handleEndOfUserDataEvent: a gate leaves the
        remaining ones with its last EndOfPartition (or EndOfData)."""
        gate, event = self.gates[index], result.event
        if isinstance(event, EndOfPartitionEvent) and gate.is_finished:
            if result.more_available or index not in self._remaining:
                raise IllegalStateError(f"gate {gate.gate_index} of a union ended twice or with data left")
            self._remaining.discard(index)
            if not self._remaining:
                self.availability.set_available()
        elif isinstance(event, EndOfData):
            status = gate.has_received_end_of_data()
            if status is not EndOfDataStatus.NOT_END_OF_DATA:
                self._drain_on_end_of_data &= status is EndOfDataStatus.DRAINED
                self._remaining_user_data.discard(index)

    def has_received_end_of_data(self) -> EndOfDataStatus:
        """DRAINED once every gate drained, STOPPED if all ended data and one did not drain."""
        if self._remaining_user_data:
            return EndOfDataStatus.NOT_END_OF_DATA
        return EndOfDataStatus.DRAINED if self._drain_on_end_of_data else EndOfDataStatus.STOPPED

    def is_available(self) -> bool:
        """A gate has data queued (or every gate has finished)."""
        return self.availability.is_available

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once a gate has data or every gate finished."""
        return self.availability.wait()

    async def get_next(self) -> BufferOrEvent | None:
        while True:
            result = self.poll_next()
            if result is not None or self.is_finished:
                return result
            await self.wait_available()

    @property
    def has_priority_events(self) -> bool:
        """A gate with a priority event is queued (the task handles it next)."""
        return self.priority_availability.is_available

    @property
    def is_finished(self) -> bool:
        return not self._remaining

    @property
    def num_channels(self) -> int:
        return sum(g.num_channels for g in self.gates)

    def get_channel(self, channel_index: int) -> InputChannel:
        """The channel at `channel_index` over all gates, in the order of the gates."""
        for gate, offset in zip(reversed(self.gates), reversed(self._offsets)):
            if channel_index >= offset:
                return gate.channels[channel_index - offset]
        raise IndexError(channel_index)

    def resume_consumption(self, channel_info: InputChannelInfo) -> None:
        self._by_index[channel_info.gate_index].resume_consumption(channel_info)

    def acknowledge_all_records_processed(self, channel_info: InputChannelInfo) -> None:
        self._by_index[channel_info.gate_index].acknowledge_all_records_processed(channel_info)

    def close(self) -> None:
        for gate in self.gates:
            gate.close()
