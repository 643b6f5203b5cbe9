"""RemoteInputChannel: reads a subpartition of another TaskManager over Netty (spec 4.2).

Buffers arrive in `on_buffer` with the sender's sequence number and backlog; the backlog
drives floating-buffer requests, and every newly held buffer is one credit, announced to
the producer (coalesced) in AddCredit messages.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Protocol

from shuffle.api.events import EventAnnouncement
from shuffle.buffer.buffer import Buffer
from shuffle.buffer.data_type import DataType
from shuffle.consumer.buffer_manager import BufferManager
from shuffle.consumer.input_channel import BufferAndAvailability, InputChannel
from shuffle.errors import (BufferReorderingError, CancelTaskError, IllegalStateError, InvariantViolation,
                            PartitionConnectionError, PartitionNotFoundError)
from shuffle.java_int import next_sequence_number, sequence_number_before
from shuffle.prioritized_deque import NEVER_QUEUED, PrioritizedDeque, own
from shuffle.serialization.event_serializer import deserialize_event, serialize_event

if TYPE_CHECKING:
    from shuffle.consumer.single_input_gate import SingleInputGate


class PartitionRequestClient(Protocol):
    """What a remote channel asks of its connection (see shuffle/netty/partition_request_client.py)."""

    def request_subpartition(self, channel: "RemoteInputChannel") -> None: ...

    def notify_credit_available(self, channel: "RemoteInputChannel") -> None: ...

    def resume_consumption(self, channel: "RemoteInputChannel") -> None: ...

    def acknowledge_all_records_processed(self, channel: "RemoteInputChannel") -> None: ...

    def notify_new_buffer_size(self, channel: "RemoteInputChannel", size: int) -> None: ...

    def close_channel(self, channel: "RemoteInputChannel") -> None: ...


class ConnectionProvider(Protocol):
    async def create_partition_request_client(self, address: str) -> PartitionRequestClient: ...


class RemoteInputChannel(InputChannel):
    # What is the same for every channel of the gate (the TaskManager's configuration,
    # tracer, connections and NetworkBufferPool) is read through the gate, not copied into
    # each channel: a wide job has many idle channels, and a slot costs 8 bytes in each.
    __slots__ = ("receiver_id", "producer_address", "initial_credit", "received", "expected_sequence_number",
                 "unannounced_credit", "last_barrier", "buffer_manager", "client", "_retry_backoff",
                 "total_queue_size_in_bytes")

    def __init__(self, gate: SingleInputGate, channel_index: int, partition_id: str,
                 subpartition_index: int, producer_address: str, initial_credit: int, receiver_id: int) -> None:
        super().__init__(gate, channel_index, partition_id, subpartition_index)
        #: Flink's `InputChannelID`: unique among the channels its TaskManager ever made.
        self.receiver_id = receiver_id
        self.producer_address = producer_address
        self.initial_credit = initial_credit
        self.received: PrioritizedDeque[tuple[Buffer, int]] = NEVER_QUEUED
        self.expected_sequence_number = 0
        self.unannounced_credit = 0
        #: Flink's `totalQueueSizeInBytes` (`inputQueueSize`): a running count, not the size of
        #: what is queued: a received buffer adds its size, a polled one takes its size away.
        #: An announcement made here is never added but is taken away when polled, and a
        #: release keeps the count; Flink reads it floored at 0.
        self.total_queue_size_in_bytes = 0
        #: (checkpoint id, sequence number) of the barrier received last, until its checkpoint
        #: stops (Flink's lastBarrierId and lastBarrierSequenceNumber, in one slot: a pair
        #: is made per barrier, and an idle channel holds None).
        self.last_barrier: tuple[int, int] | None = None
        self.buffer_manager = BufferManager(self)
        self.client: PartitionRequestClient | None = None
        self._retry_backoff = 0.0

    async def setup(self) -> None:
        """Take the exclusive buffers (once)."""
        if self.buffer_manager.num_free_exclusive:  # Flink's check: no exclusive buffers yet
            raise RuntimeError(f"channel {self.name} set up twice")
        await self.buffer_manager.request_exclusive_buffers(self.initial_credit)

    async def request_subpartition(self) -> None:
        """Connect and send the PartitionRequest; a channel with a client has requested
        already and sends nothing (Flink's `requestSubpartitions`; retries go through
        `on_failed_partition_request`)."""
        if self.client is not None:
            return
        try:
            connections = self.gate.connections
            self.client = await connections.create_partition_request_client(self.producer_address)
        except OSError as exc:  # no connection to the producer's TaskManager
            raise PartitionConnectionError(self.partition_id) from exc
        self.client.request_subpartition(self)

    # -- called by the client handler (Netty side) ---------------------------------------

    def request_buffer(self) -> Buffer | None:
        return self.buffer_manager.request_buffer()

    async def request_buffer_blocking(self) -> Buffer:
        return await self.buffer_manager.request_buffer_blocking()

    def on_buffer(self, buffer: Buffer, sequence_number: int, backlog: int) -> None:
        if self.is_released:
            buffer.recycle()
            return
        if sequence_number != self.expected_sequence_number:
            buffer.recycle()
            self.on_error(BufferReorderingError(
                f"Buffer re-ordering: expected buffer with sequence number "
                f"{self.expected_sequence_number}, but received {sequence_number}."))
            return
        data_type = buffer.data_type
        if data_type.is_blocking_upstream:  # Flink's onBlockingUpstream, then its check of the backlog
            if self.initial_credit == 0:
                self.buffer_manager.release_floating_buffers()
            if backlog != 0:
                buffer.recycle()
                raise ValueError(f"Illegal number of backlog: {backlog}, should be 0.")
        was_empty = not self.received
        first_priority = False
        self.received = received = own(self.received)
        if data_type.has_priority:
            received.add_priority_element((buffer, sequence_number))
            first_priority = received.num_priority_elements == 1
        else:
            received.add((buffer, sequence_number))
            if self._persister is not None:
                self._persister.maybe_persist(buffer)
        if not data_type.is_buffer:
            event = deserialize_event(bytes(buffer.memory()))
            if data_type.requires_announcement:
                announcement = serialize_event(EventAnnouncement(event, sequence_number))
                received.add_priority_element(
                    (Buffer.of_event(announcement, DataType.PRIORITIZED_EVENT_BUFFER), sequence_number))
                first_priority = received.num_priority_elements == 1
            if self.persister.check_for_barrier(event) is not None:  # a newer one only: Flink's `> lastBarrierId`
                self.last_barrier = (event.id, sequence_number)
        self.total_queue_size_in_bytes += buffer.size
        self.expected_sequence_number = next_sequence_number(self.expected_sequence_number)
        tracer = self.gate.tracer
        if tracer.enabled:
            tracer.emit("buffer_received", channel=self.name, seq=sequence_number, backlog=backlog,
                        bytes=buffer.size, data_type=data_type.name)
        if first_priority:
            self.notify_priority_event(sequence_number)
        if was_empty:
            self.gate.notify_channel_non_empty(self)
        if backlog >= 0:
            self.on_sender_backlog(backlog)

    def on_empty_buffer(self, sequence_number: int, backlog: int) -> None:
        if sequence_number != self.expected_sequence_number:
            self.on_error(BufferReorderingError(
                f"Buffer re-ordering: expected buffer with sequence number "
                f"{self.expected_sequence_number}, but received {sequence_number}."))
            return
        self.expected_sequence_number = next_sequence_number(self.expected_sequence_number)
        if backlog >= 0:
            self.on_sender_backlog(backlog)

    def on_sender_backlog(self, backlog: int) -> None:
        if self.gate.credit_based:
            obtained = self.buffer_manager.request_floating_buffers(backlog + self.initial_credit)
            if obtained:  # mostly none: the channel holds enough for the backlog
                self.notify_buffer_available(obtained)

    def notify_buffer_available(self, n: int) -> None:
        """`n` more free buffers: credit to announce (one AddCredit for what accumulates)."""
        if n > 0 and self.gate.credit_based and not self.is_released:
            previous = self.unannounced_credit
            self.unannounced_credit += n
            if previous == 0 and self.client is not None:
                self.client.notify_credit_available(self)

    def check_invariants(self) -> None:
        """Credit is never negative (the channel's name is made only for the error)."""
        if self.unannounced_credit < 0:
            raise InvariantViolation(f"{self.name}: unannounced credit {self.unannounced_credit}")

    def get_and_reset_unannounced_credit(self) -> int:
        credit, self.unannounced_credit = self.unannounced_credit, 0
        return credit

    def on_error(self, cause: BaseException) -> None:
        self.set_error(cause)

    def on_failed_partition_request(self) -> None:
        """The producer's partition did not appear in time: retry while backoff allows (1.18+)."""
        timeout = self.gate.config.partition_request_timeout
        if timeout <= 0:
            self.set_error(PartitionNotFoundError(self.partition_id))
            return
        self._retry_backoff += timeout
        if self._retry_backoff < 2 * self.max_backoff and self.client is not None:
            self.client.request_subpartition(self)
        else:
            self.set_error(PartitionNotFoundError(self.partition_id))

    # -- called by the task --------------------------------------------------------------

    def get_next_buffer(self) -> BufferAndAvailability | None:
        if self.error is not None:
            self.check_error()
        if not self.received:
            if self.is_released:
                raise CancelTaskError("Queried for a buffer after channel has been released.")
            return None
        buffer, seq = self.received.poll()
        self.total_queue_size_in_bytes -= buffer.size
        self.num_bytes_in += buffer.size
        self.num_buffers_in += 1
        next_type = self.received[0][0].data_type if self.received else DataType.NONE
        return BufferAndAvailability(buffer, next_type, 0, seq, self.received.num_priority_elements > 0)

    def get_inflight_buffers(self, checkpoint_id: int) -> list[Buffer]:
        """The queued data buffers the barrier of `checkpoint_id` overtook (all if none came)."""
        buffers = [(b, seq) for b, seq in self.received if b.is_buffer]
        if self.last_barrier is None or self.last_barrier[0] != checkpoint_id:
            return [b for b, _ in buffers]
        barrier = self.last_barrier[1]
        return [b for b, _ in itertools.takewhile(lambda entry: sequence_number_before(entry[1], barrier), buffers)]

    def checkpoint_stopped(self, checkpoint_id: int) -> None:
        """Forget the received barrier if it is this checkpoint's: a newer one received
        meanwhile (the stop is an abort for it) keeps its place for its checkpoint."""
        super().checkpoint_stopped(checkpoint_id)
        if self.last_barrier is not None and self.last_barrier[0] == checkpoint_id:
            self.last_barrier = None

    def convert_to_priority_event(self, sequence_number: int) -> None:
        """The announced barrier at `sequence_number` jumps ahead of the queued buffers."""
        queued = itertools.islice(self.received, self.received.num_priority_elements, None)
        entry = next(((b, seq) for b, seq in queued if seq == sequence_number and not b.is_buffer), None)
        if entry is None:
            return  # polled already: the task sees the barrier next anyway
        self.received.prioritize(entry)
        entry[0].data_type = DataType.PRIORITIZED_EVENT_BUFFER
        if self.received.num_priority_elements == 1:
            self.notify_priority_event(sequence_number)

    def _check_not_released(self) -> None:
        """Flink's `checkState(!isReleased, "Channel released.")` before a message to the producer."""
        if self.is_released:
            raise IllegalStateError(f"Channel released: {self.name}.")

    def resume_consumption(self) -> None:
        self._check_not_released()
        if self.initial_credit == 0:
            self.unannounced_credit = 0
        if self.client is not None:
            self.client.resume_consumption(self)

    def acknowledge_all_records_processed(self) -> None:
        self._check_not_released()
        if self.client is not None:
            self.client.acknowledge_all_records_processed(self)

    def release_all_resources(self) -> None:
        if self.is_released:
            return
        self.is_released = True
        while self.received:
            self.received.poll()[0].recycle()
        self.buffer_manager.release_all_buffers()
        if self.client is not None:
            self.client.close_channel(self)

    def announce_buffer_size(self, size: int) -> None:
        """A NewBufferSize message to the producer (debloating; the gate asks open channels only)."""
        self._check_not_released()
        if self.client is not None:
            self.client.notify_new_buffer_size(self, size)

    # -- metrics -------------------------------------------------------------------------

    @property
    def buffers_in_use_count(self) -> int:
        """Queued buffers plus the floating ones asked for beyond the initial credit."""
        return len(self.received) + max(0, self.buffer_manager.num_required_buffers - self.initial_credit)

    @property
    def queue_length(self) -> int:
        return len(self.received)

    @property
    def queue_size(self) -> int:
        """`inputQueueSize` share: Flink's running count of received minus polled bytes,
        floored at 0 (`unsynchronizedGetSizeOfQueuedBuffers`). Each polled announcement of
        a timeoutable barrier leaves it lower by the announcement's size for good."""
        return max(0, self.total_queue_size_in_bytes)

    def exclusive_buffers_used(self) -> int:
        """`initialCredit - available exclusive` (ExclusiveBuffersUsageGauge)."""
        return max(0, self.initial_credit - self.buffer_manager.num_free_exclusive)
