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
