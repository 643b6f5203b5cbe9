"""SingleInputGate: one logical input of a task, over one channel per producer subpartition (spec 4.6).

Keeps the channels that have data in a FIFO with a priority section, so that every
channel gets its turn (a channel with more data goes to the back), turns event buffers
into events, tracks end of partition per channel, and owns the gate's floating buffers.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import NamedTuple

from shuffle import kernel
from shuffle.api.events import (
    CheckpointBarrier,
    EndOfData,
    EndOfDataStatus,
    EndOfPartitionEvent,
    EventAnnouncement,
    StopMode,
)
from shuffle.availability import AvailabilityHelper
from shuffle.buffer.buffer import Buffer
from shuffle.buffer.local_buffer_pool import LocalBufferPool
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.channel_state import ChannelStateWriter
from shuffle.config import NetworkConfig
from shuffle.consumer.input_channel import InputChannel, InputChannelInfo
from shuffle.consumer.remote_input_channel import ConnectionProvider, RemoteInputChannel
from shuffle.errors import CancelTaskError, IllegalStateError, check
from shuffle.java_int import INT_MAX, INT_MIN
from shuffle.partition.result_partition_manager import ResultPartitionManager
from shuffle.prioritized_deque import PrioritizedDeque
from shuffle.serialization.event_serializer import deserialize_event
from shuffle.throughput import BufferDebloater, ThroughputCalculator
from shuffle.trace import NULL_TRACER, Tracer



class GateBuffersSpec(NamedTuple):
    exclusive_per_channel: int
    required_floating: int
    total_floating: int


def gate_buffers_spec(num_channels: int, config: NetworkConfig, blocking: bool = False) -> GateBuffersSpec:
    """Exclusive buffers per remote channel and the floating pool's min/max (spec 1.5)."""
    b, f = config.exclusive_buffers_per_channel, config.floating_buffers_per_gate
    threshold = 1000 if blocking else INT_MAX
    required = min(threshold, num_channels * b + 1)
    exclusive = min(b, (required - 1) // num_channels) if num_channels else 0
    return GateBuffersSpec(exclusive, required - exclusive * num_channels,
                           num_channels * b + f - exclusive * num_channels)


#: What the gate knows of each channel (`SingleInputGate._channel_states`): Flink's two
#: BitSets (enqueuedInputChannelsWithData, channelsWithEndOfPartitionEvents) as one list
#: entry per channel, the states being exclusive: a channel that ended is never queued.
_IDLE, _QUEUED, _ENDED = 0, 1, 2


def _buffer_debloater(config: NetworkConfig) -> BufferDebloater:
    return BufferDebloater(round(config.debloat_target * 1000), config.buffer_size, config.min_segment_size,
                           config.debloat_threshold_percentages, config.debloat_samples,
                           config.starting_segment_size)


def _is_outdated(sequence_number: int, last_sequence_number: int) -> bool:
    """Whether a priority event numbered `sequence_number` was already polled (Flink's
    `SingleInputGate.isOutdated`): numbers of opposite sign, one above INT_MAX / 2, are taken
    as a wrap, the negative one being the later."""
    if (last_sequence_number < 0) != (sequence_number < 0) and \
            max(last_sequence_number, sequence_number) > INT_MAX // 2:
        return last_sequence_number < 0
    return last_sequence_number >= sequence_number


class BufferOrEvent(NamedTuple):
    """What the task polls: a data buffer (recycle it after reading) or an event."""

    buffer: Buffer | None
    event: object | None
    channel_info: InputChannelInfo
    more_available: bool
    more_priority_events: bool
    size: int
    #: The event overtook queued data (an unaligned barrier, an announcement).
    has_priority: bool = False

    @property
    def is_buffer(self) -> bool:
        return self.buffer is not None


class SingleInputGate:
    def __init__(self, gate_index: int, owner_name: str, config: NetworkConfig,
                 network_pool: NetworkBufferPool, blocking: bool = False, tracer: Tracer = NULL_TRACER,
                 connections: ConnectionProvider | None = None,
                 partition_manager: ResultPartitionManager | None = None) -> None:
        self.gate_index = gate_index
        self.owner_name = owner_name
        self.config = config
        #: The remote channels announce credit (`flow_control = "credit"`); read per buffer,
        #: so a plain attribute rather than the configuration's property.
        self.credit_based = config.credit_based
        self.network_pool = network_pool
        #: Where the channels request their subpartitions: the TaskManager's connections
        #: (remote channels) and partitions (local ones), shared, not held by every channel.
        self.connections = connections
        self.partition_manager = partition_manager
        self.blocking = blocking
        self.channels: list[InputChannel] = []
        self.buffer_pool: LocalBufferPool | None = None
        self._with_data: PrioritizedDeque[InputChannel] = PrioritizedDeque()
        self._channel_states: list[int] = []  # _IDLE, _QUEUED (in _with_data) or _ENDED
        self._num_end_of_partition = 0
        #: Every channel delivered EndOfPartition (a flag: asked several times per buffer).
        self.is_finished = True
        self._end_of_data: set[int] = set()  # channels that sent EndOfData
        self._drain_on_end_of_data = True
        #: Per channel index, the number of its last polled priority event (Flink's array,
        #: INT_MIN where none came): only channels that had one hold an entry.
        self._last_priority_seq: dict[int, int] = {}
        self.availability = AvailabilityHelper()
        self.priority_availability = AvailabilityHelper()
        self.is_closed = False
        self.num_bytes_in = 0
        #: What the gate delivers per second while it has data, for its debloater (its only
        #: reader: without debloating no gate measures, per buffer, what nobody reads).
        self.throughput_calculator: ThroughputCalculator | None = ThroughputCalculator() if config.debloat else None
        self.buffer_debloater = _buffer_debloater(config) if config.debloat else None
        self.tracer = tracer
        #: Where the channels persist in-flight data of unaligned checkpoints (the task's).
        self.channel_state_writer: ChannelStateWriter | None = None

    def add_channel(self, channel: InputChannel) -> None:
        if channel.channel_index != len(self.channels):
            raise ValueError("channels must be added in index order")
        self.channels.append(channel)
        self.is_finished = False
        self._channel_states.append(_IDLE)

    @property
    def num_channels(self) -> int:
        return len(self.channels)

    @property
    def buffers_spec(self) -> GateBuffersSpec:
        return gate_buffers_spec(self.num_channels, self.config, self.blocking)

    async def setup(self) -> None:
        """Floating pool first (reserving one segment), then exclusive buffers (FLINK-24035)."""
        spec = self.buffers_spec
        self.buffer_pool = self.network_pool.create_buffer_pool(spec.required_floating, spec.total_floating)
        self.buffer_pool.reserve_segments(1)
        for channel in self.channels:
            await channel.setup()

    async def request_partitions(self) -> None:
        """Request every channel's subpartition concurrently (local ones retry with backoff)."""
        async with kernel.open_nursery() as nursery:
            for channel in self.channels:
                nursery.start_soon(channel.request_subpartition)

    # -- notifications from channels ------------------------------------------------------

    def notify_channel_non_empty(self, channel: InputChannel) -> None:
        self._queue_channel(channel, None)

    def notify_priority_event(self, channel: InputChannel, sequence_number: int) -> None:
        self._queue_channel(channel, sequence_number)

    def _queue_channel(self, channel: InputChannel, priority_seq: int | None,
                       force_priority: bool = False) -> None:
        idx = channel.channel_index
        priority = force_priority or priority_seq is not None
        if priority_seq is not None and _is_outdated(priority_seq, self._last_priority_seq.get(idx, INT_MIN)):
            return
        state = self._channel_states[idx]
        if state == _ENDED:
            return
        with_data = self._with_data
        if state == _QUEUED:
            # Already queued: only a move into the priority section can change anything.
            if not priority or not with_data.prioritize(channel):
                return
        else:
            with_data.add(channel, priority)
            self._channel_states[idx] = _QUEUED
        if priority and with_data.num_priority_elements == 1:
            self.priority_availability.set_available()
        if len(with_data) == 1:
            self.availability.set_available()

    # -- polling --------------------------------------------------------------------------

    def poll_next(self) -> BufferOrEvent | None:
        """The next buffer or event, or None if no channel has data right now."""
        if self.is_finished:
            return None  # Flink's getNextBufferOrEvent: nothing more, closed or not
        if self.is_closed:
            raise CancelTaskError("Input gate is already closed.")
        throughput = self.throughput_calculator
        while True:
            if not self._with_data:
                if not self.is_finished:
                    self.availability.set_unavailable()
                if throughput is not None:
                    throughput.pause_measurement()
                return None
            had_priority = self._with_data.num_priority_elements > 0
            channel = self._with_data.poll()
            if had_priority and not self._with_data.num_priority_elements:
                self.priority_availability.set_unavailable()
            self._channel_states[channel.channel_index] = _IDLE
            result = channel.get_next_buffer()
            if result is None:
                continue
            if result.more_available:
                self._queue_channel(channel, None, force_priority=result.more_priority_events)
            elif not self._with_data:
                # Flink's checkUnavailability: unavailable as soon as the queue empties, not
                # at the next poll (a union of gates waits for the gate's next data then)
                self.availability.set_unavailable()
            buffer = result.buffer
            self.num_bytes_in += buffer.size
            if throughput is not None:
                throughput.resume_measurement()
                throughput.incoming_data_size(buffer.size)
            more = bool(self._with_data)
            more_priority = self._with_data.num_priority_elements > 0
            if buffer.data_type.is_buffer:
                return BufferOrEvent(buffer, None, channel.channel_info, more, more_priority, buffer.size)
            event = deserialize_event(bytes(buffer.memory()))
            buffer.recycle()
            if buffer.data_type.has_priority and not isinstance(event, EventAnnouncement):
                # an announcement shares its barrier's number: the barrier may still be prioritized
                self._last_priority_seq[channel.channel_index] = result.sequence_number
            if isinstance(event, EndOfPartitionEvent):
                self._on_end_of_partition(channel)
                more = bool(self._with_data)
            elif isinstance(event, EndOfData):
                self._on_end_of_data(channel, event)
            return BufferOrEvent(None, event, channel.channel_info, more, more_priority, buffer.size,
                                 buffer.data_type.has_priority)

    async def get_next(self) -> BufferOrEvent | None:
        """Wait for the next buffer or event; None once every channel has ended."""
        while True:
            result = self.poll_next()
            if result is not None or self.is_finished:
                return result
            await self.availability.wait()

    def _on_end_of_partition(self, channel: InputChannel) -> None:
        idx = channel.channel_index
        state = self._channel_states[idx]
        if state == _ENDED:
            raise RuntimeError(f"channel {channel.name} received EndOfPartition twice")
        self._channel_states[idx] = _ENDED
        self._num_end_of_partition += 1
        self.is_finished = self._num_end_of_partition == len(self.channels)
        if state == _QUEUED:
            had_priority = self._with_data.num_priority_elements > 0
            self._with_data.remove(channel)
            if had_priority and not self._with_data.num_priority_elements:
                self.priority_availability.set_unavailable()
        channel.release_all_resources()
        if self.is_finished:
            self.availability.set_available()

    def check_invariants(self) -> None:
        """Each channel with data is queued once."""
        check(self._channel_states.count(_QUEUED) == len(self._with_data),
              f"gate {self.gate_index} of {self.owner_name}: queued flags disagree with the queue")
        for channel in self.channels:
            if isinstance(channel, RemoteInputChannel):
                channel.check_invariants()

    def _on_end_of_data(self, channel: InputChannel, event: EndOfData) -> None:
        if channel.channel_index in self._end_of_data:
            raise IllegalStateError(f"channel {channel.name} received EndOfData twice")
        self._end_of_data.add(channel.channel_index)
        self._drain_on_end_of_data &= event.stop_mode is StopMode.DRAIN

    def has_received_end_of_data(self) -> EndOfDataStatus:
        """Flink's `hasReceivedEndOfData`: DRAINED once every channel sent EndOfData with
        drain, STOPPED if all did and any without, else NOT_END_OF_DATA."""
        if len(self._end_of_data) < len(self.channels):
            return EndOfDataStatus.NOT_END_OF_DATA
        return EndOfDataStatus.DRAINED if self._drain_on_end_of_data else EndOfDataStatus.STOPPED

    @property
    def has_priority_events(self) -> bool:
        """A channel has an event that overtook its data (the task handles it next)."""
        return self._with_data.num_priority_elements > 0

    def unfinished_channels(self) -> list[InputChannelInfo]:
        """Flink's `getUnfinishedChannels`: the channels that have not delivered EndOfPartition."""
        return [c.channel_info for c in self.channels if self._channel_states[c.channel_index] != _ENDED]

    def is_available(self) -> bool:
        return self.availability.is_available

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once a channel has data or the gate finished (the helper's wait
        itself, not a coroutine around it: one frame less to enter and resume per wait)."""
        return self.availability.wait()

    # -- towards the producers ------------------------------------------------------------

    def resume_consumption(self, channel_info: InputChannelInfo) -> None:
        self.channels[channel_info.channel_index].resume_consumption()

    def block_consumption(self, channel_info: InputChannelInfo) -> None:
        """A no-op: the producer blocked itself after sending the aligned barrier."""

    # -- unaligned checkpoints (Flink's CheckpointableInput) --------------------------------

    def set_channel_state_writer(self, writer: ChannelStateWriter) -> None:
        self.channel_state_writer = writer
        for channel in self.channels:
            channel.use_channel_state_writer(writer)

    def checkpoint_started(self, barrier: CheckpointBarrier) -> None:
        for channel in self.channels:
            channel.checkpoint_started(barrier)

    def checkpoint_stopped(self, checkpoint_id: int) -> None:
        for channel in self.channels:
            channel.checkpoint_stopped(checkpoint_id)

    def convert_to_priority_event(self, channel_info: InputChannelInfo, sequence_number: int) -> None:
        self.channels[channel_info.channel_index].convert_to_priority_event(sequence_number)

    def acknowledge_all_records_processed(self, channel_info: InputChannelInfo) -> None:
        self.channels[channel_info.channel_index].acknowledge_all_records_processed()

    def trigger_debloating(self) -> None:
        """Flink's `triggerDebloating` (spec 4.6): the throughput since the last call and the
        buffers in use give the debloater a size; a new one goes to every open channel."""
        if self.is_finished or self.is_closed:
            return
        if self.buffer_debloater is None:
            raise IllegalStateError(f"gate {self.gate_index} of {self.owner_name}: debloating is off")
        debloater = self.buffer_debloater
        throughput = self.throughput_calculator.calculate_throughput()
        buffers_in_use = self.buffers_in_use_count
        size = debloater.recalculate_buffer_size(throughput, buffers_in_use)
        if self.tracer.enabled:  # what Flink logs at debug level
            self.tracer.emit("buffer_size_recalculated", gate=f"{self.owner_name}/{self.gate_index}",
                             throughput=throughput, buffers_in_use=buffers_in_use, size=debloater.ema_size,
                             estimated_ms=debloater.last_estimated_time_to_consume_ms, announced=size is not None)
        if size is not None:
            for channel in self.channels:
                if not channel.is_released:
                    channel.announce_buffer_size(size)

    @property
    def buffers_in_use_count(self) -> int:
        return sum(channel.buffers_in_use_count for channel in self.channels)

    def close(self) -> None:
        """Release every channel and the floating pool."""
        if self.is_closed:
            return
        self.is_closed = True
        for channel in self.channels:
            channel.release_all_resources()
        if self.buffer_pool is not None:
            self.buffer_pool.destroy()
        self.availability.set_available()

    # -- metrics (spec 7.3) ---------------------------------------------------------------

    @property
    def remote_channels(self) -> list[RemoteInputChannel]:
        return [c for c in self.channels if isinstance(c, RemoteInputChannel)]

    @property
    def input_queue_length(self) -> int:
        return sum(c.queue_length for c in self.channels)

    @property
    def input_queue_size(self) -> int:
        """Queued bytes over the channels (`inputQueueSize`)."""
        return sum(c.queue_size for c in self.channels)

    def exclusive_buffers_usage(self) -> tuple[int, int]:
        """(used, total) exclusive buffers over the remote channels."""
        remote = self.remote_channels
        return (sum(c.exclusive_buffers_used() for c in remote), sum(c.initial_credit for c in remote))

    def floating_buffers_usage(self) -> tuple[int, int]:
        """(used, total) floating buffers: lent out and not held free by a channel."""
        pool = self.buffer_pool
        if pool is None:
            return 0, 0
        held_free = sum(len(c.buffer_manager.floating) for c in self.remote_channels)
        return max(0, pool.best_effort_get_num_of_used_buffers() - held_free), pool.num_buffers
