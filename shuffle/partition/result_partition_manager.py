"""ResultPartitionManager: the TaskManager's registry of produced partitions.

Serves subpartition views to local channels and to the Netty server. A request for a
partition that is not registered yet waits (bounded) for it, as Flink 1.18+ does with
`partition-request-timeout`, before failing with PartitionNotFoundError.
"""

from __future__ import annotations

from shuffle import kernel
from shuffle.errors import PartitionNotFoundError
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.subpartition_view import BufferAvailabilityListener, PipelinedSubpartitionView


class ResultPartitionManager:
    def __init__(self) -> None:
        self._partitions: dict[str, ResultPartition] = {}
        self._registered: dict[str, kernel.Event] = {}
        self._waiting: dict[str, int] = {}  # requests waiting per partition id

    def register_result_partition(self, partition: ResultPartition) -> None:
        if partition.partition_id in self._partitions:
            raise ValueError(f"result partition {partition.partition_id} registered twice")
        self._partitions[partition.partition_id] = partition
        partition.on_release = self._on_released
        event = self._registered.pop(partition.partition_id, None)
        if event is not None:
            event.set()

    def create_subpartition_view(self, partition_id: str, subpartition_index: int,
                                 listener: BufferAvailabilityListener) -> PipelinedSubpartitionView:
        partition = self._partitions.get(partition_id)
        if partition is None:
            raise PartitionNotFoundError(partition_id)
        if not 0 <= subpartition_index < partition.num_subpartitions:
            raise IndexError(f"partition {partition_id} has {partition.num_subpartitions} "
                             f"subpartitions; {subpartition_index} requested")
        return PipelinedSubpartitionView(partition.subpartitions[subpartition_index], listener, partition)

    async def wait_for_partition(self, partition_id: str, timeout: float) -> bool:
        """True once `partition_id` is registered, False after `timeout` seconds."""
        if partition_id in self._partitions:
            return True
        event = self._registered.setdefault(partition_id, kernel.Event())
        self._waiting[partition_id] = self._waiting.get(partition_id, 0) + 1
        try:
            with kernel.move_on_after(timeout):
                await event.wait()
                return True
            return False
        finally:
            left = self._waiting.pop(partition_id) - 1
            if left:
                self._waiting[partition_id] = left
            elif self._registered.get(partition_id) is event:
                del self._registered[partition_id]  # requests for ids that never come leave nothing behind

    def _on_released(self, partition: ResultPartition) -> None:
        self._partitions.pop(partition.partition_id, None)

    def release_all(self) -> None:
        for partition in list(self._partitions.values()):
            partition.release()

    @property
    def partitions(self) -> list[ResultPartition]:
        return list(self._partitions.values())
