"""RecordWriter's grouping of a fixed-width batch by target channel (the Python path for
small batches gives the same runs as the numpy path), and batches cut where the writer
turns unavailable."""

import numpy as np
import pytest

from shuffle import kernel
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.result_partition_type import ResultPartitionType
from shuffle.partition.target_groups import TargetGroups
from shuffle.partitioner.channel_selectors import RebalancePartitioner
from shuffle.serialization.record_serializer import RecordSerializer
from shuffle.serialization.records import FixedWidthRecords
from shuffle.writer.record_writer import SMALL_BATCH, RecordWriter, _small_runs


def numpy_runs(targets: np.ndarray, batch: FixedWidthRecords) -> list[tuple[int, bytes]]:
    """Reference: a stable sort of the rows by target, one run per target in ascending order."""
    order = np.argsort(targets, kind="stable")
    rows = batch.rows[order]
    return [(int(t), rows[targets[order] == t].tobytes()) for t in np.unique(targets)]


@pytest.mark.parametrize("seed", range(20))
def test_small_batches_group_as_the_numpy_path(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, SMALL_BATCH + 1))
    batch = FixedWidthRecords.make(rng.integers(0, 100, n), np.arange(n), 7, 32)
    targets = rng.integers(0, int(rng.integers(1, 6)), n)
    runs = [(target, bytes(data)) for target, data in _small_runs(targets.tolist(), batch.to_wire(), batch.format.wire_size)]
    assert runs == numpy_runs(targets, batch)


async def test_cut_batches_keep_a_stateful_selectors_order(sim_kernel):
    """writable_prefix selects the channel of every record of a batch; when the batch is cut,
    the channels of the records left are kept for when they come again, so a round robin
    goes on as if each record had been selected once, in order."""
    partition = ResultPartition("p", 3, ResultPartitionType.PIPELINED_BOUNDED, NetworkConfig(buffer_size=4096))
    partition.setup(NetworkBufferPool(200, 4096))
    records = FixedWidthRecords.make(np.arange(5_000), np.arange(5_000), 0, 64)
    writer = RecordWriter(partition, RebalancePartitioner(np.random.default_rng(3)),
                          RecordSerializer(records.format), -1)
    reference = RebalancePartitioner(np.random.default_rng(3))
    reference.setup(3)
    sent, cuts = 0, 0
    while sent < 3_000:
        batch = FixedWidthRecords(records.rows[sent:sent + 700], records.format)
        n = writer.writable_prefix(batch)
        cuts += n < len(batch)
        await writer.emit_batch(FixedWidthRecords(batch.rows[:n], batch.format))
        sent += n
        _drain(partition)  # the consumers take everything: room again
    partition.flush_all()
    _drain(partition)
    assert cuts > 0
    expected = np.bincount(reference.select_channels(records)[:sent], minlength=3) * records.format.wire_size
    assert [sub.total_number_of_bytes for sub in partition.subpartitions] == expected.tolist()


def _drain(partition: ResultPartition) -> None:
    for sub in partition.subpartitions:
        while (polled := sub.poll_buffer()) is not None:
            polled.buffer.recycle()


async def test_the_output_flusher_sleeps_the_timeout_plus_the_overshoot(sim_kernel, monkeypatch):
    """Flink's OutputFlusher: Thread.sleep(timeout), then flushAll; a sleep overshoots, so the
    period is longer than the timeout and drifts against a paced source's records."""
    partition = ResultPartition("p", 1, ResultPartitionType.PIPELINED_BOUNDED, NetworkConfig(buffer_size=4096))
    partition.setup(NetworkBufferPool(20, 4096))
    writer = RecordWriter(partition, RebalancePartitioner(np.random.default_rng(0)),
                          RecordSerializer(FixedWidthRecords.make(np.arange(1), np.arange(1), 0, 16).format), 0.001)
    flushes, announced = [], []
    monkeypatch.setattr(partition, "flush_all", lambda: flushes.append(kernel.current_time()))
    async with kernel.open_nursery() as nursery:
        nursery.start_soon(writer.run_output_flusher, 0.0003, 0.0001)
        for _ in range(4):
            await kernel.sleep(0.0002)
            announced.append(writer.next_flush_at)
        await kernel.sleep(0.005)
        nursery.cancel_scope.cancel()
    assert flushes[:4] == pytest.approx([0.0003 + 0.0011 * k for k in range(1, 5)])
    assert announced[0] == pytest.approx(0.0014) and announced[-1] == pytest.approx(0.0014)  # the next one


@pytest.mark.parametrize("seed", range(12))
def test_a_cut_batchs_groups_are_those_of_its_records(seed):
    """TargetGroups.prefix (a cut batch's groups, from those of the batch it was cut from,
    sorted or not yet) equals the groups of the prefix's targets themselves."""
    rng = np.random.default_rng(seed)
    channels = int(rng.integers(1, 70))
    targets = rng.integers(0, channels, int(rng.integers(2, 3000)))
    groups = TargetGroups(targets, channels)
    if seed % 2:
        groups.order  # sorted before the cut
    n = int(rng.integers(1, len(targets) + 1))
    prefix, fresh = groups.prefix(n), TargetGroups(targets[:n], channels)
    assert (prefix.counts, prefix.channels, prefix.starts()) == (fresh.counts, fresh.channels, fresh.starts())
    assert prefix.order.tolist() == fresh.order.tolist() == np.argsort(targets[:n], kind="stable").tolist()


@pytest.mark.parametrize("seed", range(8))
async def test_cut_batches_write_what_plain_writes_do(sim_kernel, seed):
    """Batches cut by writable_prefix (their grouping reused from it) put the same bytes into
    each subpartition as the same batches written without writable_prefix, in lockstep."""
    rng = np.random.default_rng(seed)
    channels = int(rng.integers(2, 9))
    records = FixedWidthRecords.make(rng.integers(0, 10**6, 20_000), np.arange(20_000), 5, 32)
    writers, outs = [], []
    for _ in range(2):
        partition = ResultPartition("p", channels, ResultPartitionType.PIPELINED_BOUNDED,
                                    NetworkConfig(buffer_size=4096))
        partition.setup(NetworkBufferPool(500, 4096))
        writers.append(RecordWriter(partition, RebalancePartitioner(np.random.default_rng(seed)),
                                    RecordSerializer(records.format), -1))
        outs.append([bytearray() for _ in range(channels)])
    sent, cuts = 0, 0
    while sent < len(records):
        batch = FixedWidthRecords.of_rows(records.rows[sent:sent + int(rng.integers(1, 3000))], records.format)
        n = writers[0].writable_prefix(batch)
        cuts += n < len(batch)
        for writer, out in zip(writers, outs):
            await writer.emit_batch(FixedWidthRecords.of_rows(batch.rows[:n], batch.format))
            writer.flush_all()
            for index, sub in enumerate(writer.partition.subpartitions):
                while (polled := sub.poll_buffer()) is not None:
                    out[index] += polled.buffer.memory()
                    polled.buffer.recycle()
        sent += n
    assert cuts > 0
    assert outs[0] == outs[1]
