"""InputChannel: what Local- and RemoteInputChannel share (spec 4.1).

Identity (`channel_info`, the consumed partition and subpartition), the partition-request
backoff bound, the error holder that the task thread re-throws, and the input counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from shuffle.api.events import CheckpointBarrier
from shuffle.buffer.buffer import Buffer
from shuffle.buffer.data_type import DataType
from shuffle.channel_state import ChannelStatePersister, ChannelStateWriter
from shuffle.errors import CancelTaskError
from shuffle.partition.result_partition_id import channel_name

if TYPE_CHECKING:
    from shuffle.consumer.single_input_gate import SingleInputGate


class InputChannelInfo(NamedTuple):
    gate_index: int
    channel_index: int


class BufferAndAvailability(NamedTuple):
    buffer: Buffer
    next_data_type: DataType
    buffers_in_backlog: int
    sequence_number: int
    more_priority_events: bool = False

    @property
    def more_available(self) -> bool:
        return self.next_data_type is not DataType.NONE


class InputChannel:
    """Base of the channels of a SingleInputGate."""

    __slots__ = ("gate", "channel_index", "_channel_info", "partition_id", "subpartition_index",
                 "num_bytes_in", "num_buffers_in", "error", "is_released", "_persister")

    def __init__(self, gate: SingleInputGate, channel_index: int, partition_id: str,
                 subpartition_index: int) -> None:
        self.gate = gate
        self.channel_index = channel_index
        self._channel_info: InputChannelInfo | None = None
        self.partition_id = partition_id
        self.subpartition_index = subpartition_index
        self.num_bytes_in = 0
        self.num_buffers_in = 0
        self.error: BaseException | None = None
        self.is_released = False
        self._persister: ChannelStatePersister | None = None

    @property
    def persister(self) -> ChannelStatePersister:
        """Persists in-flight data of unaligned checkpoints (its writer is the gate's, the
        task's), under the name the producer's subpartition persists its share under. Made
        when first needed (a checkpoint starts, or an event comes): until then the channel
        persists nothing, and an idle channel of a job without checkpoints never has one."""
        if self._persister is None:
            self._persister = ChannelStatePersister(self.channel_state_key, self.gate.channel_state_writer)
        return self._persister

    @property
    def channel_state_key(self) -> tuple[str, int]:
        """The key this channel's in-flight data is persisted under: its producer's
        partition and subpartition, as the producer persists its share."""
        return self.partition_id, self.subpartition_index

    def use_channel_state_writer(self, writer: ChannelStateWriter) -> None:
        """The gate's writer changed: a persister made already writes there too."""
        if self._persister is not None:
            self._persister.writer = writer

    def maybe_persist(self, buffer: Buffer) -> None:
        """Persist `buffer` if it is in-flight data of a started checkpoint (inlined in
        `RemoteInputChannel.on_buffer`, per buffer)."""
        if self._persister is not None:
            self._persister.maybe_persist(buffer)

    @property
    def name(self) -> str:
        """The name every trace event uses for this channel: producer partition and
        subpartition (made when asked, not kept: only traces and errors ask, and a slot
        for it would cost every idle channel of a large job 8 bytes)."""
        return channel_name(self.partition_id, self.subpartition_index)

    @property
    def channel_info(self) -> InputChannelInfo:
        """Gate and channel index (Flink's InputChannelInfo), made when first asked: with
        the channel's first buffer or checkpoint."""
        if self._channel_info is None:
            self._channel_info = InputChannelInfo(self.gate.gate_index, self.channel_index)
        return self._channel_info

    def notify_channel_non_empty(self) -> None:
        self.gate.notify_channel_non_empty(self)

    def notify_priority_event(self, sequence_number: int) -> None:
        self.gate.notify_priority_event(self, sequence_number)

    def set_error(self, cause: BaseException) -> None:
        """Keep the first error and wake the task, which re-throws it when polling."""
        if self.error is None:
            self.error = cause
            self.notify_channel_non_empty()

    def check_error(self) -> None:
        """Raise the channel's error, if any (`get_next_buffer` asks only when there is one)."""
        if self.error is not None:
            if isinstance(self.error, (OSError, CancelTaskError)):
                raise self.error  # Flink's checkError rethrows these as they are
            raise IOError(f"input channel {self.name} failed: {self.error}") from self.error

    @property
    def max_backoff(self) -> float:
        """The longest backoff between partition requests (`request_backoff_max`: the gate's
        configuration, read there rather than copied into every channel)."""
        return self.gate.config.request_backoff_max

    # -- unaligned checkpoints (Flink's CheckpointableInput, per channel) ----------------

    def checkpoint_started(self, barrier: CheckpointBarrier) -> None:
        """Persist what is queued before this channel's barrier, then what arrives until it."""
        self.persister.start_persisting(barrier.id, self.get_inflight_buffers(barrier.id))

    def checkpoint_stopped(self, checkpoint_id: int) -> None:
        self.persister.stop_persisting(checkpoint_id)

    def get_inflight_buffers(self, checkpoint_id: int) -> list[Buffer]:
        """Data buffers queued on the consumer side before the checkpoint's barrier."""
        return []

    def convert_to_priority_event(self, sequence_number: int) -> None:
        """Let the announced barrier at `sequence_number` overtake the queued data."""
        raise NotImplementedError(f"{type(self).__name__} receives no announcements")

    # Overridden by the concrete channels.
    async def setup(self) -> None:
        """Acquire what the channel needs before requesting (exclusive buffers)."""

    def get_next_buffer(self) -> BufferAndAvailability | None:
        raise NotImplementedError

    def resume_consumption(self) -> None:
        raise NotImplementedError

    def acknowledge_all_records_processed(self) -> None:
        raise NotImplementedError

    def release_all_resources(self) -> None:
        raise NotImplementedError

    def announce_buffer_size(self, size: int) -> None:
        """Tell the producer's subpartition the buffer size to use from its next buffer on."""
        raise NotImplementedError

    @property
    def buffers_in_use_count(self) -> int:
        """Buffers this channel's data occupies (what the debloater divides the target among)."""
        raise NotImplementedError
