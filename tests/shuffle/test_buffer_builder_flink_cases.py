"""BufferBuilder, BufferConsumer and the buffers they build against the cases of Flink's
BufferBuilderAndConsumerTest and ReadOnlySlicedBufferTest (behaviour ported; each test
names its Flink case). As there, a builder over an unpooled segment of ten 4-byte ints."""

import struct

from shuffle.buffer.buffer import MemorySegment
from shuffle.buffer.buffer_builder import BufferBuilder, BufferConsumer
from shuffle.buffer.data_type import DataType

INTS = 10
SIZE = INTS * 4


class CountingRecycler:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, segment: MemorySegment) -> None:
        self.calls += 1


def ints(*values: int) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


def builder(recycler=None) -> BufferBuilder:
    return BufferBuilder(MemorySegment(SIZE), recycler or CountingRecycler())


def content(consumer: BufferConsumer) -> tuple[int, ...]:
    """The next slice's ints, its buffer recycled (Flink's assertContent)."""
    assert not consumer.is_finished
    buffer = consumer.build()
    assert not buffer.is_recycled
    data = bytes(buffer.memory())
    buffer.recycle()
    return struct.unpack(f">{len(data) // 4}i", data)


def test_a_built_buffer_keeps_the_segment_until_its_consumer_is_closed():
    # Flink: BufferBuilderAndConsumerTest.referenceCounting
    recycler = CountingRecycler()
    b = builder(recycler)
    consumer = b.create_buffer_consumer()
    assert b.append(ints(1, 2, 3)) == 12
    b.close()
    buffer = consumer.build()
    assert not buffer.is_recycled
    buffer.recycle()
    assert not buffer.is_recycled and recycler.calls == 0
    consumer.close()
    assert buffer.is_recycled and recycler.calls == 1


def test_appends_are_read_in_one_slice():
    # Flink: BufferBuilderAndConsumerTest.append and multipleAppends
    b = builder()
    consumer = b.create_buffer_consumer()
    assert b.append(ints(0, 1, 2, 3, 42)) == 20
    assert not b.is_full()
    assert content(consumer) == (0, 1, 2, 3, 42)
    for values in ((0, 1), (2,), (3, 42)):
        b.append(ints(*values))
    assert content(consumer) == (0, 1, 2, 3, 42)


def test_an_append_beyond_the_capacity_takes_what_fits():
    # Flink: BufferBuilderAndConsumerTest.appendOverSize
    data = ints(*range(10), 42)
    b = builder()
    consumer = b.create_buffer_consumer()
    assert b.append(data) == SIZE
    assert b.is_full() and content(consumer) == tuple(range(10))
    b = builder()
    consumer = b.create_buffer_consumer()
    assert b.append(data, SIZE) == 4
    assert not b.is_full() and content(consumer) == (42,)


def test_a_copy_reads_from_where_its_original_is():
    # Flink: BufferBuilderAndConsumerTest.copy
    b = builder()
    first = b.create_buffer_consumer()
    b.append(ints(0, 1))
    second = first.copy()
    b.append(ints(2))
    assert content(first) == (0, 1, 2) and content(second) == (0, 1, 2)
    third = first.copy()
    b.append(ints(3, 42))
    fourth = first.copy()
    for consumer in (first, second, third, fourth):
        assert content(consumer) == (3, 42)


def test_a_copy_sees_the_writer_finished_since_its_original_last_built():
    # Flink 2.3's BufferConsumer.copy makes a new cached position marker, which reads the
    # writer's position (and so its finished flag) at once: the original's cache is not copied.
    b = builder()
    original = b.create_buffer_consumer()
    b.append(ints(7))
    b.finish()
    assert not original.is_finished
    copy = original.copy()
    assert copy.is_finished and not original.is_finished


def test_an_empty_builder_builds_an_empty_buffer():
    # Flink: BufferBuilderAndConsumerTest.buildEmptyBuffer
    b = builder()
    consumer = b.create_buffer_consumer()
    assert content(consumer) == ()
    consumer.close()
    b.close()


def test_each_build_returns_what_was_written_since_the_last():
    # Flink: BufferBuilderAndConsumerTest.buildingBufferMultipleTimes
    b = builder()
    consumer = b.create_buffer_consumer()
    b.append(ints(0, 1))
    b.append(ints(2))
    assert content(consumer) == (0, 1, 2)
    b.append(ints(3, 42))
    b.append(ints(44))
    assert content(consumer) == (3, 42, 44)
    written = 0
    while not b.is_full():
        b.append(ints(1337))
        written += 1
    assert content(consumer) == (1337,) * written == (1337,) * (INTS - 6)


def test_a_consumer_sees_the_writer_finished_only_after_it_built_the_rest():
    # Flink: BufferBuilderAndConsumerTest.emptyIsFinished, partiallyFullIsFinished, fullIsFinished
    for writes in (0, INTS // 2, INTS):
        b = builder()
        consumer = b.create_buffer_consumer()
        for _ in range(writes):
            assert b.append(ints(42)) == 4
        assert not b.finished and not consumer.is_finished and consumer.read_position == 0
        consumer.build().recycle()
        assert not b.finished and not consumer.is_finished and consumer.read_position == writes * 4
        assert b.finish() == writes * 4
        assert b.finished and not consumer.is_finished
        assert b.finish() == writes * 4  # finishing again changes nothing
        assert not consumer.is_finished and consumer.read_position == writes * 4
        last = consumer.build()
        assert last.size == 0 and consumer.is_finished
        last.recycle()


def test_writable_bytes_are_the_capacity_left():
    # Flink: BufferBuilderAndConsumerTest.testWritableBytes and testWritableBytesWhenFull
    b = builder()
    assert b.writable_bytes == SIZE
    b.append(ints(1, 2, 3))
    assert b.writable_bytes == SIZE - 12
    b.append(bytes(4 * SIZE))
    assert b.writable_bytes == 0


def test_the_segment_is_recycled_once_by_the_last_of_builder_and_consumer():
    # Flink: BufferBuilderAndConsumerTest.recycleWithoutConsumer and recycleConsumerAndBufferBuilder
    recycler = CountingRecycler()
    builder(recycler).close()
    assert recycler.calls == 1
    recycler = CountingRecycler()
    b = builder(recycler)
    consumer = b.create_buffer_consumer()
    b.close()
    assert recycler.calls == 0
    consumer.close()
    assert recycler.calls == 1


def test_slices_share_the_reference_count_of_their_segment():
    # Flink: ReadOnlySlicedBufferTest.testForwardsRecycleBuffer1/2, testForwardsRetainBuffer1/2,
    # testForwardsGetMemorySegment: a built slice is a view of the builder's segment whose
    # retain and recycle act on the one count of that segment.
    recycler = CountingRecycler()
    b = builder(recycler)
    consumer = b.create_buffer_consumer()
    b.append(ints(1, 2))
    first = consumer.build()
    b.append(ints(3))
    second = consumer.build()
    assert first.segment is second.segment is b.segment
    assert first.ref is second.ref and first.ref.count == 4  # builder, consumer, two slices
    second.retain()
    assert first.ref.count == 5
    b.close()
    consumer.close()
    first.recycle()
    second.recycle()
    assert not second.is_recycled and recycler.calls == 0
    second.recycle()
    assert first.is_recycled and second.is_recycled and recycler.calls == 1


def test_a_slice_reads_only_its_bytes_and_has_its_own_data_type():
    # Flink: ReadOnlySlicedBufferTest.testCreateSlice*, testReadableBytes, testGetSetSize*,
    # testSetDataType1/2: offsets and sizes are the slice's own; the data keeps being written
    # behind a slice without changing it.
    b = builder()
    consumer = b.create_buffer_consumer()
    b.append(ints(1, 2))
    first = consumer.build()
    b.append(ints(3, 4, 5))
    second = consumer.build()
    assert (first.offset, first.size, second.offset, second.size) == (0, 8, 8, 12)
    assert bytes(first.memory()) == ints(1, 2) and bytes(second.memory()) == ints(3, 4, 5)
    second.data_type = DataType.EVENT_BUFFER
    assert first.data_type is DataType.DATA_BUFFER and second.data_type is DataType.EVENT_BUFFER
    assert first.is_buffer and not second.is_buffer
