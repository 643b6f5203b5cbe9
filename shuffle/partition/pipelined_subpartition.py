"""PipelinedSubpartition: the producer-side queue of one consumer (spec 2.4).

Holds BufferConsumers (data and events, priority events at the front) and decides when
the reader is told that data is available and what backlog it announces. These rules
are what the credit loop runs on, so they follow Flink to the letter:

- the last queued element counts as finished only if it is the only one and finished,
  so a filled buffer becomes visible when something is queued behind it, on flush, or
  at the end of the partition; a lone event is visible at once;
- the backlog counts queued data buffers, minus the one still being written unless a
  flush was requested, the partition finished, or the last element is an event;
- after handing out an aligned barrier the subpartition blocks itself until
  `resume_consumption()`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shuffle.api.events import CheckpointBarrier, EndOfPartitionEvent
from shuffle.buffer.buffer import Buffer
from shuffle.buffer.buffer_builder import BufferConsumer
from shuffle.buffer.data_type import DataType
from shuffle.channel_state import ChannelStateWriter
from shuffle.errors import IllegalStateError, check
from shuffle.java_int import next_sequence_number
from shuffle.prioritized_deque import NEVER_QUEUED, PrioritizedDeque, own
from shuffle.serialization.event_serializer import deserialize_event, event_buffer_bytes

if TYPE_CHECKING:
    from shuffle.partition.result_partition import ResultPartition
    from shuffle.partition.subpartition_view import PipelinedSubpartitionView

_END_OF_PARTITION = event_buffer_bytes(EndOfPartitionEvent())


def _parse_barrier(consumer: BufferConsumer) -> CheckpointBarrier | None:
    """The checkpoint barrier a queued event consumer holds, if it holds one."""
    builder = consumer.builder
    event = deserialize_event(bytes(builder.segment.memory[:builder.position]))
    return event if isinstance(event, CheckpointBarrier) else None


@dataclass(slots=True)
class BufferAndBacklog:
    """A polled buffer with what the reader announces next (Flink's BufferAndBacklog).

    A slotted dataclass, not a NamedTuple: one Python call to make per buffer, not two,
    and every reader takes it apart by name."""

    buffer: Buffer
    buffers_in_backlog: int
    next_data_type: DataType
    sequence_number: int


class PipelinedSubpartition:
    """One subpartition of a pipelined ResultPartition.

    What is the same for all subpartitions of the partition (its id, configuration and
    channel state writer) is read through `parent`, as in Flink, not copied into each:
    a wide partition has many idle subpartitions."""

    __slots__ = ("index", "parent", "_buffers", "buffers_in_backlog", "read_view", "is_finished",
                 "is_released", "flush_requested", "is_blocked", "sequence_number", "desired_buffer_size",
                 "total_number_of_buffers", "total_number_of_bytes")

    def __init__(self, index: int, parent: ResultPartition) -> None:
        self.index = index
        self.parent = parent
        # (consumer, partial_record_length); priority elements first.
        self._buffers: PrioritizedDeque[tuple[BufferConsumer, int]] = NEVER_QUEUED
        self.buffers_in_backlog = 0
        self.read_view: PipelinedSubpartitionView | None = None
        self.is_finished = False
        self.is_released = False
        self.flush_requested = False
        self.is_blocked = False
        self.sequence_number = 0
        self.desired_buffer_size = parent.config.starting_buffer_size  # set by the consumer's debloater
        self.total_number_of_buffers = 0  # buffers and events added
        self.total_number_of_bytes = 0  # bytes handed to the reader

    @property
    def parent_name(self) -> str:
        """The id of the partition this subpartition belongs to."""
        return self.parent.partition_id

    @property
    def channel_state_writer(self) -> ChannelStateWriter | None:
        """Where the in-flight data an unaligned barrier overtakes goes (the task's writer)."""
        return self.parent.channel_state_writer

    # -- derived state -----------------------------------------------------------------

    def _number_of_finished_buffers(self) -> int:
        size = len(self._buffers)
        if size > 1:
            return size - 1
        return 1 if size == 1 and self._buffers[0][0].is_finished else 0

    def get_buffers_in_backlog(self) -> int:
        if self.is_blocked or self.buffers_in_backlog == 0:
            return 0
        if self.flush_requested or self.is_finished or not self._buffers[-1][0].data_type.is_buffer:
            return self.buffers_in_backlog
        return self.buffers_in_backlog - 1

    def is_data_available(self) -> bool:
        return not self.is_blocked and (self.flush_requested or self._number_of_finished_buffers() > 0)

    def next_buffer_type(self) -> DataType:
        return self._buffers[0][0].data_type if self._buffers else DataType.NONE

    def get_availability_and_backlog(self, credit_available: bool) -> tuple[bool, int]:
        if credit_available:
            available = self.is_data_available()
        else:
            # As Flink: the head's type alone, blocked or not (a blocked poll returns nothing).
            available = self.next_buffer_type().is_event
        return available, self.get_buffers_in_backlog()

    # -- producing -----------------------------------------------------------------------

    def add(self, consumer: BufferConsumer, partial_record_length: int = 0, finish: bool = False) -> int:
        """Queue a buffer or event; returns the desired buffer size (-1 if finished)."""
        if self.is_finished or self.is_released:
            consumer.close()
            return -1
        view = self.read_view
        notify_priority = False
        self._buffers = buffers = own(self._buffers)
        data_type = consumer.data_type
        if data_type.has_priority:
            buffers.add_priority_element((consumer, partial_record_length))
            notify_priority = buffers.num_priority_elements == 1 and not self.is_blocked
            barrier = _parse_barrier(consumer)
            if barrier is not None:
                self._persist_overtaken(barrier.id, len(buffers))
        else:
            buffers.add((consumer, partial_record_length))
            if data_type is DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER:
                self._expect_output(consumer)
        self.total_number_of_buffers += 1
        if data_type.is_buffer:
            self.buffers_in_backlog += 1
        # As Flink: a priority add still runs the data-available check.
        notify_data = finish or (view is not None and not self.flush_requested and not self.is_blocked
                                 and self._number_of_finished_buffers() == 1)
        if view is not None:
            if notify_priority:
                view.notify_priority_event(self.sequence_number)
            if notify_data:
                view.notify_data_available()
        return self.desired_buffer_size

    def flush(self) -> None:
        buffers = self._buffers
        if not buffers or self.flush_requested:
            return
        if len(buffers) > 1:
            self.flush_requested = True  # as Flink: no notification for more than one element
            return
        # One element: a flush makes its unread bytes visible (and is told) if it has any.
        self.flush_requested = buffers[0][0].is_data_available()
        if self.flush_requested and not self.is_blocked and self.read_view is not None:
            self.read_view.notify_data_available()

    def finish(self) -> None:
        """Queue EndOfPartition (always visible) and refuse further buffers."""
        self.add(BufferConsumer.for_event(_END_OF_PARTITION, DataType.EVENT_BUFFER), finish=True)
        self.is_finished = True

    # -- consuming -----------------------------------------------------------------------

    def poll_buffer(self) -> BufferAndBacklog | None:
        if self.is_blocked:
            return None
        buffers = self._buffers
        buffer = None
        if not buffers:
            self.flush_requested = False  # nothing left to flush (e.g. released while flushed)
        while buffers:
            consumer, _ = buffers[0]
            buffer = consumer.build()
            only_one = len(buffers) == 1
            if only_one:
                self.flush_requested = False
            finished = consumer.is_finished
            if not finished and not only_one:
                buffer.recycle()
                raise IllegalStateError("When there are multiple buffers, an unfinished bufferConsumer can not be "
                                        "at the head of the buffers queue.")
            if finished:
                buffers.poll()
                consumer.close()
                if consumer.data_type.is_buffer:
                    self.buffers_in_backlog -= 1
            if self.parent.config.exclusive_buffers_per_channel == 0 and finished:  # the receiver's
                break
            if buffer.size > 0:
                break
            buffer.recycle()
            buffer = None
            if not finished:
                break
        if buffer is None:
            return None
        if buffer.data_type.is_blocking_upstream:
            self.is_blocked = True
            if buffer.data_type is DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER:
                self._barrier_sent(buffer)
        next_type = self.next_buffer_type() if self.is_data_available() else DataType.NONE
        seq = self.sequence_number
        self.sequence_number = next_sequence_number(seq)
        self.total_number_of_bytes += buffer.size
        return BufferAndBacklog(buffer, self.get_buffers_in_backlog(), next_type, seq)

    def _overtaken(self, end: int) -> list[bytes]:
        """Copies of the data buffers queued after the priority elements, up to position `end`."""
        overtaken = itertools.islice(self._buffers, self._buffers.num_priority_elements, end)
        return [bytes(consumer.builder.segment.memory[consumer.read_position:consumer.builder.position])
                for consumer, _ in overtaken if consumer.is_buffer]

    def _persist_overtaken(self, checkpoint_id: int, end: int) -> None:
        """The data buffers a priority barrier overtook are in-flight data of its checkpoint."""
        if self.channel_state_writer is not None:
            self.channel_state_writer.add_output_data(checkpoint_id, (self.parent_name, self.index),
                                                      self._overtaken(end))

    def _expect_output(self, consumer: BufferConsumer) -> None:
        """A timeoutable barrier's output data is known once it is sent or times out."""
        barrier = _parse_barrier(consumer)
        if self.channel_state_writer is not None and barrier is not None:
            self.channel_state_writer.expect_output(barrier.id, (self.parent_name, self.index))

    def _barrier_sent(self, buffer: Buffer) -> None:
        """The timeoutable barrier left in time: its checkpoint has no output data here."""
        barrier = deserialize_event(bytes(buffer.memory()))
        if self.channel_state_writer is not None and isinstance(barrier, CheckpointBarrier):
            self.channel_state_writer.complete_output(barrier.id, (self.parent_name, self.index), [])

    def aligned_barrier_timeout(self, checkpoint_id: int) -> None:
        """The aligned barrier of `checkpoint_id` waited too long: if it is still queued, it
        overtakes the data ahead of it as an unaligned barrier, which is persisted."""
        position = next((i for i, (consumer, _) in enumerate(self._buffers)
                         if consumer.data_type is DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER
                         and (barrier := _parse_barrier(consumer)) is not None and barrier.id == checkpoint_id),
                        None)
        if position is None:
            return
        entry = self._buffers[position]
        if self.channel_state_writer is not None:
            self.channel_state_writer.complete_output(checkpoint_id, (self.parent_name, self.index),
                                                      self._overtaken(position))
        self._buffers.remove(entry)
        entry[0].close()
        self.total_number_of_buffers -= 1
        unaligned = BufferConsumer.for_event(event_buffer_bytes(barrier.as_unaligned()),
                                             DataType.PRIORITIZED_EVENT_BUFFER)
        self._buffers.add_priority_element((unaligned, 0))
        self.total_number_of_buffers += 1
        if self._buffers.num_priority_elements == 1 and not self.is_blocked and self.read_view is not None:
            self.read_view.notify_priority_event(self.sequence_number)

    def resume_consumption(self) -> None:
        """Unblock after an aligned barrier went out; as Flink's checkState, resuming a
        subpartition no barrier blocked is an error (a consumer out of step)."""
        if not self.is_blocked:
            raise IllegalStateError("Should be blocked by checkpoint.")
        self.is_blocked = False
        if self.read_view is not None and self.is_data_available():
            self.read_view.notify_data_available()

    def set_desired_buffer_size(self, size: int) -> None:
        if size <= 0:
            raise ValueError(f"buffer size must be positive, got {size}")
        self.desired_buffer_size = size

    def release(self) -> None:
        """Recycle everything queued. The reader is not told (as in Flink): its view now
        reports itself released, which a reader finds when it next polls."""
        if self.is_released:
            return
        self.is_released = True
        while self._buffers:
            consumer, _ = self._buffers.poll()
            if consumer.data_type is DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER:
                barrier = _parse_barrier(consumer)
                if barrier is not None and self.channel_state_writer is not None:
                    self.channel_state_writer.complete_output(barrier.id, (self.parent_name, self.index), [])
            consumer.close()
        self.buffers_in_backlog = 0

    def check_invariants(self) -> None:
        """The backlog counts the queued data buffers."""
        data_buffers = sum(1 for consumer, _ in self._buffers if consumer.is_buffer)
        check(self.buffers_in_backlog == data_buffers,
              f"{self!r}: backlog {self.buffers_in_backlog} != {data_buffers} queued data buffers")

    # -- statistics ----------------------------------------------------------------------

    @property
    def number_of_queued_buffers(self) -> int:
        """`outputQueueLength` contribution: queued buffers and events."""
        return len(self._buffers)

    def queued_data_types(self) -> list[DataType]:
        """What is queued, head first (priority events lead): the credit-flow harness shows
        it to tests."""
        return [consumer.data_type for consumer, _ in self._buffers]

    @property
    def queued_bytes(self) -> int:
        """`outputQueueSize` contribution: bytes written and not yet handed to the reader."""
        return sum([consumer.unread_bytes() for consumer, _ in self._buffers])

    def __repr__(self) -> str:
        return (f"PipelinedSubpartition({self.parent_name}#{self.index}, queued={len(self._buffers)}, "
                f"backlog={self.buffers_in_backlog}, blocked={self.is_blocked})")
