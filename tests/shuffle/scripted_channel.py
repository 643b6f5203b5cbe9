"""A scripted input channel for gate tests: what it returns is queued by the test.

It plays the part Flink's tests give their `TestInputChannel`: the test queues buffers and
events with the data type that is to follow each one (which makes the gate re-queue the
channel or not), then notifies the gate; nothing goes over a network.
"""

from __future__ import annotations

from collections import deque

from shuffle.api.events import AbstractEvent, EndOfData, EndOfPartitionEvent, StopMode
from shuffle.buffer.buffer import Buffer
from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.consumer.input_channel import BufferAndAvailability, InputChannel
from shuffle.consumer.single_input_gate import SingleInputGate
from shuffle.serialization.event_serializer import data_type_for_event, serialize_event


class ScriptedChannel(InputChannel):
    """Returns what the test queued, in order; `returned` keeps every buffer handed out."""

    __slots__ = ("script", "returned", "notify_on_read")

    def __init__(self, gate: SingleInputGate, channel_index: int, notify_on_read: bool = False) -> None:
        super().__init__(gate, channel_index, f"scripted-{gate.gate_index}", channel_index)
        self.script: deque[BufferAndAvailability] = deque()
        self.returned: list[Buffer] = []
        self.notify_on_read = notify_on_read
        gate.add_channel(self)

    def read(self, buffer: Buffer, next_data_type: DataType = DataType.DATA_BUFFER) -> "ScriptedChannel":
        self.script.append(BufferAndAvailability(buffer, next_data_type, 0, len(self.returned) + len(self.script)))
        if self.notify_on_read:
            self.notify_channel_non_empty()
        return self

    def read_buffer(self, size: int = 1, next_data_type: DataType = DataType.DATA_BUFFER) -> "ScriptedChannel":
        return self.read(Buffer.of_event(bytes(size), DataType.DATA_BUFFER), next_data_type)

    def read_event(self, event: AbstractEvent, next_data_type: DataType) -> "ScriptedChannel":
        return self.read(Buffer.of_event(serialize_event(event), data_type_for_event(event, False)), next_data_type)

    def read_end_of_data(self, mode: StopMode = StopMode.DRAIN) -> "ScriptedChannel":
        return self.read_event(EndOfData(mode), DataType.EVENT_BUFFER)

    def read_end_of_partition(self) -> "ScriptedChannel":
        return self.read_event(EndOfPartitionEvent.INSTANCE, DataType.NONE)

    def get_next_buffer(self) -> BufferAndAvailability | None:
        self.check_error()
        if not self.script:
            return None
        result = self.script.popleft()
        self.returned.append(result.buffer)
        return result

    def release_all_resources(self) -> None:
        self.is_released = True

    def resume_consumption(self) -> None:
        pass

    def acknowledge_all_records_processed(self) -> None:
        pass

    def announce_buffer_size(self, size: int) -> None:
        pass

    @property
    def buffers_in_use_count(self) -> int:
        return len(self.script)

    @property
    def queue_length(self) -> int:
        return len(self.script)

    @property
    def queue_size(self) -> int:
        return sum(b.buffer.size for b in self.script)


def scripted_gate(num_channels: int, gate_index: int = 0, notify_on_read: bool = False
                  ) -> tuple[SingleInputGate, list[ScriptedChannel]]:
    """A gate (not set up: no buffer pool) over `num_channels` scripted channels."""
    gate = SingleInputGate(gate_index, "scripted-task", NetworkConfig(buffer_size=4096), NetworkBufferPool(16, 4096))
    return gate, [ScriptedChannel(gate, i, notify_on_read) for i in range(num_channels)]
