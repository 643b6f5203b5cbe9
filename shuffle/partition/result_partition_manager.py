"""ResultPartitionManager: the TaskManager's registry of produced partitions.

Serves subpartition views to local channels and to the Netty server. A remote request for
a partition that is not registered yet waits for it, as Flink 1.18+ keeps it as a listener:
a checker that runs every `partition-request-timeout` from the TaskManager's start fails
the requests older than the timeout (so one waits between one and two timeouts); without
a timeout there is no checker and a request waits until its partition comes.
"""

from __future__ import annotations

import math

from shuffle import kernel
from shuffle.errors import PartitionNotFoundError
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.subpartition_view import BufferAvailabilityListener, PipelinedSubpartitionView


class ResultPartitionManager:
    def __init__(self, listener_timeout: float = 0.0) -> None:
        self._partitions: dict[str, ResultPartition] = {}
        self._registered: dict[str, kernel.Event] = {}
        self._waiting: dict[str, int] = {}  # requests waiting per partition id
        self.listener_timeout = listener_timeout
        self._checks_start: float | None = None

    def start_listener_timeout_checks(self) -> None:
        """Start Flink's checker of waiting requests (`checkRequestPartitionListeners`),
        run every `listener_timeout` from now: its TaskManager starts."""
        self._checks_start = kernel.current_time()

    def _listener_expiry(self, requested_at: float) -> float:
        """When the checker first finds a request made at `requested_at` older than the
        timeout (inf: no checker)."""
        timeout, start = self.listener_timeout, self._checks_start
        if timeout <= 0 or start is None:
            return math.inf
        # in whole nanoseconds, as Flink's check compares whole milliseconds: a request made
        # exactly one timeout before a check is not older than the timeout at it
        timeout_ns, since_start_ns = round(timeout * 1e9), round((requested_at - start) * 1e9)
        return start + timeout * ((since_start_ns + timeout_ns) // timeout_ns + 1)

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
        return PipelinedSubpartitionView(partition.subpartitions[subpartition_index], listener)

    async def wait_for_partition(self, partition_id: str) -> bool:
        """True once `partition_id` is registered, False once the checker expires the request."""
        if partition_id in self._partitions:
            return True
        event = self._registered.setdefault(partition_id, kernel.Event())
        self._waiting[partition_id] = self._waiting.get(partition_id, 0) + 1
        try:
            with kernel.move_on_at(self._listener_expiry(kernel.current_time())):
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
