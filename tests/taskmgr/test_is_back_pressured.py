"""Flink's task gauge `isBackPressured` (`Task.isBackPressured`): true while some output
partition cannot give a buffer, whatever the task is doing; not a backpressure timer."""

from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.result_partition_type import ResultPartitionType
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.task import TaskMetrics


async def test_a_busy_task_whose_output_pool_ran_dry_reads_back_pressured(sim_kernel):
    partition = ResultPartition("p", 1, ResultPartitionType.PIPELINED_BOUNDED, NetworkConfig(buffer_size=4096))
    partition.setup(NetworkBufferPool(200, 4096))
    io = TaskIOMetricGroup()
    io.mark_task_start()
    metrics = TaskMetrics(io, [partition], [])
    assert metrics.snapshot()["isBackPressured"] == 0.0
    while partition.is_available():  # a record at a time, as the task's loop writes them
        await partition.emit_record(bytes(4096), 0)
    # The task has not come back to its loop yet: no backpressure timer runs, but the pool is dry.
    assert not io.soft_backpressure.is_measuring and not io.hard_backpressure.is_measuring
    assert metrics.snapshot()["isBackPressured"] == 1.0
    metrics.on_finished()
    assert metrics.snapshot()["isBackPressured"] == 0.0  # Flink: only INITIALIZING or RUNNING tasks


def test_a_task_without_output_partitions_is_never_back_pressured():
    metrics = TaskMetrics(TaskIOMetricGroup(clock=lambda: 0.0), [], [])
    assert metrics.snapshot()["isBackPressured"] == 0.0
