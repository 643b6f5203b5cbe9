"""Flink's PartitionRequestQueueTest and CreditBasedSequenceNumberingViewReaderTest, ported.

Each test names the Flink test whose assertions it repeats (read in snuyanzin/flink
8a46c4ee and apache/flink 0e8b9808; the code they test is as in released 1.20's
PartitionRequestQueue and CreditBasedSequenceNumberingViewReader, lukoou3/flink-release-1.20). The
connection is a stub whose writer never runs, which is Flink's blocked EmbeddedChannel:
readers and messages wait; `drain` is Flink's `channel.flush()` (the channel writable
again), writing until nothing is left.
"""

from shuffle.buffer.buffer import Buffer, MemorySegment
from shuffle.buffer.buffer_builder import BufferConsumer
from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig
from shuffle.java_int import INT_MAX
from shuffle.errors import CancelTaskError, ProducerFailedError, error_from_wire
from shuffle.netty.messages import BacklogAnnouncement, BufferResponse, ErrorResponse
from shuffle.netty.partition_request_queue import PartitionRequestQueue
from shuffle.netty.view_reader import CreditBasedSequenceNumberingViewReader
from shuffle.partition.pipelined_subpartition import BufferAndBacklog
from shuffle.partition.subpartition_view import PipelinedSubpartitionView
from shuffle.trace import NULL_TRACER

from blocked_connection import BlockedConnection
from lone_subpartition import lone_subpartition


class _NoOpView:
    """Flink's NoOpResultSubpartitionView: nothing to read."""

    is_released = False

    def get_next_buffer(self):
        return None

    def get_availability_and_backlog(self, credit_available: bool) -> tuple[bool, int]:
        return False, 0

    def resume_consumption(self) -> None:
        pass

    def release_all_resources(self) -> None:
        self.is_released = True


class _AlwaysAvailableView(_NoOpView):
    """Flink's EmptyAlwaysAvailableResultSubpartitionView / NextIsEventResultSubpartitionView."""

    def get_availability_and_backlog(self, credit_available: bool) -> tuple[bool, int]:
        return True, 0


class _ReleasedView(_AlwaysAvailableView):
    """Flink's ReleasedResultSubpartitionView: released, with a failure cause."""

    is_released = True
    failure_cause = RuntimeError("Expected test exception")


class _DefaultBufferView(_NoOpView):
    """Flink's DefaultBufferResultSubpartitionView: `buffers` buffers of 10 bytes."""

    def __init__(self, buffers: int) -> None:
        self.buffers = buffers

    def get_next_buffer(self) -> BufferAndBacklog:
        self.buffers -= 1
        buffer = Buffer.of_segment(MemorySegment.wrap(bytearray(10)), lambda segment: None, size=10)
        return BufferAndBacklog(buffer, self.buffers,
                                DataType.DATA_BUFFER if self.buffers > 0 else DataType.NONE, 0)

    def get_availability_and_backlog(self, credit_available: bool) -> tuple[bool, int]:
        return credit_available and self.buffers > 0, self.buffers


class _Provider:
    def __init__(self, view) -> None:
        self.view = view

    def create_subpartition_view(self, partition_id, index, listener):
        return self.view


class _Listener:
    def notify_data_available(self) -> None:
        pass

    def notify_priority_event(self, sequence_number: int) -> None:
        pass


def make_reader(queue: PartitionRequestQueue, view, credit: int, receiver_id: int = 7):
    reader = CreditBasedSequenceNumberingViewReader(receiver_id, credit, queue)
    reader.request_subpartition_view(_Provider(view), "p")
    return reader


def subpartition_reader(credit: int, *data_types: DataType):
    """A subpartition holding one element per data type, read through a registered reader."""
    sub = lone_subpartition()
    for data_type in data_types:
        sub.add(data_event(data_type))
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader = make_reader(queue, PipelinedSubpartitionView(sub, _Listener()), credit)
    queue.notify_reader_created(reader)
    return sub, queue, reader


def drain(queue: PartitionRequestQueue) -> list:
    written = []
    while (msg := queue._next_sealed()) is not None:
        written.append(msg)
    return written


def data_event(data_type: DataType) -> BufferConsumer:
    """Flink's createEventBufferConsumer(4096, data_type)."""
    return BufferConsumer.for_event(bytes(4096), data_type)


def test_notify_reader_non_empty_on_empty_readers():
    """testNotifyReaderNonEmptyOnEmptyReaders: an empty reader ahead does not stop the next."""
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader1 = make_reader(queue, _AlwaysAvailableView(), 10, "r1")
    assert reader1.get_availability_and_backlog()[0] and not reader1.is_registered_as_available
    reader1.notify_data_available()
    reader2 = CreditBasedSequenceNumberingViewReader("r2", 10, queue)
    reader2.notify_data_available()  # before its view exists: ignored
    reader2.request_subpartition_view(_Provider(_DefaultBufferView(5)), "p")
    assert reader2.get_availability_and_backlog()[0] and not reader2.is_registered_as_available
    reader2.notify_data_available()
    written = drain(queue)
    assert len(written) == 5 and all(type(msg) is BufferResponse for msg in written)


def test_default_buffer_writing():
    """testDefaultBufferWriting"""
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader = make_reader(queue, _DefaultBufferView(1), INT_MAX)
    reader.notify_data_available()
    assert [type(msg) for msg in drain(queue)] == [BufferResponse]


def test_enqueue_reader_by_notifying_event_buffer():
    """testEnqueueReaderByNotifyingEventBuffer: enqueued without credit as the next is an event."""
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader = make_reader(queue, _AlwaysAvailableView(), 0)
    reader.notify_data_available()
    assert list(queue.available_readers) == [reader] and reader.num_credits_available == 0
    assert drain(queue) == []
    assert not queue.available_readers and reader.num_credits_available == 0


def test_enqueue_reader_by_notifying_buffer_and_credit():
    """testEnqueueReaderByNotifyingBufferAndCredit: enqueued only with both credit and buffers."""
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    view = _DefaultBufferView(10)
    reader = CreditBasedSequenceNumberingViewReader(7, 2, queue)
    reader.add_credit(-2)
    reader.request_subpartition_view(_Provider(view), "p")
    queue.notify_reader_created(reader)
    for _ in range(5):
        reader.notify_data_available()
    assert not queue.available_readers and not reader.is_registered_as_available
    assert view.get_availability_and_backlog(True)[0] and reader.num_credits_available == 0
    assert queue.queued_control_messages == 0  # initial credit 2: no backlog announcement
    for credit in (1, 2, 3):
        queue.add_credit_or_resume_consumption(7, lambda r: r.add_credit(1))
        assert reader.is_registered_as_available and list(queue.available_readers) == [reader]
        assert reader.num_credits_available == credit
    written = drain(queue)
    assert [type(msg) for msg in written] == [BufferResponse] * 3
    assert not queue.available_readers and not reader.is_registered_as_available
    assert reader.num_credits_available == 0 and view.get_availability_and_backlog(True)[0]


def test_enqueue_reader_by_resuming_consumption():
    """testEnqueueReaderByResumingConsumption"""
    sub, queue, reader = subpartition_reader(2, DataType.ALIGNED_CHECKPOINT_BARRIER, DataType.DATA_BUFFER)
    assert reader.get_availability_and_backlog()[0]
    reader.notify_data_available()
    first = drain(queue)
    assert not reader.get_availability_and_backlog()[0] and sub.number_of_queued_buffers == 1
    queue.add_credit_or_resume_consumption(7, lambda r: r.resume_consumption())
    second = drain(queue)
    assert not reader.get_availability_and_backlog()[0] and sub.number_of_queued_buffers == 0
    assert [msg.data_type for msg in first + second] == [DataType.ALIGNED_CHECKPOINT_BARRIER,
                                                          DataType.DATA_BUFFER]


def test_announce_backlog():
    """testAnnounceBacklog: a reader without credit and without exclusive buffers announces
    the subpartition's backlog."""
    sub, queue, reader = subpartition_reader(0, DataType.DATA_BUFFER, DataType.DATA_BUFFER)
    reader.notify_data_available()
    (announcement,) = drain(queue)
    assert announcement == BacklogAnnouncement(sub.get_buffers_in_backlog(), 7)
    assert announcement.backlog == 1  # the last buffer is not counted (no flush, not finished)


def test_cancel_partition_request():
    """testCancelPartitionRequestForUnavailableView / ...ForAvailableView"""
    for available in (False, True):
        queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
        view = _DefaultBufferView(1)
        reader = make_reader(queue, view, 0)
        queue.notify_reader_created(reader)
        if available:
            queue.add_credit_or_resume_consumption(7, lambda r: r.add_credit(1))
            assert reader in queue.available_readers
        queue.cancel(7)
        assert reader not in queue.available_readers and 7 not in queue.all_readers
        assert reader.is_released and view.is_released


def test_notify_new_buffer_size():
    """testNotifyNewBufferSize (the subpartition side): the announced size is what the next
    buffer is requested with (trimming is test_credit_loop's
    test_a_new_buffer_is_trimmed_to_the_announced_size_but_holds_the_rest_of_the_record)."""
    sub, queue, _ = subpartition_reader(2)
    queue.notify_new_buffer_size(7, 65)
    assert sub.desired_buffer_size == 65
    queue.notify_new_buffer_size("unknown", 10)  # before the reader exists: ignored
    assert sub.desired_buffer_size == 65


# -- CreditBasedSequenceNumberingViewReaderTest --------------------------------------------

def test_resume_consumption_keeps_or_resets_credit():
    """testResumeConsumption: credit is kept unless there are no exclusive buffers."""
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader1 = make_reader(queue, _NoOpView(), 2, "r1")
    reader1.resume_consumption()
    assert reader1.num_credits_available == 2
    reader1.add_credit(2)
    reader1.resume_consumption()
    assert reader1.num_credits_available == 4
    reader2 = make_reader(queue, _NoOpView(), 0, "r2")
    reader2.add_credit(2)
    assert reader2.num_credits_available == 2
    reader2.resume_consumption()
    assert reader2.num_credits_available == 0


def test_need_announce_backlog():
    """testNeedAnnounceBacklog"""
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader1 = make_reader(queue, _NoOpView(), 2, "r1")
    assert not reader1.need_announce_backlog()
    reader1.add_credit(-2)
    assert not reader1.need_announce_backlog()
    reader2 = make_reader(queue, _NoOpView(), 0, "r2")
    assert reader2.need_announce_backlog()
    reader2.add_credit(2)
    assert not reader2.need_announce_backlog()
    reader2.add_credit(-2)
    assert reader2.need_announce_backlog()


async def test_notify_new_buffer_size_shapes_the_buffers_sent(credit_flow):
    """testNotifyNewBufferSize: after a new size of 65, records of 128, 10 and 60 bytes leave
    as a buffer of 128 (no less than its first record) and one of 65."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    partition, subpartition = h.targets[0]
    partition.subpartitions[subpartition].read_view.notify_new_buffer_size(65)
    for size in (128, 10, 60):
        await h.emit(0, size)
    h.flush(0)
    await h.settle()
    assert [event["bytes"] for event in h.buffers_sent(0)][:2] == [128, 65]


def test_without_credit_an_event_at_the_head_counts_as_available_even_while_blocked():
    """Flink's getAvailabilityAndBacklog(false) looks at the head's type only: after an
    aligned barrier, a finishing subpartition's EndOfPartition makes a reader without credit
    available; it is enqueued, and polling it writes nothing until consumption resumes."""
    sub = lone_subpartition()
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader = CreditBasedSequenceNumberingViewReader(7, 0, queue)
    reader.view = PipelinedSubpartitionView(sub, reader)
    queue.notify_reader_created(reader)
    sub.add(data_event(DataType.ALIGNED_CHECKPOINT_BARRIER))
    assert [msg.data_type for msg in drain(queue)] == [DataType.ALIGNED_CHECKPOINT_BARRIER]
    sub.finish()  # notifies even while blocked
    assert reader.get_availability_and_backlog() == (True, 0)
    assert list(queue.available_readers) == [reader]
    assert drain(queue) == [] and not queue.available_readers
    queue.add_credit_or_resume_consumption(7, lambda r: r.resume_consumption())
    assert [msg.data_type for msg in drain(queue)] == [DataType.EVENT_BUFFER]


def test_producer_failed_exception():
    """testProducerFailedException: a released view with a failure cause is answered with an
    ErrorResponse whose error is a CancelTaskException (ProducerFailedException)."""
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader = make_reader(queue, _ReleasedView(), 2)
    queue.notify_reader_created(reader)
    reader.notify_data_available()
    (msg,) = drain(queue)
    assert type(msg) is ErrorResponse and msg.receiver_id == 7 and not msg.is_fatal_error
    error = error_from_wire(msg.error_class, msg.message)
    assert isinstance(error, ProducerFailedError) and isinstance(error, CancelTaskError)
    assert str(error) == "RuntimeError: Expected test exception"
    # as Flink: the reader stays until the consumer cancels its request; nothing more is sent
    assert queue.all_readers == {7: reader} and not queue.available_readers
    assert drain(queue) == []


def test_a_partition_released_by_its_failed_producer_answers_a_queued_reader_with_the_cause():
    """The reader of a subpartition with data waits in the queue while the connection is busy;
    its producer fails (the partition released with the cause): when its turn comes there is
    nothing to send, and the channel gets ProducerFailedError. Released without a cause (the
    producer was cancelled), the reader is skipped silently."""
    for cause in (RuntimeError("producer broke"), None):
        sub, queue, reader = subpartition_reader(2, DataType.DATA_BUFFER, DataType.DATA_BUFFER)
        reader.notify_data_available()
        assert list(queue.available_readers) == [reader]
        sub.parent.release(cause)
        written = drain(queue)
        if cause is None:
            assert written == []
        else:
            assert written == [ErrorResponse("ProducerFailedError", "RuntimeError: producer broke", 7)]
        assert reader.is_released and 7 in queue.all_readers


def test_a_released_subpartition_with_a_flush_pending_becomes_available_on_credit():
    """A reader without credit is not queued and not told of the release (as Flink's
    PipelinedSubpartition.release); credit the consumer announces later finds the flush
    requested before the release, and the poll that finds nothing sends the error."""
    sub, queue, reader = subpartition_reader(0, DataType.DATA_BUFFER, DataType.DATA_BUFFER)
    sub.flush()
    drain(queue)  # the backlog announcement
    assert not queue.available_readers
    sub.parent.release(RuntimeError("producer broke"))
    assert drain(queue) == []
    queue.add_credit_or_resume_consumption(7, lambda r: r.add_credit(2))
    assert [type(msg) for msg in drain(queue)] == [ErrorResponse]
