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
    # Flink 2.x: one pool per gate holds the exclusive buffers too (N*B + 1 .. N*B + F).
    assert gate_buffers_spec(4, cfg) == (2, 9, 16)
    # Batch gate with a large fan-in (threshold 1000): exclusive buffers turn floating.
    spec = gate_buffers_spec(500, cfg, blocking=True)
    assert spec == (1, 1000, 1008)
    spec = gate_buffers_spec(1000, cfg, blocking=True)
    assert spec == (0, 1000, 2008)


def test_pool_minimum_must_fit():
    nbp = NetworkBufferPool(10, 64)
    nbp.create_buffer_pool(6, 20)
    with pytest.raises(InsufficientBuffersError, match="required 5, but only 4 available"):
        nbp.create_buffer_pool(5, 20)


def test_redistribution_shares_in_proportion_to_expected_sizes():
    nbp = NetworkBufferPool(40, 64)
    a = nbp.create_buffer_pool(5, 16)
    b = nbp.create_buffer_pool(5, 38)
    # 30 spare + 10 required shared 5:5 -> 20 each; a is capped at 16 and its 4 go to b.
    # (Flink 1.x shared the 30 spare by capacity, 11:33, and gave (13, 27).)
    assert (a.num_buffers, b.num_buffers) == (16, 24)
    nbp.destroy_buffer_pool(b)
    assert a.num_buffers == 16


def test_redistribution_as_flinks_uniform_distribution_bounded():
    # Flink's BufferPoolFactoryTest.testUniformDistributionBounded3/4 (its unpooled segments
    # are required as a fixed-size pool's are).
    nbp = NetworkBufferPool(3, 64)
    first, second = nbp.create_buffer_pool(1, 10), nbp.create_buffer_pool(1, 10)
    assert first.num_buffers + second.num_buffers == 3
    third = nbp.create_buffer_pool(1, 10)
    assert (first.num_buffers, second.num_buffers, third.num_buffers) == (1, 1, 1)

    nbp = NetworkBufferPool(10, 64)
    first = nbp.create_buffer_pool(1, 10)
    assert first.num_buffers == 10
    fixed = [nbp.create_buffer_pool(2, 2)]
    assert first.num_buffers == 8
    second = nbp.create_buffer_pool(1, 10)
    assert (first.num_buffers, second.num_buffers) == (4, 4)
    fixed.append(nbp.create_buffer_pool(2, 2))
    assert (first.num_buffers, second.num_buffers) == (3, 3)
    fixed.append(nbp.create_buffer_pool(2, 2))
    assert (first.num_buffers, second.num_buffers) == (2, 2)
    nbp.destroy_buffer_pool(fixed[0])
    assert (first.num_buffers, second.num_buffers) == (3, 3)


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
