"""What a subtask of a restarted job starts from (Flink's `JobManagerTaskRestore` and
`TaskStateSnapshot`): the operator state of the last completed checkpoint and the
in-flight data it persisted, on the input side per channel and on the output side per
subpartition.

The persisted data is keyed by the readable partition id (`ds0#1`), without the attempt
part: the new attempt's partitions have new random attempt ids, and a channel or
subpartition of the new attempt finds its data by what it reads or produces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shuffle.partition.result_partition_id import readable_partition_id
from taskmgr.checkpointing.subtask_checkpoint_coordinator import SubtaskCheckpointAck
from taskmgr.operators.sources import SOURCE_STATE_PREFIX

#: (readable partition id, subpartition index)
ChannelKey = tuple[str, int]


def channel_key(partition_id: str, subpartition: int) -> ChannelKey:
    """The key of a channel's or subpartition's persisted data, the same in every attempt."""
    return readable_partition_id(partition_id), subpartition


@dataclass
class TaskStateSnapshot:
    """One subtask's share of a completed checkpoint."""

    checkpoint_id: int
    #: What the operators of the chain snapshotted (`StreamOperator.snapshot_state`).
    operator_state: dict[str, Any] = field(default_factory=dict)
    #: Persisted input data per channel, in order (unprocessed records, a partial record,
    #: then the buffers that came before the channel's barrier).
    input_state: dict[ChannelKey, list[bytes]] = field(default_factory=dict)
    #: Persisted output data per subpartition: the buffers the barrier overtook.
    output_state: dict[ChannelKey, list[bytes]] = field(default_factory=dict)

    @classmethod
    def from_ack(cls, ack: SubtaskCheckpointAck) -> TaskStateSnapshot:
        state = ack.channel_state
        return cls(ack.checkpoint_id, dict(ack.operator_state),
                   {channel_key(*key): list(chunks) for key, chunks in state.inputs.items()},
                   {channel_key(*key): list(chunks) for key, chunks in state.outputs.items()})

    @property
    def records_emitted(self) -> int:
        """Records the subtask's sources had emitted before the barrier."""
        return sum(n for key, n in self.operator_state.items() if key.startswith(SOURCE_STATE_PREFIX))
