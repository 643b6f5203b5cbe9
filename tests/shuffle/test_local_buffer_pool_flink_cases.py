"""LocalBufferPool against the cases of Flink's LocalBufferPoolTest (behaviour ported; each
test names its Flink case). As there, a pool made directly over a NetworkBufferPool of
1024 segments, starting at one buffer."""

import pytest

from shuffle.buffer.local_buffer_pool import LocalBufferPool
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.errors import CancelTaskError

TOTAL = 1024


@pytest.fixture
def pools():
    network = NetworkBufferPool(TOTAL, 128)
    pool = LocalBufferPool(network, 1, 2**31 - 1)
    assert pool.num_available == 1
    yield network, pool
    pool.destroy()
    assert network.num_available_segments == TOTAL  # every segment came back


def test_requests_keep_one_segment_ahead_until_the_pool_size(pools):
    # Flink: LocalBufferPoolTest.testRequestMoreThanAvailable
    _, pool = pools
    pool.set_num_buffers(TOTAL)
    held = []
    for i in range(1, TOTAL + 1):
        held.append(pool.request_buffer())
        assert held[-1] is not None and pool.num_requested == min(i + 1, TOTAL)
    assert pool.request_buffer() is None and pool.num_requested == TOTAL
    for buffer in held:
        buffer.recycle()


def test_a_destroyed_pool_refuses_requests(pools):
    # Flink: LocalBufferPoolTest.testRequestAfterDestroy (2.x: CancelTaskException)
    _, pool = pools
    pool.destroy()
    with pytest.raises(CancelTaskError, match=r"^Buffer pool has already been destroyed\.$"):
        pool.request_buffer()


def test_resizing_a_destroyed_pool_fetches_nothing(pools):
    # Flink: LocalBufferPoolTest.testSetNumAfterDestroyDoesNotProactivelyFetchSegments
    _, pool = pools
    pool.set_num_buffers(2)
    assert pool.num_buffers == 2 and pool.num_available == 1
    pool.destroy()
    pool.set_num_buffers(3)
    assert pool.num_buffers == 3 and pool.num_available == 0


def test_buffers_recycled_after_destroy_go_back_to_the_network(pools):
    # Flink: LocalBufferPoolTest.testRecycleAfterDestroy
    network, pool = pools
    pool.set_num_buffers(TOTAL)
    held = [pool.request_buffer() for _ in range(TOTAL)]
    pool.destroy()
    assert pool.num_requested == TOTAL and network.num_available_segments == 0
    for buffer in held:
        buffer.recycle()
    assert network.num_available_segments == TOTAL


def test_excess_buffers_go_back_as_they_are_recycled(pools):
    # Flink: LocalBufferPoolTest.testRecycleExcessBuffersAfterRecycling
    _, pool = pools
    pool.set_num_buffers(TOTAL)
    held = [pool.request_buffer() for _ in range(TOTAL)]
    assert pool.num_requested == TOTAL
    pool.set_num_buffers(TOTAL // 2)
    assert pool.num_requested == TOTAL  # nothing is free to give back yet
    for i in range(1, TOTAL // 2):
        held.pop(0).recycle()
        assert pool.num_requested == TOTAL - i
    for buffer in held:
        buffer.recycle()


def test_free_excess_buffers_go_back_when_the_pool_shrinks(pools):
    # Flink: LocalBufferPoolTest.testRecycleExcessBuffersAfterChangingNumBuffers
    _, pool = pools
    pool.set_num_buffers(TOTAL)
    for buffer in [pool.request_buffer() for _ in range(TOTAL)]:
        buffer.recycle()
    assert pool.num_available == TOTAL
    pool.set_num_buffers(TOTAL // 2)
    assert pool.num_available == TOTAL // 2


def test_a_pool_cannot_be_sized_below_its_minimum(pools):
    # Flink: LocalBufferPoolTest.testSetLessThanRequiredNumBuffers
    _, pool = pools
    pool.set_num_buffers(1)
    with pytest.raises(ValueError, match=r"^Buffer pool needs at least 1 buffers, but tried to set to 0$"):
        pool.set_num_buffers(0)


def test_a_bounded_pool_serves_between_its_minimum_and_maximum(pools):
    # Flink: LocalBufferPoolTest.testBoundedBuffer
    network, first = pools
    first.destroy()
    pool = LocalBufferPool(network, 1, 2)
    assert pool.num_available == 1 and pool.max_buffers == 2
    for size, capacity in ((1, 1), (2, 2), (3, 2), (1, 1)):
        pool.set_num_buffers(size)
        held = []
        for taken in range(1, capacity + 1):
            held.append(pool.request_buffer())
            assert held[-1] is not None
            assert pool.num_available == (1 if taken < capacity else 0)
        assert pool.request_buffer() is None and pool.num_available == 0
        for returned, buffer in enumerate(held, 1):
            buffer.recycle()
            assert pool.num_available == returned
    pool.destroy()


class _Listener:
    def __init__(self):
        self.got = []

    def notify_buffer_available(self, buffer):
        self.got.append(buffer)
        return True


def test_a_segment_fetched_from_the_network_is_kept_free_not_lent_to_a_listener():
    # Flink 2.3's LocalBufferPool.checkAvailability fetches a segment from the global pool into
    # the free deque (requestMemorySegmentFromGlobal); only a recycled segment goes to a
    # waiting BufferListener. So a pool that grows while a channel waits keeps the new
    # segment free until a buffer of the pool is recycled.
    network = NetworkBufferPool(6, 64)
    pool = network.create_buffer_pool(1, 4)
    other = network.create_buffer_pool(1, 4)
    assert pool.num_buffers == 3
    held = [pool.request_buffer() for _ in range(3)]
    assert pool.request_buffer() is None
    listener = _Listener()
    assert pool.add_buffer_listener(listener)
    other.destroy()  # redistribution: the pool grows to 4 and fetches a segment
    assert pool.num_buffers == 4
    assert listener.got == [] and pool.num_available == 1
    held.pop().recycle()  # a recycled one goes to the listener
    assert len(listener.got) == 1 and pool.num_available == 1
    for buffer in held + listener.got:
        buffer.recycle()
    pool.destroy()
    assert network.num_available_segments == 6
