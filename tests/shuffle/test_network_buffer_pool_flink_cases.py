"""NetworkBufferPool against the cases of Flink's NetworkBufferPoolTest (behaviour ported; each
test names its Flink case). The global pool's availability future is, here, the callback a
local pool registers with `when_segment_available` while the pool is empty."""

import pytest

from shuffle import kernel
from shuffle.buffer.network_buffer_pool import InsufficientBuffersError, NetworkBufferPool
from shuffle.errors import CancelTaskError
from shuffle.java_int import INT_MAX


def test_every_segment_is_served_through_the_pools_and_returns_after_they_are_destroyed():
    # Flink: NetworkBufferPoolTest.testDestroyAll (destroyAllBufferPools is a lazyDestroy of each)
    network = NetworkBufferPool(10, 128)
    pools = [network.create_buffer_pool(2, 2), network.create_buffer_pool(1, 1),
             network.create_buffer_pool(5, INT_MAX)]
    assert [pool.min_buffers for pool in pools] == [2, 1, 5]
    assert [pool.num_buffers for pool in pools] == [2, 1, 7]  # the 2 left over go to the resizable one
    held = []
    for _ in range(10):
        buffer = next(b for b in (pool.request_buffer() for pool in pools) if b is not None)
        held.append(buffer)
    assert all(pool.request_buffer() is None for pool in pools)
    for pool in pools:
        pool.destroy()
    assert all(pool.is_destroyed for pool in pools) and network.num_total_required_buffers == 0
    assert network.num_available_segments == 0  # nothing recycled yet
    for buffer in held:
        buffer.recycle()
    assert network.num_available_segments == 10
    for pool in pools:
        with pytest.raises(CancelTaskError):
            pool.request_buffer()
    assert network.create_buffer_pool(10, INT_MAX).num_buffers == 10


def test_an_unpooled_request_within_the_free_segments_is_served_and_returned():
    # Flink: NetworkBufferPoolTest.testRequestMemorySegmentsLessThanTotalBuffers
    network = NetworkBufferPool(10, 128)
    kernel.run(network.request_unpooled_segments, 5, mode="sim")
    assert network.num_available_segments == 5 and network.num_total_required_buffers == 5
    network.recycle_unpooled_segments(5)
    assert network.num_available_segments == 10 and network.num_total_required_buffers == 0


def test_an_unpooled_request_beyond_the_total_fails_and_takes_nothing():
    # Flink: NetworkBufferPoolTest.testRequestMemorySegmentsMoreThanTotalBuffers
    network = NetworkBufferPool(10, 128)
    with pytest.raises(InsufficientBuffersError, match=r"^Insufficient number of network buffers: required 11, "
                                                        r"but only 10 available\. The total number"):
        kernel.run(network.request_unpooled_segments, 11, mode="sim")
    assert network.num_available_segments == 10 and network.num_total_required_buffers == 0


def test_a_negative_unpooled_request_is_refused():
    # Flink: NetworkBufferPoolTest.testRequestMemorySegmentsWithInvalidArgument
    network = NetworkBufferPool(10, 128)
    with pytest.raises(ValueError, match=r"^Number of buffers to request must be non-negative\.$"):
        kernel.run(network.request_unpooled_segments, -1, mode="sim")
    assert network.num_available_segments == 10 and network.num_total_required_buffers == 0


async def test_required_segments_are_refused_until_unpooled_ones_come_back(sim_kernel):
    # Flink: NetworkBufferPoolTest.testInsufficientNumberOfBuffers
    network = NetworkBufferPool(5, 128)
    await network.request_unpooled_segments(5)
    assert network.num_available_segments == 0
    with pytest.raises(InsufficientBuffersError, match="^Insufficient number of network buffers: required 1, "
                                                       "but only 0 available"):
        await network.request_unpooled_segments(1)
    woken = []
    network.when_segment_available(lambda: woken.append(network.num_available_segments))
    network.recycle_unpooled_segments(5)
    assert woken == [5]  # the empty pool became available
    await network.request_unpooled_segments(5)
    assert network.num_available_segments == 0 and kernel.current_time() == 0


async def test_an_unpooled_request_waits_for_a_pool_to_give_back_its_excess(sim_kernel):
    # Flink: NetworkBufferPoolTest.testRequestMemorySegmentsWithBuffersTaken
    network = NetworkBufferPool(10, 128)
    pool = network.create_buffer_pool(5, 10)
    held = [pool.request_buffer() for _ in range(10)]
    assert all(buffer is not None for buffer in held)

    async def recycle_later() -> None:
        await kernel.sleep(0.1)
        for buffer in held:
            buffer.recycle()

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(recycle_later)
        await network.request_unpooled_segments(5)
    assert kernel.current_time() == pytest.approx(0.1)
    assert pool.num_buffers == 5 and network.num_total_required_buffers == 10


async def test_an_unpooled_request_times_out_when_its_wait_ends_past_the_deadline(sim_kernel):
    # Flink: NetworkBufferPoolTest.testRequestMemorySegmentsTimeout. Flink waits for a returned
    # segment at most 2 s at a time and checks its deadline after each wait: with a 50 ms
    # timeout and nothing returned it fails after 2 s.
    network = NetworkBufferPool(10, 128, exclusive_request_timeout=0.05)
    pool = network.create_buffer_pool(1, 10)
    held = [pool.request_buffer() for _ in range(10)]
    assert network.num_available_segments == 0
    with pytest.raises(InsufficientBuffersError, match="^Timeout triggered when requesting exclusive buffers"):
        await network.request_unpooled_segments(2)
    assert kernel.current_time() == pytest.approx(2.0)
    assert network.num_total_required_buffers == 1
    for buffer in held:
        buffer.recycle()


async def test_a_segment_returned_after_the_deadline_ends_the_request_with_the_timeout(sim_kernel):
    # Flink's internalRequestMemorySegments, the step after a wait: a wake-up (any segment
    # returned to the global pool) before the deadline takes the segment on the next step; one
    # at or after the deadline fails the request, though a segment is free then.
    network = NetworkBufferPool(4, 128, exclusive_request_timeout=1.0)
    pool = network.create_buffer_pool(1, 4)
    held = [pool.request_buffer() for _ in range(4)]

    async def recycle_at(*times: float) -> None:
        for t in times:
            await kernel.sleep_until(t)
            held.pop().recycle()

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(recycle_at, 0.5, 1.5)
        with pytest.raises(InsufficientBuffersError, match="^Timeout triggered"):
            await network.request_unpooled_segments(2)
        assert kernel.current_time() == pytest.approx(1.5)
    # the one segment taken at 0.5 went back; the one returned at 1.5 stayed free
    assert network.num_available_segments + pool.num_requested == 4 and network.num_total_required_buffers == 1
    for buffer in held:
        buffer.recycle()


def test_the_global_pool_becomes_available_when_a_pooled_segment_returns():
    # Flink: NetworkBufferPoolTest.testIsAvailableOrNotAfterRequestAndRecycleSingleSegment
    network = NetworkBufferPool(2, 128)
    first = network.request_pooled_segment()
    assert network.num_available_segments == 1
    second = network.request_pooled_segment()
    assert network.num_available_segments == 0 and network.request_pooled_segment() is None
    woken = []
    network.when_segment_available(lambda: woken.append(True))
    network.recycle_pooled_segment(first)
    assert woken == [True] and network.num_available_segments == 1
    network.recycle_pooled_segment(second)
    assert woken == [True] and network.num_available_segments == 2


async def test_the_global_pool_becomes_available_when_unpooled_segments_return(sim_kernel):
    # Flink: NetworkBufferPoolTest.testIsAvailableOrNotAfterRequestAndRecycleMultiSegments
    network = NetworkBufferPool(10, 128)
    await network.request_unpooled_segments(5)
    assert network.num_available_segments == 5
    await network.request_unpooled_segments(5)
    assert network.num_available_segments == 0
    woken = []
    network.when_segment_available(lambda: woken.append(network.num_available_segments))
    network.recycle_unpooled_segments(5)
    assert woken == [5]
    await network.request_unpooled_segments(5)
    assert network.num_available_segments == 0
    network.recycle_unpooled_segments(5)
    network.recycle_unpooled_segments(5)
    assert network.num_available_segments == 10 and network.num_total_required_buffers == 0
    assert kernel.current_time() == 0  # nothing had to wait


async def test_blocked_requests_of_several_pools_are_served_by_segments_returned_to_the_global_pool(sim_kernel):
    # Flink: NetworkBufferPoolTest.testBlockingRequestFromMultiLocalBufferPool
    network = NetworkBufferPool(20, 128)
    pools = [network.create_buffer_pool(5, 10) for _ in range(2)]
    assert all(pool.is_available() for pool in pools)
    pooled = [network.request_pooled_segment() for _ in range(9)]
    exclusive = network.num_available_segments - 1
    await network.request_unpooled_segments(exclusive)
    assert network.num_available_segments == 1 and all(pool.is_available() for pool in pools)
    builders = []

    async def take_ten(pool) -> None:
        for _ in range(10):
            builders.append(await pool.request_buffer_builder_blocking())

    async with kernel.open_nursery() as nursery:
        for pool in pools:
            nursery.start_soon(take_ten, pool)
        await kernel.sleep(1)
        # every segment is taken now: the pools wait for the global pool
        assert len(builders) + len(pooled) + exclusive == 20
        assert network.num_available_segments == 0 and not any(pool.is_available() for pool in pools)
        for segment in pooled:
            network.recycle_pooled_segment(segment)
        network.recycle_unpooled_segments(exclusive)
    assert kernel.current_time() == pytest.approx(1.0)
    assert network.num_available_segments == 0
    for pool in pools:
        assert not pool.is_available() and pool.best_effort_get_num_of_used_buffers() == 10
    for builder in builders:
        builder.close()


@pytest.mark.parametrize("minimum, maximum, message", [
    (0, 4, r"^Required number of memory segments \(0\) should be larger than 0\.$"),
    (3, 2, r"^Maximum number of memory segments \(2\) should not be smaller than minimum \(3\)\.$"),
])
def test_a_pool_size_outside_its_limits_is_refused_with_flinks_message(minimum, maximum, message):
    # Flink: LocalBufferPool's constructor checks, which createBufferPool reaches
    network = NetworkBufferPool(10, 128)
    with pytest.raises(ValueError, match=message):
        network.create_buffer_pool(minimum, maximum)
    assert network.num_total_required_buffers == 0


def test_a_request_timeout_below_a_millisecond_is_refused():
    # Flink: NetworkBufferPool's constructor (the timeout's Duration.toMillis() must be > 0)
    with pytest.raises(ValueError, match=r"^The timeout for requesting exclusive buffers should be positive\.$"):
        NetworkBufferPool(10, 128, exclusive_request_timeout=0.0005)


def test_pools_waiting_on_the_global_pool_are_served_last_registered_first():
    # Flink 2.3: LocalBufferPool waits with networkBufferPool.getAvailableFuture().thenRun(...);
    # completing that CompletableFuture runs its dependents from the top of their stack, the
    # last registered first, and those that find no segment left register again (on the next
    # future). Three pools waiting in the order a, b, c are served c, a, b (first come, first
    # served would be a, b, c).
    network = NetworkBufferPool(3, 128)
    held = [network.request_pooled_segment() for _ in range(3)]
    served = []

    def waiter(name: str):
        def on_available() -> None:  # as LocalBufferPool's: take one, or wait again
            if network.request_pooled_segment() is not None:
                served.append(name)
            else:
                network.when_segment_available(on_available)
        return on_available

    for name in "abc":
        network.when_segment_available(waiter(name))
    for segment in held:
        network.recycle_pooled_segment(segment)
    assert served == ["c", "a", "b"]
