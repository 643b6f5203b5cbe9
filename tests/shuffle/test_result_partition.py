"""ResultPartition: what it refuses (spec 2.3), and where a batch of records stops as
Flink's per-record availability check would."""

import pytest

from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.result_partition_type import ResultPartitionType


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
