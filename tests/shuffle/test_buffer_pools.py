"""NetworkBufferPool / LocalBufferPool rules (spec 1.2-1.5)."""

import pytest

from shuffle import kernel
from shuffle.buffer.network_buffer_pool import InsufficientBuffersError, NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.consumer.single_input_gate import gate_buffers_spec
from shuffle.partition.result_partition import partition_pool_size
from shuffle.partition.result_partition_type import ResultPartitionType


def test_partition_pool_size_defaults():
    cfg = NetworkConfig()
    assert partition_pool_size(4, ResultPartitionType.PIPELINED_BOUNDED, cfg) == (5, 16)
    assert partition_pool_size(1, ResultPartitionType.PIPELINED_BOUNDED, cfg) == (2, 10)
    assert partition_pool_size(4, ResultPartitionType.PIPELINED, cfg) == (5, 2**31 - 1)


def test_gate_buffers_spec_streaming_and_batch():
    cfg = NetworkConfig()
    assert gate_buffers_spec(4, cfg) == (2, 1, 8)
    # Batch gate with a large fan-in (threshold 1000).
    spec = gate_buffers_spec(500, cfg, blocking=True)
    assert spec.exclusive_per_channel == 1
    spec = gate_buffers_spec(1000, cfg, blocking=True)
    assert spec == (0, 1000, 2008)


# Flink's GateBuffersSpecTest: (channels, exclusive per channel configured) -> per partition
# type, (required floating, total floating, exclusive per channel, target buffers per gate).
_GATE_SPEC_CASES = {
    "testCalculationWithSufficientRequiredBuffers": (499, 2, (1, 8, 2, 1006), (1, 8, 2, 1006)),
    "testCalculationWithOneExclusiveBuffer": (500, 2, (1, 8, 2, 1008), (500, 508, 1, 1008)),
    "testUpperBoundaryCalculationWithOneExclusiveBuffer": (999, 2, (1, 8, 2, 2006), (1, 1007, 1, 2006)),
    "testBoundaryCalculationWithoutExclusiveBuffer": (1000, 2, (1, 8, 2, 2008), (1000, 2008, 0, 2008)),
    "testCalculationWithConfiguredZeroExclusiveBuffer": (1001, 0, (1, 8, 0, 8), (1, 8, 0, 8)),
}


@pytest.mark.parametrize("partition_type", list(ResultPartitionType), ids=lambda t: t.name)
@pytest.mark.parametrize("case", _GATE_SPEC_CASES)
def test_gate_buffers_spec_like_flink(case, partition_type):
    # Flink: GateBuffersSpecTest (every case, every partition type; the gate's required buffers
    # are capped at 1000 for a blocking result, not for a pipelined one)
    channels, exclusive, pipelined, blocking = _GATE_SPEC_CASES[case]
    cfg = NetworkConfig(exclusive_buffers_per_channel=exclusive)
    spec = gate_buffers_spec(channels, cfg, blocking=not partition_type.is_pipelined)
    target = spec.exclusive_per_channel * channels + spec.total_floating  # targetTotalBuffersPerGate
    expected = pipelined if partition_type.is_pipelined else blocking
    assert (spec.required_floating, spec.total_floating, spec.exclusive_per_channel, target) == expected


def test_pool_minimum_must_fit():
    nbp = NetworkBufferPool(10, 64)
    nbp.create_buffer_pool(6, 20)
    with pytest.raises(InsufficientBuffersError, match="required 5, but only 4 available"):
        nbp.create_buffer_pool(5, 20)


def test_redistribution_is_proportional_to_capacity():
    nbp = NetworkBufferPool(40, 64)
    a = nbp.create_buffer_pool(5, 16)   # capacity 11
    b = nbp.create_buffer_pool(5, 38)   # capacity 33 -> min(excess=30, 33) = 30
    # excess 30, total capacity 41, distribute 30: a gets floor(30*11/41)=8, b the rest 22
    assert (a.num_buffers, b.num_buffers) == (13, 27)
    nbp.destroy_buffer_pool(b)
    assert a.num_buffers == 16


def test_subpartition_quota_makes_pool_unavailable_but_not_refusing():
    nbp = NetworkBufferPool(100, 64)
    pool = nbp.create_buffer_pool(3, 12, num_subpartitions=2, max_buffers_per_channel=2)
    b1 = pool.request_buffer_builder(0)
    assert pool.is_available()
    b2 = pool.request_buffer_builder(0)
    assert not pool.is_available()  # subpartition 0 is at its quota
    b3 = pool.request_buffer_builder(0)  # soft limit: still served
    assert b3 is not None
    for b in (b1, b2, b3):
        b.close()
    assert pool.is_available()
    assert pool.best_effort_get_num_of_used_buffers() == 0


def test_overdraft_beyond_pool_size_then_unavailable_until_repaid():
    nbp = NetworkBufferPool(100, 64)
    pool = nbp.create_buffer_pool(2, 2, num_subpartitions=1, max_overdraft_buffers=2)
    held = [pool.request_buffer_builder(0) for _ in range(2)]
    assert not pool.is_available()
    over = [pool.request_buffer_builder(0) for _ in range(2)]
    assert all(b is not None for b in over)
    assert pool.request_buffer_builder(0) is None  # overdraft exhausted
    assert pool.num_requested == 4
    over[0].close()
    assert pool.num_requested == 3 and not pool.is_available()  # excess goes back to the global pool
    for b in over[1:] + held:
        b.close()
    assert pool.is_available()


def test_listeners_get_recycled_buffers_fifo():
    nbp = NetworkBufferPool(100, 64)
    pool = nbp.create_buffer_pool(1, 1)
    buf = pool.request_buffer()
    assert pool.request_buffer() is None

    class Listener:
        def __init__(self, take):
            self.take, self.got = take, []

        def notify_buffer_available(self, b):
            if self.take:
                self.got.append(b)
            return self.take

    declining, taking = Listener(False), Listener(True)
    assert pool.add_buffer_listener(declining) and pool.add_buffer_listener(taking)
    buf.recycle()
    assert declining.got == [] and len(taking.got) == 1
    taking.got[0].recycle()
    assert pool.num_available == 1


async def test_unpooled_request_waits_for_excess_to_be_returned(sim_kernel):
    from shuffle import kernel

    nbp = NetworkBufferPool(4, 64, exclusive_request_timeout=5.0)
    pool = nbp.create_buffer_pool(1, 4)
    builders = [pool.request_buffer_builder() for _ in range(4)]
    assert nbp.num_available_segments == 0

    async def give_back():
        await kernel.sleep(1)
        for b in builders:
            b.close()

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(give_back)
        await nbp.request_unpooled_segments(2)
    assert kernel.current_time() == pytest.approx(1.0)
    assert pool.num_buffers == 2  # min 1 + the one segment not required by anyone
    assert nbp.num_available_segments == 0  # the pool keeps its 2, the request holds 2
    nbp.recycle_unpooled_segments(2)
    assert pool.num_buffers == 4 and nbp.num_available_segments == 2


async def test_an_unpooled_request_that_ends_unfinished_gives_back_what_it_took(sim_kernel):
    from shuffle import kernel

    nbp = NetworkBufferPool(4, 64, exclusive_request_timeout=1.0)
    pool = nbp.create_buffer_pool(1, 4)
    held = [pool.request_buffer_builder() for _ in range(4)]

    async def give_one_back():
        await kernel.sleep(0.5)
        held.pop().close()  # the pool is over its share now: the segment goes to the request

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(give_one_back)
        with pytest.raises(InsufficientBuffersError):
            await nbp.request_unpooled_segments(3)
    # every segment is the network's or the pool's again; only the pool's minimum is required
    assert nbp.num_available_segments + pool.num_requested == 4 and nbp.num_total_required_buffers == 1
    with kernel.move_on_after(0.75):  # the requesting task cancelled before the timeout, one segment taken
        async with kernel.open_nursery() as nursery:
            nursery.start_soon(give_one_back)
            await nbp.request_unpooled_segments(3)
    assert nbp.num_available_segments + pool.num_requested == 4 and nbp.num_total_required_buffers == 1
    for builder in held:
        builder.close()
    pool.destroy()
    assert nbp.num_available_segments == 4 and nbp.num_total_required_buffers == 0


async def test_unpooled_request_times_out_with_flink_hint(sim_kernel):
    nbp = NetworkBufferPool(2, 64, exclusive_request_timeout=1.0)
    pool = nbp.create_buffer_pool(1, 2)
    held = [pool.request_buffer_builder(), pool.request_buffer_builder()]
    with pytest.raises(InsufficientBuffersError) as failure:
        await nbp.request_unpooled_segments(1)
    # Flink 2.3's NetworkBufferPool.internalRequestMemorySegments' message (its two spaces
    # included), with its getConfigDescription and the 2.x key of the timeout
    assert str(failure.value) == (
        "Timeout triggered when requesting exclusive buffers: The total number of network buffers is "
        "currently set to 2 of 64 bytes each. You can increase this number by setting the configuration "
        "keys 'taskmanager.memory.network.fraction', 'taskmanager.memory.network.min', and "
        "'taskmanager.memory.network.max',  or you may increase the timeout which is 1000ms by setting the "
        "key 'taskmanager.network.memory.buffers-request-timeout'.")
    # nothing came back: the deadline is first checked when the request's 2 s wait ends
    assert kernel.current_time() == pytest.approx(2.0)
    assert nbp.num_total_required_buffers == 1
    for b in held:
        b.close()


async def test_destroying_a_pool_wakes_tasks_waiting_for_its_availability(sim_kernel):
    # Flink's lazyDestroy completes the availability future: a task soft back-pressured on a
    # partition that gets released must wake (and then fail on its next request), not hang.
    from shuffle.buffer.network_buffer_pool import NetworkBufferPool

    network = NetworkBufferPool(8, 1024)
    pool = network.create_buffer_pool(2, 2, num_subpartitions=1)
    builders = [pool.request_buffer_builder(0) for _ in range(2)]
    assert not pool.is_available()
    woke = kernel.Event()

    async def waiter() -> None:
        await pool.wait_available()
        woke.set()

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await kernel.sleep(1)
        pool.destroy()
        for builder in builders:
            builder.close()
        with kernel.fail_after(1):
            await woke.wait()
    assert network.num_available_segments == 8
