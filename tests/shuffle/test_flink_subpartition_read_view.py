"""Flink's PipelinedSubpartitionWithReadViewTest and PipelinedSubpartitionTest, ported.

Each test names the Flink test whose assertions it repeats. The tests were read in copies
of apache/flink forks (1996fanrui/flink 04144f29, reswqa/flink b83d75e5); only assertions
that released 1.20's PipelinedSubpartition (lukoou3/flink-release-1.20) bears out are
ported: testResumeConsumptionNotifiesPendingPriorityEvent tests unreleased code and is not. `next_buffer` checks what Flink's assertNextBuffer/assertNextEvent
check: size, buffer or event, `isDataAvailable` (the next element is visible) and the
view's availability with credit, the backlog, `isEventAvailable` (the next visible element
is an event) and the view's availability without credit, and whether the buffer's memory
is recycled once the reader recycles it.
"""

import pytest

from shuffle.api.events import AlignmentType, CheckpointBarrier, CheckpointOptions, EndOfSuperstepEvent
from shuffle.buffer.buffer import MemorySegment
from shuffle.buffer.buffer_builder import BufferBuilder, BufferConsumer
from shuffle.buffer.data_type import DataType
from shuffle.errors import IllegalStateError
from shuffle.java_int import INT_MAX
from shuffle.partition.subpartition_view import PipelinedSubpartitionView
from shuffle.serialization.event_serializer import serialize_event
from lone_subpartition import lone_subpartition

BUFFER_SIZE = 32 * 1024  # Flink's TestBufferFactory.BUFFER_SIZE


class Listener:
    def __init__(self) -> None:
        self.notifications = 0
        self.priority_events = 0

    def notify_data_available(self) -> None:
        self.notifications += 1

    def notify_priority_event(self, sequence_number: int) -> None:
        self.priority_events += 1


class Sub:
    """A subpartition with its read view and the view's listener."""

    def __init__(self) -> None:
        self.sub = lone_subpartition()
        self.listener = Listener()
        self.view = PipelinedSubpartitionView(self.sub, self.listener)


@pytest.fixture
def s() -> Sub:
    return Sub()


def filled_finished(size: int) -> BufferConsumer:
    """Flink's createFilledFinishedBufferConsumer: a closed builder, its consumer from the start."""
    builder = BufferBuilder(MemorySegment.wrap(bytearray(size)), lambda segment: None)
    consumer = builder.create_buffer_consumer_from(0)
    builder.append(memoryview(bytes(size)))
    builder.finish()
    builder.close()
    return consumer


def filled_unfinished(size: int) -> BufferConsumer:
    """Flink's createFilledUnfinishedBufferConsumer: the builder stays open."""
    builder = BufferBuilder(MemorySegment.wrap(bytearray(BUFFER_SIZE)), lambda segment: None)
    consumer = builder.create_buffer_consumer_from(0)
    builder.append(memoryview(bytes(size)))
    return consumer


def empty_unfinished() -> tuple[BufferBuilder, BufferConsumer]:
    builder = BufferBuilder(MemorySegment.wrap(bytearray(BUFFER_SIZE)), lambda segment: None)
    return builder, builder.create_buffer_consumer()


def event(size: int, data_type: DataType) -> BufferConsumer:
    """Flink's createEventBufferConsumer: a finished consumer of `size` bytes of `data_type`."""
    return BufferConsumer.for_event(bytes(size), data_type)


def unaligned_barrier(checkpoint_id: int = 0) -> BufferConsumer:
    options = CheckpointOptions("CHECKPOINT", AlignmentType.UNALIGNED)
    return BufferConsumer.for_event(serialize_event(CheckpointBarrier(checkpoint_id, 0, options)),
                                    DataType.PRIORITIZED_EVENT_BUFFER)


def next_buffer(s: Sub, size: int, is_buffer: bool, data_available: bool, backlog: int,
                event_available: bool, recycled: bool) -> None:
    """Flink's assertNextBufferOrEvent."""
    nxt = s.view.get_next_buffer()
    assert nxt is not None
    buffer = nxt.buffer
    assert buffer.size == size
    assert buffer.is_buffer == is_buffer
    assert (nxt.next_data_type is not DataType.NONE) == data_available
    assert s.view.get_availability_and_backlog(True)[0] == data_available
    assert nxt.buffers_in_backlog == backlog
    assert nxt.next_data_type.is_event == event_available
    assert s.view.get_availability_and_backlog(False)[0] == event_available
    assert not buffer.is_recycled
    buffer.recycle()
    assert buffer.is_recycled == recycled


def no_next_buffer(s: Sub) -> None:
    assert s.view.get_next_buffer() is None


# -- PipelinedSubpartitionWithReadViewTest ------------------------------------------------

def test_add_two_non_finished_buffers(s):
    """testAddTwoNonFinishedBuffer"""
    s.sub.add(empty_unfinished()[1])
    s.sub.add(empty_unfinished()[1])
    with pytest.raises(IllegalStateError):
        s.view.get_next_buffer()


def test_add_empty_non_finished_buffer(s):
    """testAddEmptyNonFinishedBuffer"""
    builder, consumer = empty_unfinished()
    s.sub.add(consumer)
    assert s.listener.notifications == 0
    no_next_buffer(s)
    builder.finish()
    s.sub.add(empty_unfinished()[1])
    assert s.sub.get_buffers_in_backlog() == 1
    assert s.listener.notifications == 1  # from finishing the previous buffer
    no_next_buffer(s)
    assert s.sub.get_buffers_in_backlog() == 0


def test_add_non_empty_not_finished_buffer(s):
    """testAddNonEmptyNotFinishedBuffer"""
    s.sub.add(filled_unfinished(1024))
    assert s.sub.get_buffers_in_backlog() == 0
    next_buffer(s, 1024, True, False, 0, False, recycled=False)


def test_unfinished_buffer_behind_finished(s):
    """testUnfinishedBufferBehindFinished: the unfinished one is readable, though not announced."""
    s.sub.add(filled_finished(1025))
    s.sub.add(filled_unfinished(1024))
    assert s.sub.get_buffers_in_backlog() == 1
    assert s.listener.notifications > 0
    next_buffer(s, 1025, True, False, 0, False, recycled=True)
    next_buffer(s, 1024, True, False, 0, False, recycled=False)
    no_next_buffer(s)


def test_flush_with_unfinished_buffer_behind_finished(s):
    """testFlushWithUnfinishedBufferBehindFinished"""
    s.sub.add(filled_finished(1025))
    s.sub.add(filled_unfinished(1024))
    before = s.listener.notifications
    assert s.sub.get_buffers_in_backlog() == 1
    s.sub.flush()
    assert before > 0 and s.listener.notifications == before  # two queued: already notified
    assert s.sub.get_buffers_in_backlog() == 2
    next_buffer(s, 1025, True, True, 1, False, recycled=True)
    next_buffer(s, 1024, True, False, 0, False, recycled=False)
    no_next_buffer(s)


def test_flush_with_unfinished_buffer_behind_finished_2(s):
    """testFlushWithUnfinishedBufferBehindFinished2: a flush of one buffer notifies once."""
    s.sub.flush()
    assert s.listener.notifications == 0
    s.sub.add(filled_finished(1025))
    s.sub.add(filled_unfinished(1024))
    assert s.sub.get_buffers_in_backlog() == 1
    next_buffer(s, 1025, True, False, 0, False, recycled=True)
    before = s.listener.notifications
    s.sub.flush()
    assert s.listener.notifications == before + 1
    s.sub.flush()
    assert s.listener.notifications == before + 1
    assert s.sub.get_buffers_in_backlog() == 1
    next_buffer(s, 1024, True, False, 0, False, recycled=False)
    no_next_buffer(s)


def test_multiple_empty_buffers(s):
    """testMultipleEmptyBuffers: empty buffers count in the backlog but are never sent."""
    s.sub.add(filled_finished(0))
    assert s.listener.notifications == 0
    s.sub.add(filled_finished(0))
    assert s.listener.notifications == 1
    s.sub.add(filled_finished(0))
    assert s.listener.notifications == 1
    assert s.sub.get_buffers_in_backlog() == 2
    s.sub.add(filled_finished(1024))
    assert s.listener.notifications == 1
    next_buffer(s, 1024, True, False, 0, False, recycled=True)


def test_empty_flush(s):
    """testEmptyFlush"""
    s.sub.flush()
    assert s.listener.notifications == 0


def test_basic_pipelined_produce_consume_logic(s):
    """testBasicPipelinedProduceConsumeLogic"""
    assert not s.view.get_availability_and_backlog(False)[0]
    no_next_buffer(s)
    assert not s.view.get_availability_and_backlog(False)[0]
    assert s.listener.notifications == 0

    for round_ in (1, 2):
        s.sub.add(filled_finished(BUFFER_SIZE))
        assert not s.view.get_availability_and_backlog(False)[0]
        assert s.sub.total_number_of_buffers == round_
        assert s.sub.get_buffers_in_backlog() == 0
        assert s.sub.total_number_of_bytes == (round_ - 1) * BUFFER_SIZE  # counted when read
        assert s.listener.notifications == 0  # a lone finished buffer is seen only once built
        next_buffer(s, BUFFER_SIZE, True, False, 0, False, recycled=True)
        assert s.sub.total_number_of_bytes == round_ * BUFFER_SIZE
        assert s.sub.get_buffers_in_backlog() == 0
        no_next_buffer(s)

    s.sub.add(filled_finished(BUFFER_SIZE))
    assert not s.view.get_availability_and_backlog(False)[0]
    s.sub.add(event(BUFFER_SIZE, DataType.EVENT_BUFFER))
    assert not s.view.get_availability_and_backlog(False)[0]
    s.sub.add(filled_finished(BUFFER_SIZE))
    assert not s.view.get_availability_and_backlog(False)[0]
    assert s.sub.total_number_of_buffers == 5
    assert s.sub.get_buffers_in_backlog() == 1  # two buffers, the last one not counted
    assert s.sub.total_number_of_bytes == 2 * BUFFER_SIZE
    assert s.listener.notifications == 1

    next_buffer(s, BUFFER_SIZE, True, True, 0, True, recycled=True)
    assert s.sub.total_number_of_bytes == 3 * BUFFER_SIZE and s.sub.get_buffers_in_backlog() == 0
    next_buffer(s, BUFFER_SIZE, False, False, 0, False, recycled=True)
    assert s.sub.total_number_of_bytes == 4 * BUFFER_SIZE and s.sub.get_buffers_in_backlog() == 0
    next_buffer(s, BUFFER_SIZE, True, False, 0, False, recycled=True)
    assert s.sub.total_number_of_bytes == 5 * BUFFER_SIZE
    no_next_buffer(s)
    assert s.sub.get_buffers_in_backlog() == 0
    assert s.sub.total_number_of_buffers == 5 and s.listener.notifications == 1


def test_barrier_overtaking(s):
    """testBarrierOvertaking (the order and figures read; the in-flight data is
    test_channel_state's)."""
    s.sub.add(filled_finished(1))
    assert (s.listener.notifications, s.listener.priority_events) == (0, 0)
    s.sub.add(filled_finished(2))
    assert (s.listener.notifications, s.listener.priority_events) == (1, 0)
    end_of_superstep = BufferConsumer.for_event(serialize_event(EndOfSuperstepEvent()), DataType.EVENT_BUFFER)
    event_size = end_of_superstep.unread_bytes()
    s.sub.add(end_of_superstep)
    assert (s.listener.notifications, s.listener.priority_events) == (1, 0)
    s.sub.add(filled_finished(4))
    assert (s.listener.notifications, s.listener.priority_events) == (1, 0)
    barrier = unaligned_barrier()
    barrier_size = barrier.unread_bytes()
    s.sub.add(barrier)
    assert (s.listener.notifications, s.listener.priority_events) == (1, 1)

    next_buffer(s, barrier_size, False, True, 2, False, recycled=True)
    next_buffer(s, 1, True, True, 1, False, recycled=True)
    next_buffer(s, 2, True, True, 0, True, recycled=True)
    next_buffer(s, event_size, False, False, 0, False, recycled=True)
    next_buffer(s, 4, True, False, 0, False, recycled=True)
    no_next_buffer(s)


def test_availability_after_priority(s):
    """testAvailabilityAfterPriority"""
    barrier = unaligned_barrier()
    barrier_size = barrier.unread_bytes()
    s.sub.add(barrier)
    assert (s.listener.notifications, s.listener.priority_events) == (1, 1)
    s.sub.add(filled_finished(1))
    assert (s.listener.notifications, s.listener.priority_events) == (2, 1)
    s.sub.add(filled_finished(2))
    assert (s.listener.notifications, s.listener.priority_events) == (2, 1)
    next_buffer(s, barrier_size, False, True, 1, False, recycled=True)
    next_buffer(s, 1, True, False, 0, False, recycled=True)
    next_buffer(s, 2, True, False, 0, False, recycled=True)
    no_next_buffer(s)


@pytest.mark.parametrize("flush, finish", [(False, False), (True, False), (False, True)],
                         ids=["plain", "flushed", "finished"])
def test_backlog_consistent_with_number_of_consumable_buffers(s, flush, finish):
    """testBacklogConsistentWithNumberOfConsumableBuffers / ...ForFlushedPartition /
    ...ForFinishedPartition: the backlog is the number of data buffers the reader can take."""
    for i in range(1, 6):
        s.sub.add(filled_finished(1024) if i < 5 or finish else filled_unfinished(1024))
    if flush:
        s.sub.flush()
    if finish:
        s.sub.finish()
    backlog = s.sub.get_buffers_in_backlog()
    consumable = 0
    while s.view.get_availability_and_backlog(True)[0]:
        nxt = s.view.get_next_buffer()
        assert nxt is not None
        consumable += nxt.buffer.is_buffer
        nxt.buffer.recycle()
    assert backlog == consumable


def block_by_checkpoint(s: Sub) -> None:
    """Flink's blockSubpartitionByCheckpoint(1)."""
    s.sub.add(event(BUFFER_SIZE, DataType.ALIGNED_CHECKPOINT_BARRIER))
    assert s.listener.notifications == 1
    next_buffer(s, BUFFER_SIZE, False, False, 0, False, recycled=True)


def blocked_and_unavailable(s: Sub) -> None:
    """Flink's checkNumNotificationsAndAvailability(1)."""
    assert s.listener.notifications == 1
    assert not s.view.get_availability_and_backlog(True)[0]
    no_next_buffer(s)


def test_resume_blocked_subpartition_with_events(s):
    """testResumeBlockedSubpartitionWithEvents"""
    block_by_checkpoint(s)
    s.sub.add(event(BUFFER_SIZE, DataType.EVENT_BUFFER))
    blocked_and_unavailable(s)
    s.view.resume_consumption()
    assert s.view.get_availability_and_backlog(False)[0]  # without credit: the event may go
    next_buffer(s, BUFFER_SIZE, False, False, 0, False, recycled=True)


def test_resume_blocked_subpartition_with_unfinished_buffer_flushed(s):
    """testResumeBlockedSubpartitionWithUnfinishedBufferFlushed"""
    block_by_checkpoint(s)
    s.sub.add(filled_finished(BUFFER_SIZE))
    s.sub.flush()
    blocked_and_unavailable(s)
    s.view.resume_consumption()
    assert s.view.get_availability_and_backlog(True)[0]
    next_buffer(s, BUFFER_SIZE, True, False, 0, False, recycled=True)


def test_resume_blocked_subpartition_with_unfinished_buffer_not_flushed(s):
    """testResumeBlockedSubpartitionWithUnfinishedBufferNotFlushed"""
    block_by_checkpoint(s)
    s.sub.add(filled_finished(BUFFER_SIZE))
    blocked_and_unavailable(s)
    s.view.resume_consumption()
    assert not s.view.get_availability_and_backlog(True)[0]


def test_resume_blocked_subpartition_with_finished_buffers(s):
    """testResumeBlockedSubpartitionWithFinishedBuffers"""
    block_by_checkpoint(s)
    s.sub.add(filled_finished(BUFFER_SIZE))
    s.sub.add(filled_finished(BUFFER_SIZE))
    blocked_and_unavailable(s)
    s.view.resume_consumption()
    assert s.view.get_availability_and_backlog(True)[0]
    next_buffer(s, BUFFER_SIZE, True, False, 0, False, recycled=True)
    next_buffer(s, BUFFER_SIZE, True, False, 0, False, recycled=True)


def test_resume_blocked_empty_subpartition(s):
    """testResumeBlockedEmptySubpartition"""
    block_by_checkpoint(s)
    s.view.resume_consumption()
    assert not s.view.get_availability_and_backlog(True)[0]
    no_next_buffer(s)


# -- PipelinedSubpartitionTest ------------------------------------------------------------

def test_illegal_read_view_request(s):
    """testIllegalReadViewRequest"""
    with pytest.raises(RuntimeError, match="can only be consumed once"):
        PipelinedSubpartitionView(s.sub, Listener())


@pytest.mark.parametrize("with_view", [False, True])
def test_cleanup_released_partition(with_view):
    """testCleanupReleasedPartitionNoView / ...WithView"""
    sub = lone_subpartition()
    consumers = [filled_finished(4096), filled_finished(4096)]
    for consumer in consumers:
        sub.add(consumer)
    assert sub.number_of_queued_buffers == 2
    view = PipelinedSubpartitionView(sub, Listener()) if with_view else None
    sub.release()
    assert sub.number_of_queued_buffers == 0 and sub.is_released
    assert all(consumer.builder.ref.count == 0 for consumer in consumers)  # memory recycled
    assert sub.total_number_of_buffers == 2 and sub.total_number_of_bytes == 0
    if view is not None:
        assert view.is_released


def test_number_of_queued_buffers(s):
    """testNumberOfQueueBuffers"""
    s.sub.add(filled_finished(4096))
    assert s.sub.number_of_queued_buffers == 1
    s.sub.add(filled_finished(4096))
    assert s.sub.number_of_queued_buffers == 2
    s.view.get_next_buffer().buffer.recycle()
    assert s.sub.number_of_queued_buffers == 1


def test_new_buffer_size(s):
    """testNewBufferSize / testNegativeNewBufferSize / testNegativeBufferSizeAsSignOfAddingFail"""
    assert s.sub.add(filled_finished(4)) == INT_MAX
    s.view.notify_new_buffer_size(42)
    assert s.sub.add(filled_finished(4)) == 42
    with pytest.raises(ValueError):
        s.view.notify_new_buffer_size(-1)
    s.sub.finish()
    assert s.sub.add(filled_finished(4)) == -1


def test_polling_an_empty_queue_ends_a_pending_flush(s):
    """Flink's pollBuffer clears flushRequested when the queue is empty: a subpartition
    released while flushed stops looking available once its reader polls it."""
    s.sub.add(filled_unfinished(10))
    s.sub.flush()
    s.sub.release()
    assert s.view.get_availability_and_backlog(True)[0]
    no_next_buffer(s)
    assert not s.view.get_availability_and_backlog(True)[0]
