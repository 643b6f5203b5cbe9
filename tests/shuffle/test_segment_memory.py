"""Network buffers cost real memory only for the data they hold (accounting stays Flink's)."""

import pytest

from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.prioritized_deque import NEVER_QUEUED


def test_idle_segments_hold_no_bytes_and_a_partly_filled_buffer_holds_only_its_data():
    nbp = NetworkBufferPool(16, 32768)
    pool = nbp.create_buffer_pool(4, 8)
    builder = pool.request_buffer_builder()
    assert builder.segment.allocated == 0  # taken from the pool, nothing written yet
    builder.append(memoryview(b"r" * 100))
    assert 100 <= builder.segment.allocated <= 1024
    consumer = builder.create_buffer_consumer_from(0)
    first = consumer.build()  # flushed while partly filled
    builder.append(memoryview(b"s" * 20000))  # grows; the flushed slice still reads its bytes
    assert bytes(first.memory()) == b"r" * 100
    second = consumer.build()
    assert bytes(second.memory()) == b"s" * 20000
    assert builder.segment.allocated <= 32768
    segment = builder.segment
    builder.close()
    first.recycle()
    second.recycle()
    consumer.close()
    assert segment.allocated == 0  # the last reference dropped the bytes


async def test_receiving_channels_hold_arrived_bytes_not_whole_segments(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=32768), channels=1)
    assert h.channel(0).buffer_manager.num_free_exclusive == 2  # free: counted, no segment made
    await h.emit_values(0, [1, 2, 3])
    h.flush(0)
    await h.settle()
    ((received, _sequence_number),) = h.channel(0).received
    assert 0 < received.segment.allocated < 100
    assert len(received.segment.memory.obj) == received.size  # its own bytes, not the sender's segment
    h.consume(0, 1)
    assert h.received[0] == [1, 2, 3]


async def test_a_full_buffer_crosses_the_simulated_link_without_a_copy_of_its_bytes(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=32768), channels=1)
    partition, index = h.targets[0]
    await h.emit_buffers(0, 1)
    ((consumer, _partial),) = partition.subpartitions[index]._buffers
    written = consumer.builder.segment.memory.obj
    h.flush(0)
    await h.settle()
    assert h.sender(0).pool_buffers == 0  # the sender's buffer was recycled when it left
    ((received, _sequence_number),) = h.channel(0).received
    assert received.size == 32768 and received.segment.memory.obj is written
    assert [c.size for c in h.consume(0, 1)] == [32768]


async def test_an_idle_channel_holds_no_queue_list_or_channel_info_until_it_is_used(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=32768), channels=2)
    partition, index = h.targets[0]
    subpartition = partition.subpartitions[index]
    channel = h.channel(0)
    # set up (partition requested, exclusive buffers counted) and idle: every idle end
    # shares the one empty queue, and nothing else is made for it yet
    assert channel.received is NEVER_QUEUED and subpartition._buffers is NEVER_QUEUED
    assert channel.buffer_manager.floating == () and channel._channel_info is None
    for add in (NEVER_QUEUED.add, NEVER_QUEUED.add_priority_element, NEVER_QUEUED.append):
        with pytest.raises(TypeError, match="shared"):
            add(object())
    await h.emit_values(0, [1, 2, 3])
    h.flush(0)
    await h.settle()
    assert subpartition._buffers is not NEVER_QUEUED and channel.received is not NEVER_QUEUED
    assert len(channel.received) == 1 and len(NEVER_QUEUED) == 0
    h.consume(0, 1)
    assert h.received[0] == [1, 2, 3] and channel.channel_info == (0, 0)
    other = h.channel(1)  # the other channel stayed idle
    assert other.received is NEVER_QUEUED and h.targets[1][0].subpartitions[h.targets[1][1]]._buffers is NEVER_QUEUED


def test_segment_bytes_grow_in_powers_of_two_up_to_the_segment():
    """At most twice what is written (512 B at least), so a large write is followed by no
    second allocation and copy until the segment's size."""
    nbp = NetworkBufferPool(4, 32768)
    builder = nbp.create_buffer_pool(1, 2).request_buffer_builder()
    sizes = []
    for chunk in (45, 500, 600, 20000, 12000):
        builder.append(memoryview(bytes(chunk)))
        sizes.append(builder.segment.allocated)
    assert sizes == [512, 1024, 2048, 32768, 32768]
