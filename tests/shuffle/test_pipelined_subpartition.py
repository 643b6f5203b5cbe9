"""Notification, visibility and backlog rules of PipelinedSubpartition (spec 2.4)."""

import pytest

from shuffle.api.events import CheckpointBarrier, CheckpointOptions, AlignmentType
from shuffle.buffer.buffer_builder import BufferBuilder, BufferConsumer
from shuffle.buffer.buffer import MemorySegment
from shuffle.buffer.data_type import DataType
from shuffle.errors import IllegalStateError
from shuffle.java_int import INT_MAX, INT_MIN
from shuffle.partition.subpartition_view import PipelinedSubpartitionView
from shuffle.serialization.event_serializer import serialize_event
from lone_subpartition import lone_subpartition


class Listener:
    def __init__(self):
        self.data = 0
        self.priority = []

    def notify_data_available(self):
        self.data += 1

    def notify_priority_event(self, seq):
        self.priority.append(seq)


def builder(size=32):
    return BufferBuilder(MemorySegment.wrap(bytearray(size)), lambda s: None)


def setup():
    sub = lone_subpartition()
    listener = Listener()
    view = PipelinedSubpartitionView(sub, listener)
    return sub, listener, view


def barrier(alignment=AlignmentType.ALIGNED):
    return CheckpointBarrier(1, 0, CheckpointOptions("CHECKPOINT", alignment))


def test_full_buffer_is_visible_only_when_something_follows():
    sub, listener, _ = setup()
    b1 = builder()
    sub.add(b1.create_buffer_consumer_from(0))
    b1.append(memoryview(b"x" * 32))
    b1.finish()
    assert listener.data == 0 and not sub.is_data_available()
    assert sub.get_buffers_in_backlog() == 0
    sub.add(builder().create_buffer_consumer_from(0))
    assert listener.data == 1 and sub.is_data_available()
    assert sub.get_buffers_in_backlog() == 1  # the buffer being written is not counted


def test_flush_makes_partial_buffer_visible_and_counts_it():
    sub, listener, view = setup()
    b = builder()
    sub.add(b.create_buffer_consumer_from(0))
    b.append(memoryview(b"abc"))
    sub.flush()
    assert listener.data == 1 and sub.flush_requested
    assert sub.get_buffers_in_backlog() == 1
    nxt = view.get_next_buffer()
    assert bytes(nxt.buffer.memory()) == b"abc" and not sub.flush_requested
    assert nxt.buffers_in_backlog == 0 and nxt.next_data_type == DataType.NONE
    # Later bytes of the same segment leave as a second slice.
    b.append(memoryview(b"de"))
    sub.flush()
    assert bytes(view.get_next_buffer().buffer.memory()) == b"de"


def test_flush_of_empty_or_fully_read_queue_does_nothing():
    sub, listener, view = setup()
    sub.flush()
    assert listener.data == 0 and not sub.flush_requested
    b = builder()
    sub.add(b.create_buffer_consumer_from(0))
    sub.flush()  # nothing written yet
    assert listener.data == 0 and not sub.flush_requested


def test_lone_event_is_visible_at_once_and_backlog_counts_all_data_before_it():
    sub, listener, view = setup()
    b = builder()
    sub.add(b.create_buffer_consumer_from(0))
    b.append(memoryview(b"x" * 10))
    b.finish()
    sub.add(BufferConsumer.for_event(serialize_event(barrier()), DataType.ALIGNED_CHECKPOINT_BARRIER))
    assert sub.get_buffers_in_backlog() == 1  # last element is an event
    first = view.get_next_buffer()
    assert first.buffer.data_type == DataType.DATA_BUFFER
    assert first.next_data_type == DataType.ALIGNED_CHECKPOINT_BARRIER


def test_aligned_barrier_blocks_until_resumed():
    sub, listener, view = setup()
    sub.add(BufferConsumer.for_event(serialize_event(barrier()), DataType.ALIGNED_CHECKPOINT_BARRIER))
    b = builder()
    sub.add(b.create_buffer_consumer_from(0))
    b.append(memoryview(b"y" * 32))
    b.finish()
    sub.add(builder().create_buffer_consumer_from(0))
    assert view.get_next_buffer().buffer.data_type == DataType.ALIGNED_CHECKPOINT_BARRIER
    assert sub.is_blocked and view.get_next_buffer() is None
    assert sub.get_buffers_in_backlog() == 0 and not sub.is_data_available()
    before = listener.data
    view.resume_consumption()
    assert listener.data == before + 1
    assert view.get_next_buffer().buffer.size == 32


def test_priority_event_jumps_the_queue_and_notifies():
    sub, listener, view = setup()
    for _ in range(2):
        b = builder()
        sub.add(b.create_buffer_consumer_from(0))
        b.append(memoryview(b"z" * 32))
        b.finish()
    unaligned = barrier(AlignmentType.UNALIGNED)
    sub.add(BufferConsumer.for_event(serialize_event(unaligned), DataType.PRIORITIZED_EVENT_BUFFER))
    assert listener.priority
    assert view.get_next_buffer().buffer.data_type == DataType.PRIORITIZED_EVENT_BUFFER


def test_sequence_numbers_and_finish():
    sub, listener, view = setup()
    b = builder()
    sub.add(b.create_buffer_consumer_from(0))
    b.append(memoryview(b"q" * 5))
    b.finish()  # ResultPartition.finish() finishes open builders first
    sub.finish()
    assert sub.get_buffers_in_backlog() == 1  # finished: all data counts
    seqs = []
    while (n := view.get_next_buffer()) is not None:
        seqs.append((n.sequence_number, n.buffer.data_type))
    assert seqs == [(0, DataType.DATA_BUFFER), (1, DataType.EVENT_BUFFER)]
    assert sub.add(builder().create_buffer_consumer_from(0)) == -1



def finished_consumer(nbytes):
    b = builder(nbytes)
    consumer = b.create_buffer_consumer_from(0)
    b.append(memoryview(b"x" * nbytes))
    b.finish()
    return consumer


def test_a_priority_add_still_notifies_data_availability_as_flink_does():
    sub, listener, _ = setup()
    sub.add(finished_consumer(32))  # its consumer has not seen "finished" yet: not visible
    assert listener.data == 0
    sub.add(BufferConsumer.for_event(serialize_event(barrier(AlignmentType.UNALIGNED)),
                                     DataType.PRIORITIZED_EVENT_BUFFER))
    assert listener.priority == [0]  # Flink passes the current sequence number
    assert listener.data == 1  # two elements now: the data-available check fires on a priority add too


def test_polling_behind_two_unfinished_buffers_is_an_illegal_state():
    sub, _, _ = setup()
    for _ in range(2):
        b = builder()
        sub.add(b.create_buffer_consumer_from(0))
        b.append(memoryview(b"y" * 8))
    with pytest.raises(IllegalStateError, match="unfinished bufferConsumer"):
        sub.poll_buffer()


def test_sequence_numbers_wrap_as_java_ints_and_totals_are_counted():
    sub, _, _ = setup()
    sub.sequence_number = INT_MAX
    sub.add(finished_consumer(32))
    sub.add(finished_consumer(16))
    assert [sub.poll_buffer().sequence_number for _ in range(2)] == [INT_MAX, INT_MIN]
    assert sub.total_number_of_buffers == 2 and sub.total_number_of_bytes == 48


def test_resuming_a_subpartition_no_barrier_blocked_is_an_illegal_state():
    """Flink 2.3's PipelinedSubpartition.resumeConsumption: checkState(isBlocked, "Should be
    blocked by checkpoint."); it was silently accepted here."""
    sub, _, view = setup()
    with pytest.raises(IllegalStateError, match=r"^Should be blocked by checkpoint\.$"):
        view.resume_consumption()
