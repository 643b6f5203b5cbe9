"""UnionInputGate: several gates read as one input, round-robin between gates (spec 4.7)."""

from __future__ import annotations


from shuffle import kernel
from shuffle.consumer.input_channel import InputChannelInfo
from shuffle.consumer.single_input_gate import BufferOrEvent, SingleInputGate
from shuffle.prioritized_deque import PrioritizedDeque


class UnionInputGate:
    def __init__(self, gates: list[SingleInputGate]) -> None:
        if len(gates) < 2:
            raise ValueError("a UnionInputGate combines at least two gates")
        self.gates = gates
        self._offsets = []
        offset = 0
        for gate in gates:
            self._offsets.append(offset)
            offset += gate.num_channels
        # Gates that may have data, FIFO, gates with priority events in a front section.
        self._with_data: PrioritizedDeque[int] = PrioritizedDeque()
        for index in range(len(gates)):
            self._with_data.add(index)
        self._queued = [True] * len(gates)

    def _queue_gate(self, index: int, priority: bool) -> None:
        if self._queued[index]:
            if priority:
                self._with_data.prioritize(index)
            return
        self._with_data.add(index, priority)
        self._queued[index] = True

    def _requeue_available(self) -> None:
        """Queue the gates that got data (or priority events) since they left the queue."""
        for index, gate in enumerate(self.gates):
            if gate.is_finished:
                continue
            if gate.priority_availability.is_available:
                self._queue_gate(index, True)
            elif gate.is_available():
                self._queue_gate(index, False)

    def poll_next(self) -> BufferOrEvent | None:
        self._requeue_available()
        for _ in range(len(self._with_data)):
            index = self._with_data.poll()
            self._queued[index] = False
            gate = self.gates[index]
            result = gate.poll_next()
            if result is None:
                continue
            if result.more_available and not gate.is_finished:
                # Round-robin between gates: back to the end (of its section).
                self._queue_gate(index, result.more_priority_events)
            channel = InputChannelInfo(result.channel_info.gate_index,
                                       result.channel_info.channel_index + self._offsets[index])
            return result._replace(channel_info=channel, more_available=bool(self._with_data),
                                   more_priority_events=self._with_data.num_priority_elements > 0)
        return None

    def is_available(self) -> bool:
        """Some gate may have data (or every gate has finished)."""
        return self.is_finished or any(g.is_available() for g in self.gates if not g.is_finished)

    async def wait_available(self) -> None:
        """Return once any unfinished gate has data."""
        if self.is_available():
            return
        async with kernel.open_nursery() as nursery:
            for gate in self.gates:
                if not gate.is_finished:
                    nursery.start_soon(_wait_then_cancel, gate, nursery.cancel_scope)

    async def get_next(self) -> BufferOrEvent | None:
        while True:
            result = self.poll_next()
            if result is not None or self.is_finished:
                return result
            await self.wait_available()

    @property
    def is_finished(self) -> bool:
        return all(g.is_finished for g in self.gates)

    @property
    def num_channels(self) -> int:
        return sum(g.num_channels for g in self.gates)

    def resume_consumption(self, channel_info: InputChannelInfo) -> None:
        gate, local = self._locate(channel_info.channel_index)
        gate.resume_consumption(InputChannelInfo(gate.gate_index, local))

    def acknowledge_all_records_processed(self, channel_info: InputChannelInfo) -> None:
        gate, local = self._locate(channel_info.channel_index)
        gate.acknowledge_all_records_processed(InputChannelInfo(gate.gate_index, local))

    def _locate(self, channel_index: int) -> tuple[SingleInputGate, int]:
        for gate, offset in zip(reversed(self.gates), reversed(self._offsets)):
            if channel_index >= offset:
                return gate, channel_index - offset
        raise IndexError(channel_index)

    def close(self) -> None:
        for gate in self.gates:
            gate.close()


async def _wait_then_cancel(gate: SingleInputGate, scope: kernel.CancelScope) -> None:
    await gate.wait_available()
    scope.cancel()
