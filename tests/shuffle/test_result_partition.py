"""ResultPartition: what it refuses (spec 2.3), and where a batch of records stops as
Flink's per-record availability check would."""

import random

import numpy as np
import pytest

from shuffle import kernel
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.result_partition_type import ResultPartitionType
from shuffle.partition.target_groups import TargetGroups


async def test_emit_after_finish_is_refused(credit_flow):
    h = await credit_flow()
    h.finish()
    with pytest.raises(RuntimeError, match="already finished"):
        await h.emit(0, 10)


async def _emit_until_unavailable(partition: ResultPartition, record_size: int, broadcast: bool) -> int:
    """Flink's loop: write one record, then check availability; the records written."""
    written = 0
    while True:
        if broadcast:
            await partition.broadcast_record(bytes(record_size))
        else:
            await partition.emit_record(bytes(record_size), 0)
        written += 1
        if not partition.is_available():
            return written


@pytest.mark.parametrize("broadcast", [False, True])
@pytest.mark.parametrize("record_size,already", [(21, 0), (21, 100), (100, 7), (4096, 0), (5000, 1)])
async def test_a_batch_is_capped_where_flinks_per_record_loop_turns_unavailable(sim_kernel, record_size, already,
                                                                                broadcast):
    partition = ResultPartition("p", 1 if not broadcast else 3, ResultPartitionType.PIPELINED_BOUNDED,
                                NetworkConfig(buffer_size=4096))
    partition.setup(NetworkBufferPool(200, 4096))
    for _ in range(already):  # a partly filled builder to start from
        if broadcast:
            await partition.broadcast_record(bytes(record_size))
        else:
            await partition.emit_record(bytes(record_size), 0)
    predicted = partition.records_before_unavailable(record_size, broadcast, 10**6)
    assert predicted == await _emit_until_unavailable(partition, record_size, broadcast)
    # A cap below the prediction is the cap; an unavailable partition still takes one record.
    assert partition.records_before_unavailable(record_size, broadcast, 3) == 1
    assert partition.records_before_unavailable(record_size, broadcast, 0) == 0


async def _emit_in_order_until_unavailable(partition: ResultPartition, record_size: int, targets: list[int]) -> int:
    written = 0
    for target in targets:
        await partition.emit_record(bytes(record_size), target)
        written += 1
        if not partition.is_available():
            return written
    raise AssertionError("the pool never turned unavailable")


def four_subpartitions(debloat: bool, announced: tuple[int, ...]) -> ResultPartition:
    """A partition of 4 subpartitions over 4 KiB segments; with debloating, its consumers
    announced the buffer sizes `announced`."""
    config = NetworkConfig(buffer_size=4096, debloat=debloat, min_segment_size=256, starting_segment_size=1024)
    partition = ResultPartition("p", 4, ResultPartitionType.PIPELINED_BOUNDED, config)
    partition.setup(NetworkBufferPool(200, 4096))
    if debloat:
        for sub, size in zip(partition.subpartitions, announced):
            sub.set_desired_buffer_size(size)
    return partition


@pytest.mark.parametrize("pattern", ["round_robin", "one_channel", "random"])
@pytest.mark.parametrize("debloat", [False, True])
async def test_over_several_subpartitions_the_cap_never_passes_flinks_stop(sim_kernel, pattern, debloat):
    partition = four_subpartitions(debloat, (4096, 512, 700, 1024))
    rng = random.Random(7)
    for i in range(5):  # some open builders, partly filled
        await partition.emit_record(bytes(21), i % 4)
    targets = {"round_robin": [i % 4 for i in range(100_000)], "one_channel": [2] * 100_000,
               "random": [rng.randrange(4) for _ in range(100_000)]}[pattern]
    predicted = partition.records_before_unavailable(21, False, 10**6)
    actual = await _emit_in_order_until_unavailable(partition, 21, targets)
    assert 1 <= predicted <= actual
    assert predicted >= actual / 4  # a bound, not a useless one


async def test_a_broadcast_cap_takes_the_smallest_announced_buffer_size(sim_kernel):
    config = NetworkConfig(buffer_size=4096, debloat=True, min_segment_size=256, starting_segment_size=1024)
    partition = ResultPartition("p", 3, ResultPartitionType.PIPELINED_BOUNDED, config)
    partition.setup(NetworkBufferPool(200, 4096))
    for sub, size in zip(partition.subpartitions, (4096, 512, 512)):
        sub.set_desired_buffer_size(size)
    predicted = partition.records_before_unavailable(21, True, 10**6)
    assert predicted == await _emit_until_unavailable(partition, 21, broadcast=True)


async def test_broadcast_buffers_count_against_subpartition_zeros_quota(sim_kernel):
    """Flink's requestNewBroadcastBufferBuilder asks the pool for subpartition 0: a
    broadcast writer turns unavailable at that subpartition's 10 buffers, with 6 of the
    pool's 16 (4 x 2 + 8) still free."""
    partition = ResultPartition("p", 4, ResultPartitionType.PIPELINED_BOUNDED, NetworkConfig(buffer_size=4096))
    partition.setup(NetworkBufferPool(200, 4096))
    written = await _emit_until_unavailable(partition, 4096, broadcast=True)
    pool = partition.buffer_pool
    assert written == 10
    assert pool.subpartition_buffer_counts()[0] == 10 == pool.max_buffers_per_channel
    assert pool.num_buffers == 16 and pool.num_obtainable() == 6


@pytest.mark.parametrize("pattern", ["round_robin", "one_channel", "random", "skewed"])
@pytest.mark.parametrize("record_size,debloat", [(21, False), (21, True), (5000, False), (700, True)])
async def test_with_the_channels_known_the_cut_is_flinks_stop(sim_kernel, pattern, record_size, debloat):
    """records_before_unavailable_to: the record after which Flink's per-record loop finds
    the writer unavailable, exactly (records spanning buffers, debloated sizes at least a record)."""
    partition = four_subpartitions(debloat, (4096, 1024, 2048, 1500))
    rng = random.Random(11)
    for i in range(6):  # open builders, partly filled
        await partition.emit_record(bytes(record_size), i % 3)
    targets = {"round_robin": [i % 4 for i in range(5000)], "one_channel": [2] * 5000,
               "random": [rng.randrange(4) for _ in range(5000)],
               "skewed": [0 if rng.random() < 0.7 else rng.randrange(1, 4) for _ in range(5000)]}[pattern]
    groups = TargetGroups(np.array(targets), partition.num_subpartitions)
    predicted = partition.records_before_unavailable_to(groups, record_size)
    assert predicted == await _emit_in_order_until_unavailable(partition, record_size, targets)


async def _random_state(rng: random.Random, channels: int) -> ResultPartition | None:
    """A partition of `channels` subpartitions in a random state, still available (None if
    the random writes made it unavailable): a pool that may be short of segments (another
    pool holds some), overdraft, quotas, debloated sizes, open unicast or broadcast builders."""
    debloat = rng.random() < 0.6
    config = NetworkConfig(buffer_size=4096, debloat=debloat, min_segment_size=1, starting_segment_size=1024,
                           max_buffers_per_channel=rng.choice((1, 2, 3, 10, 10**9)),
                           max_overdraft_buffers_per_gate=rng.choice((0, 1, 5)))
    partition = ResultPartition("p", channels, ResultPartitionType.PIPELINED_BOUNDED, config)
    network = NetworkBufferPool(rng.choice((channels + 1, 2 * channels + 5, 200)), 4096)
    partition.setup(network)
    if rng.random() < 0.4 and network.total_segments > network.num_total_required_buffers:
        other = network.create_buffer_pool(1, 10**6)
        for _ in range(rng.randint(0, 20)):
            other.request_buffer()
    if debloat:
        for sub in partition.subpartitions:
            sub.set_desired_buffer_size(rng.choice((1, 21, 256, 700, 4095, 10**6)))
    for _ in range(rng.randint(0, 30)):
        with kernel.move_on_after(1.0) as blocked:  # virtual time: a write the pool cannot serve
            if rng.random() < 0.1:
                await partition.broadcast_record(bytes(rng.choice((21, 300, 5000))))
            else:
                size = rng.choice((21, 300, 3000, 4096, 5000))
                await partition.emit_record(bytes(size * rng.randint(1, 3)), rng.randrange(channels), size)
        if blocked.cancelled_caught or not partition.is_available():
            return None
    return partition


async def _records_until_unavailable(partition: ResultPartition, record_size: int, targets: list[int] | None,
                                     n: int) -> int:
    """Flink's loop: write one record (to its target, or broadcast), then check availability."""
    for written in range(1, n + 1):
        with kernel.move_on_after(1.0) as blocked:
            if targets is None:
                await partition.broadcast_record(bytes(record_size))
            else:
                await partition.emit_record(bytes(record_size), targets[written - 1])
        if blocked.cancelled_caught or not partition.is_available():
            return written
    return n


@pytest.mark.parametrize("seed", range(60))
async def test_the_cut_is_flinks_stop_from_any_state(sim_kernel, seed):
    """The exact cuts against Flink's per-record loop from random states, records smaller or
    larger than a (debloated) buffer: with the channel of every record known
    (records_before_unavailable_to), and with one builder for every record (one
    subpartition, or broadcast: records_before_unavailable)."""
    rng = random.Random(seed)
    mode = ("targets", "one subpartition", "broadcast")[seed % 3]
    partition = None
    while partition is None:
        partition = await _random_state(rng, 1 if mode == "one subpartition" else rng.randint(2, 6))
    record_size = rng.choice((1, 21, 44, 300, 1500, 4095, 4096, 4097, 5000, 9000))
    n = rng.choice((1, 2, 10, 300, 5000))
    if mode == "targets":
        favourite, bias = rng.randrange(partition.num_subpartitions), rng.random()
        targets = [favourite if rng.random() < bias else rng.randrange(partition.num_subpartitions)
                   for _ in range(n)]
        groups = TargetGroups(np.array(targets), partition.num_subpartitions)
        predicted = partition.records_before_unavailable_to(groups, record_size)
    else:
        targets = None if mode == "broadcast" else [0] * n
        predicted = partition.records_before_unavailable(record_size, mode == "broadcast", n)
    assert predicted == await _records_until_unavailable(partition, record_size, targets, n)
