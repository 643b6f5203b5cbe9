"""Flink's RecordWriterTest, BroadcastRecordWriterTest and RecordWriterDelegateTest, ported.

Each test names the Flink case whose assertions it repeats (read in apache/flink's JUnit 5
versions; the code they test checked against Flink 2.3's RecordWriter, BroadcastRecordWriter,
ChannelSelectorRecordWriter and BufferWritingResultPartition bytecode). Flink's
`createResultPartition(bufferSize, n)` is `partition()` here: a PIPELINED partition of `n`
subpartitions on a network pool of plenty of buffers of `buffer_size` bytes. A record is
given as its wire bytes (Flink's serialized record with its 4-byte length), through a
serializer that passes them on; Flink's default selector (round robin from channel 0) is
our RescalePartitioner.

Not ported: `broadcastEmit` of a non-broadcast writer (Flink's ChannelSelectorRecordWriter
copies the record into each subpartition's own buffer; it carries watermarks and latency
markers, neither of which is modelled: our only record broadcast is the BroadcastPartitioner's
shared buffer), so testBroadcastEmitRecord runs for the broadcast writer only. Reader
indices (testBroadcast*BufferIndependence) are Java's ByteBuf API: what they protect, that
each subpartition reads its own buffer of the shared bytes, is asserted here as independent
recycling.
"""

from typing import Any

import pytest

from shuffle import kernel
from shuffle.api.events import CancelCheckpointMarker, CheckpointBarrier, CheckpointOptions, EndOfPartitionEvent
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.result_partition_type import ResultPartitionType
from shuffle.partitioner.channel_selectors import BroadcastPartitioner, RescalePartitioner
from shuffle.serialization.event_serializer import deserialize_event
from shuffle.writer.record_writer import RecordWriter
from taskmgr.stream_task import StreamTask

LENGTH = 4  # the serialized length before every record


class _WireBytes:
    """A serializer of records that already are their wire bytes."""

    def serialize(self, value: bytes, timestamp: int) -> bytes:
        return value


def partition(buffer_size: int, subpartitions: int, buffers: int = 1024) -> ResultPartition:
    """Flink's createResultPartition (the segments are `buffer_size`; the configuration's
    lower bound of 64 B does not apply to a pool made here)."""
    result = ResultPartition("p", subpartitions, ResultPartitionType.PIPELINED, NetworkConfig())
    result.setup(NetworkBufferPool(buffers, buffer_size))
    return result


def writer(result: ResultPartition, broadcast: bool) -> RecordWriter:
    """Flink's createRecordWriter: a broadcast writer, or one choosing channels round robin."""
    selector = BroadcastPartitioner() if broadcast else RescalePartitioner()
    return RecordWriter(result, selector, _WireBytes(), -1)


def record(payload: int, fill: int = 7) -> bytes:
    """A record of `payload` bytes (each `fill`), on the wire with its length before it."""
    return payload.to_bytes(LENGTH, "big") + bytes([fill]) * payload


def poll(result: ResultPartition, index: int) -> Any:
    nxt = result.subpartitions[index].poll_buffer()
    assert nxt is not None
    return nxt.buffer


def is_available(result: ResultPartition, index: int) -> bool:
    return result.subpartitions[index].get_availability_and_backlog(True)[0]


BARRIER = CheckpointBarrier(2**31 - 1 + 919192, 2**31 - 1 + 18828228, CheckpointOptions())


@pytest.mark.parametrize("broadcast", [False, True])
def test_broadcast_event_no_records(broadcast):
    """testBroadcastEventNoRecords: an event with no record before it takes no buffer from
    the pool; each subpartition holds the event alone."""
    result = partition(32, 4)
    writer(result, broadcast).broadcast_event(BARRIER)
    assert result.buffer_pool.best_effort_get_num_of_used_buffers() == 0
    for i in range(4):
        assert result.subpartitions[i].number_of_queued_buffers == 1
        event = poll(result, i)
        assert not event.is_buffer and deserialize_event(event.memory()) == BARRIER
        assert not is_available(result, i)


@pytest.mark.parametrize("broadcast", [False, True])
async def test_broadcast_event_mixed_records(sim_kernel, broadcast):
    """testBroadcastEventMixedRecords: records smaller than, larger than and exactly a 32-byte
    buffer, then an event. The record buffers come first, then the event; the event takes no
    buffer. Broadcast: 3 shared buffers in each subpartition. Round robin: 1, 2, 1 and 0
    buffers in subpartitions 0-3."""
    result = partition(32, 4)
    w = writer(result, broadcast)
    for payload in (32 // 2, 32 + 1, 32 - LENGTH):
        await w.emit(record(payload))
    w.broadcast_event(BARRIER)
    counts = [3, 3, 3, 3] if broadcast else [1, 2, 1, 0]
    assert result.buffer_pool.best_effort_get_num_of_used_buffers() == (3 if broadcast else 4)
    for i, count in enumerate(counts):
        assert result.subpartitions[i].number_of_queued_buffers == count + 1
        assert all(poll(result, i).is_buffer for _ in range(count))
        event = poll(result, i)
        assert not event.is_buffer and deserialize_event(event.memory()) == BARRIER


@pytest.mark.parametrize("broadcast", [False, True])
def test_broadcast_event_buffer_reference_counting(broadcast):
    """testBroadcastEventBufferReferenceCounting: each subpartition's event buffer is
    recycled once read."""
    result = partition(32 * 1024, 2)
    writer(result, broadcast).broadcast_event(EndOfPartitionEvent())
    buffers = []
    for i in range(2):
        assert result.subpartitions[i].number_of_queued_buffers == 1
        buffer = poll(result, i)
        assert isinstance(deserialize_event(buffer.memory()), EndOfPartitionEvent)
        buffer.recycle()  # Flink's parseBuffer recycles an event's buffer
        buffers.append(buffer)
    assert all(buffer.is_recycled for buffer in buffers)


@pytest.mark.parametrize("broadcast_event", [True, False])
async def test_broadcast_buffer_independence(sim_kernel, broadcast_event):
    """testBroadcastEventBufferIndependence / testBroadcastEmitBufferIndependence: what two
    subpartitions read of one broadcast event or record are two buffers over the same bytes;
    one read (and recycled) leaves the other whole."""
    result = partition(4096, 2)
    w = writer(result, broadcast=True)
    if broadcast_event:
        w.broadcast_event(EndOfPartitionEvent())
    else:
        await w.emit(record(4))
        w.flush_all()
    assert [sub.number_of_queued_buffers for sub in result.subpartitions] == [1, 1]
    first, second = poll(result, 0), poll(result, 1)
    assert first is not second and bytes(first.memory()) == bytes(second.memory())
    expected = bytes(second.memory())
    first.recycle()
    assert not second.is_recycled and bytes(second.memory()) == expected


async def test_broadcast_emit_record(sim_kernel):
    """testBroadcastEmitRecord (the broadcast writer): 8 records of 8 bytes fill 2 shared
    32-byte buffers, each queued once in every subpartition, which then has nothing more."""
    result = partition(32, 4)
    w = writer(result, broadcast=True)
    records = [record(4) for _ in range(8)]
    for rec in records:
        await w.emit(rec)
    assert result.buffer_pool.best_effort_get_num_of_used_buffers() == 2
    for i in range(4):
        assert result.subpartitions[i].number_of_queued_buffers == 2
        read = b"".join(bytes(poll(result, i).memory()) for _ in range(2))
        assert read == b"".join(records)
        assert not is_available(result, i)


@pytest.mark.parametrize("broadcast", [False, True])
def test_is_available_or_not(broadcast):
    """testIsAvailableOrNot (RecordWriterTest): the writer is available iff its partition's
    pool has a buffer to give; taking the pool's only buffer makes it unavailable, recycling
    it available again."""
    result = partition(128, 1, buffers=10)
    result.buffer_pool.set_num_buffers(result.buffer_pool.min_buffers)  # Flink's pool of 1 and 1 segment
    result.buffer_pool.max_overdraft_buffers = 0
    w = writer(result, broadcast)
    held = [result.buffer_pool.request_buffer_builder(0)]
    while w.is_available():
        held.append(result.buffer_pool.request_buffer_builder(0))
    assert not w.is_available()
    builder = held.pop()
    consumer = builder.create_buffer_consumer_from(0)  # Flink's buildSingleBuffer
    buffer = consumer.build()
    consumer.close()
    buffer.recycle()
    assert not w.is_available()  # the builder still holds the segment
    builder.close()
    assert w.is_available()


# -- BroadcastRecordWriterTest --------------------------------------------------------------

async def test_broadcast_mixed_random_emit_record(sim_kernel):
    """testBroadcastMixedRandomEmitRecord: each of 8 records goes to one channel (round
    robin), then to all. Switching between the two finishes the open buffer every time: 16
    buffers, each subpartition holding its one unicast buffer and the 8 shared ones, every
    record in order."""
    channels = 8
    result = partition(32, channels)
    expected: list[list[bytes]] = [[] for _ in range(channels)]
    for index in range(8):
        rec = record(4, fill=index)
        await result.emit_record(rec, index % channels)
        expected[index % channels].append(rec)
        await result.broadcast_record(rec)
        for target in range(channels):
            expected[target].append(rec)
    assert result.buffer_pool.best_effort_get_num_of_used_buffers() == 2 * 8
    result.flush_all()
    for i in range(channels):
        assert result.subpartitions[i].number_of_queued_buffers == 8 + 1
        read = b"".join(bytes(poll(result, i).memory()) for _ in range(8 + 1))
        assert read == b"".join(expected[i])
        assert not is_available(result, i)


async def test_random_emit_and_buffer_recycling(sim_kernel):
    """testRandomEmitAndBufferRecycling (FLINK-17780): a shared broadcast buffer goes back to
    the pool only once every subpartition's reader recycled it."""
    record_size = 8
    result = partition(2 * record_size, 2)
    pool = result.buffer_pool
    pool.set_num_buffers(3)  # Flink's pool here: 2 subpartitions + 1
    buffers = [pool.request_buffer(), pool.request_buffer()]  # materialize the pool's segments
    for buffer in buffers:
        buffer.recycle()
    assert pool.num_available == 3

    await result.broadcast_record(record(4))
    await result.broadcast_record(record(4))  # fills the shared buffer
    assert pool.num_available == 2
    assert result.subpartitions[0].number_of_queued_buffers == 1
    first = poll(result, 0)
    assert first.size == 2 * record_size
    first.recycle()
    assert pool.num_available == 2  # subpartition 1 still reads it

    await result.emit_record(record(4), 0)
    assert pool.num_available == 1
    assert result.subpartitions[1].number_of_queued_buffers == 1
    second = poll(result, 1)
    assert second.size == 2 * record_size
    second.recycle()
    assert pool.num_available == 2


# -- RecordWriterDelegateTest ---------------------------------------------------------------

@pytest.mark.parametrize("num_writers", [1, 2])
async def test_record_writers_availability(sim_kernel, num_writers):
    """testSingleRecordWriterAvailability / testMultipleRecordWritersAvailability: the task's
    writers (Flink's RecordWriterDelegate; the StreamTask's writers here) are available while
    every pool has a buffer; the first writer's pool running dry makes them unavailable, and
    the wait for them ends when its buffer comes back."""
    network = NetworkBufferPool(10, 128)
    writers = []
    for _ in range(num_writers):
        result = ResultPartition("p", 1, ResultPartitionType.PIPELINED,
                                 NetworkConfig(buffer_size=128, max_overdraft_buffers_per_gate=0))
        result.setup(network)
        writers.append(writer(result, broadcast=False))
    task = StreamTask(None, writers, None)  # only its writers are asked
    assert task._outputs_available()
    first = writers[0].partition
    while first.is_available():
        await first.emit_record(bytes(128), 0)  # each fills (and finishes) a buffer
    assert not task._outputs_available()
    done = []

    async def wait_outputs() -> None:
        await task._wait_outputs()
        done.append(True)

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(wait_outputs)
        await kernel.sleep(1)
        assert not done
        poll(first, 0).recycle()
    assert done and task._outputs_available()


@pytest.mark.parametrize("num_writers", [1, 2])
def test_record_writers_broadcast_event(num_writers):
    """testSingleRecordWriterBroadcastEvent / testMultipleRecordWritersBroadcastEvent: an
    event broadcast by the task's writers into one set of subpartitions is queued once per
    writer in each."""
    result = partition(32, 2)
    marker = CancelCheckpointMarker(1)
    for w in [writer(result, broadcast=False) for _ in range(num_writers)]:
        w.broadcast_event(marker)
    for i in range(2):
        assert result.subpartitions[i].number_of_queued_buffers == num_writers
        for _ in range(num_writers):
            event = poll(result, i)
            assert not event.is_buffer and deserialize_event(event.memory()) == marker
