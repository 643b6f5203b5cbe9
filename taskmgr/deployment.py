"""Deployment descriptors: what the JobManager tells a TaskManager about one subtask.

Flink's `TaskDeploymentDescriptor`: which partitions the task produces, and for every
input gate where each channel's producer runs (its TaskManager's shuffle address: the
TaskManager makes the channel local when that is its own address, remote otherwise).
Descriptors are plain data so they travel as messages (`to_message` / `from_message`);
the job itself (operators, user code) travels once per TaskManager, serialized
(`taskmgr.rpc.DeployJob`).

Partition ids in descriptors carry the producer's random attempt id, as Flink's
`ResultPartitionID` does (`shuffle.partition.result_partition_id`): only the tasks the
JobManager told can name a partition.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from graph import ExecutionGraph, ExecutionVertex
from shuffle.environment import InputChannelDescriptor
from shuffle.partition.result_partition_id import result_partition_id


@dataclass(frozen=True)
class ResultPartitionDeploymentDescriptor:
    partition_id: str
    #: Index of the data set among the producing vertex's `produced_data_sets`.
    data_set_index: int
    num_subpartitions: int
    partition_type: str


@dataclass(frozen=True)
class InputGateDeploymentDescriptor:
    gate_index: int
    channels: tuple[InputChannelDescriptor, ...]


@dataclass(frozen=True)
class JobInformation:
    """Job-wide settings every task needs."""

    job_id: str
    seed: int
    #: Seconds since the job started when the JobManager deployed (aligns task clocks).
    start_offset: float
    duration: float
    sample_period: float
    #: `CheckpointCosts` fields (taskmgr.checkpointing.checkpoint_costs).
    checkpoint_costs: dict[str, float] = field(default_factory=dict)
    #: The job's attempt (0, then one more per restart): all its tasks are redeployed together.
    attempt: int = 0
    #: Flink's task.cancellation.timeout (s): a cancelled task that has not ended by then is
    #: a fatal error of its TaskManager, whose process ends (0: no such watchdog).
    task_cancellation_timeout: float = 180.0


@dataclass(frozen=True)
class TaskDeploymentDescriptor:
    execution_id: str
    job: JobInformation
    vertex_id: str
    subtask_index: int
    produced_partitions: tuple[ResultPartitionDeploymentDescriptor, ...]
    input_gates: tuple[InputGateDeploymentDescriptor, ...]
    #: Flink's JobManagerTaskRestore: the state of the checkpoint the subtask starts from;
    #: None: it starts from the beginning (no completed checkpoint).
    task_restore: Any = None

    def to_message(self) -> dict[str, Any]:
        """Plain data, as `asdict` makes it, but the gates' channels (one per producer
        subpartition) are written out by `_channel_message`: `asdict` deep-copies every
        field of every channel, ~3% of deploying a 256 x 256 job."""
        message = asdict(replace(self, input_gates=()))
        message["input_gates"] = tuple(
            {"gate_index": gate.gate_index, "channels": tuple(_channel_message(c) for c in gate.channels)}
            for gate in self.input_gates
        )
        return message

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> TaskDeploymentDescriptor:
        gates = tuple(
            InputGateDeploymentDescriptor(g["gate_index"], tuple(_channel_descriptor(c) for c in g["channels"]))
            for g in data["input_gates"]
        )
        partitions = tuple(ResultPartitionDeploymentDescriptor(**p) for p in data["produced_partitions"])
        return cls(data["execution_id"], JobInformation(**data["job"]), data["vertex_id"],
                   data["subtask_index"], partitions, gates, data.get("task_restore"))


def _channel_message(channel: InputChannelDescriptor) -> dict[str, Any]:
    """A channel's descriptor as plain data (strings and an int: nothing to copy)."""
    return {"partition_id": channel.partition_id, "subpartition_index": channel.subpartition_index,
            "producer_address": channel.producer_address}


def _channel_descriptor(data: dict[str, Any]) -> InputChannelDescriptor:
    """A channel's descriptor from its message; the partition id and address are interned:
    a decoded message holds one copy per channel, and the channels reading one partition
    (one per consumer subtask on the TaskManager) can share one."""
    address = data["producer_address"]
    return InputChannelDescriptor(sys.intern(data["partition_id"]), data["subpartition_index"],
                                  sys.intern(address) if isinstance(address, str) else address)


def execution_id(vertex: ExecutionVertex) -> str:
    """The id of a subtask's execution (the same in every attempt of the job: the attempt
    number is `JobInformation.attempt`, the random attempt id is in its partition ids)."""
    return f"{vertex.job_vertex.id}#{vertex.subtask_index}"


def channel_locality(vertex: ExecutionVertex, task_manager_of: Mapping[str, str]) -> list[tuple[int, int]]:
    """Per input gate of `vertex`, how many of its channels are local and how many remote when
    each subtask runs on `task_manager_of[execution id]`: its TaskManager makes a channel local
    when the producer's shuffle address is its own (`create_descriptor`), that is when the
    producer runs on the same TaskManager."""
    here = task_manager_of[execution_id(vertex)]
    counts = []
    for channels in vertex.input_gates:
        local = sum(task_manager_of[execution_id(partition.producer)] == here for partition, _ in channels)
        counts.append((local, len(channels) - local))
    return counts


def new_attempt_ids(graph: ExecutionGraph) -> dict[str, str]:
    """A random, unguessable attempt id (128 bits) for every subtask, by execution id."""
    return {execution_id(vertex): secrets.token_hex(16) for vertex in graph.all_execution_vertices}


def create_descriptor(vertex: ExecutionVertex, job: JobInformation, shuffle_address_of: dict[str, Any],
                      attempt_id_of: dict[str, str], task_restore: Any = None) -> TaskDeploymentDescriptor:
    """The descriptor of `vertex`; `shuffle_address_of[execution id]` is where each subtask
    runs, `attempt_id_of[execution id]` its attempt (part of its partitions' ids),
    `task_restore` the state it starts from (None: the beginning)."""
    def partition_id(partition: Any) -> str:
        return result_partition_id(partition.partition_id, attempt_id_of[execution_id(partition.producer)])

    producing = vertex.job_vertex.produced_data_sets
    partitions = tuple(
        ResultPartitionDeploymentDescriptor(partition_id(p), producing.index(p.data_set), p.num_subpartitions,
                                            p.result_partition_type)
        for p in vertex.produced_partitions
    )
    gates = tuple(
        InputGateDeploymentDescriptor(gate_index, tuple(
            InputChannelDescriptor(partition_id(partition), subpartition,
                                             shuffle_address_of[execution_id(partition.producer)])
            for partition, subpartition in channels))
        for gate_index, channels in enumerate(vertex.input_gates)
    )
    return TaskDeploymentDescriptor(execution_id(vertex), job, vertex.job_vertex.id, vertex.subtask_index,
                                    partitions, gates, task_restore)

