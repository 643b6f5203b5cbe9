"""What a checkpoint costs outside the network: the coordinator's work and RPCs, the
synchronous snapshot, the asynchronous upload (scenario `[checkpoints]` keys).

Defaults reproduce Flink 2.3 on a local MiniCluster with a file-system checkpoint
storage (the slow-map job of issue 8): the trigger reaches a source a few milliseconds
after the barrier's timestamp (the coordinator takes the timestamp, checkpoints the
source's OperatorCoordinator and creates the storage location before the trigger RPC),
snapshots of stateless operators take well under a millisecond, and the asynchronous
part writes state and in-flight data to local disk with a fixed cost per checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointCosts:
    #: From the barrier's timestamp at the coordinator to the trigger at a source task (s).
    trigger_delay: float = 0.004
    #: An acknowledgement's (or decline's) way from a task to the coordinator (s).
    ack_latency: float = 0.001
    #: The synchronous snapshot on the task's thread (s).
    sync_snapshot: float = 0.0002
    #: Fixed cost of the asynchronous part: files, metadata (s).
    async_overhead: float = 0.002
    #: Upload bandwidth of state and in-flight data (bytes/s).
    upload_bandwidth: float = 200e6
    #: Operator state of each subtask (bytes).
    state_size: int = 0

    def upload_time(self, nbytes: int) -> float:
        return self.async_overhead + nbytes / self.upload_bandwidth
