"""Result partition ids: a readable id plus the producer's execution attempt.

Flink names a partition by `ResultPartitionID` = (IntermediateResultPartitionID,
ExecutionAttemptID), and the attempt part is random, so a partition's id cannot be
guessed. Here the id is one string `"<readable>@<attempt>"` (e.g. `ds0#1@5f0e...`): the
partition manager registers all of it and a consumer must present all of it to read;
trace channel names use the readable part (`ds0#1#0`).
"""

from __future__ import annotations

ATTEMPT_SEPARATOR = "@"


def result_partition_id(readable: str, attempt_id: str) -> str:
    """The id a consumer presents: `readable` (e.g. "ds0#1") and the producer's attempt id."""
    return f"{readable}{ATTEMPT_SEPARATOR}{attempt_id}"


def readable_partition_id(partition_id: str) -> str:
    """The readable part of a partition id (all of it when it has no attempt part)."""
    return partition_id.split(ATTEMPT_SEPARATOR, 1)[0]


def channel_name(partition_id: str, subpartition_index: int) -> str:
    """The name trace events and errors give the channel reading one subpartition, at both
    of its ends (e.g. `ds0#1#0`)."""
    return f"{readable_partition_id(partition_id)}#{subpartition_index}"
