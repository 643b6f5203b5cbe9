"""JobGraph: chained StreamNodes as JobVertices, connected through IntermediateDataSets
and JobEdges, as Flink's ``StreamingJobGraphGenerator`` builds them
(see ``graph.streaming_job_graph_generator``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.partitioners import PartitionerSpec
from graph.stream_graph import StreamEdge, StreamGraph, StreamNode


@dataclass(eq=False)
class SlotSharingGroup:
    """Vertices whose subtasks may share a slot. BATCH jobs give every pipelined region of
    the default group its own group object (all named "default")."""

    name: str
    index: int = -1  # position among the job's groups, in topological order of vertices


@dataclass(eq=False)
class CoLocationGroup:
    """Vertices whose subtask i must run in the same slot (iteration head and tail)."""

    key: str
    vertices: list["JobVertex"] = field(default_factory=list)


@dataclass(eq=False)
class IntermediateDataSet:
    """The result a vertex produces for its consumers (one per non-chained output, shared
    by several consumers only for re-consumable BLOCKING results, as in Flink)."""

    id: str
    producer: "JobVertex"
    result_partition_type: str
    distribution_pattern: str
    partitioner: PartitionerSpec
    consumers: list["JobEdge"] = field(default_factory=list)

    @property
    def is_broadcast(self) -> bool:
        return self.partitioner.is_broadcast

    @property
    def is_forward(self) -> bool:
        return self.partitioner.class_name == "ForwardPartitioner"


@dataclass(eq=False)
class JobEdge:
    """One input gate of ``target``: reads ``source`` with ``partitioner``."""

    source: IntermediateDataSet
    target: "JobVertex"
    target_input_gate: int
    partitioner: PartitionerSpec
    type_number: int
    stream_edges: list[StreamEdge]

    @property
    def source_vertex(self) -> "JobVertex":
        return self.source.producer

    @property
    def ship_strategy(self) -> str:
        return self.partitioner.name

    @property
    def distribution_pattern(self) -> str:
        return self.source.distribution_pattern

    @property
    def result_partition_type(self) -> str:
        return self.source.result_partition_type

    def __repr__(self) -> str:
        return f"JobEdge({self.source_vertex.name!r} -> {self.target.name!r}, {self.ship_strategy})"


@dataclass(eq=False)
class JobVertex:
    """One task: the chained operators (head first). ``parallelism``/``max_parallelism``
    are what runs (max parallelism resolved by Flink's default rule where it is -1);
    ``configured_max_parallelism`` and ``dynamic_parallelism`` are what Flink's JobGraph
    shows (-1 where not set)."""

    id: str
    name: str
    operators: list[StreamNode]
    chain_indices: dict[int, int]
    parallelism: int
    parallelism_configured: bool
    dynamic_parallelism: bool
    max_parallelism: int
    configured_max_parallelism: int
    operator_pretty_name: str
    slot_sharing_group: SlotSharingGroup | None = None
    co_location_group: CoLocationGroup | None = None
    inputs: list[JobEdge] = field(default_factory=list)
    produced_data_sets: list[IntermediateDataSet] = field(default_factory=list)
    index: int = -1  # position in topological order

    @property
    def head(self) -> StreamNode:
        return self.operators[0]

    @property
    def invokable(self) -> str:
        return self.head.task_class

    @property
    def is_input_vertex(self) -> bool:
        return not self.inputs

    def is_named(self, name: str) -> bool:
        """Whether `name` names this vertex (as faults name the task they hit): its name or
        the start of it (a chain `A -> B` by `A`), or one of its chained operators by its
        node name or the name the program gave it (`Source: Seq` also as `Seq`)."""
        return (self.name.startswith(name)
                or any(name in (operator.name, operator.operator_name) for operator in self.operators))

    def __repr__(self) -> str:
        return f"JobVertex({self.name!r}, p={self.parallelism})"


@dataclass
class JobCheckpointingSettings:
    """Checkpoint configuration and which vertices Flink triggers (the input vertices),
    and which acknowledge and are notified of completion (all)."""

    config: Any
    tasks_to_trigger: list[JobVertex]
    tasks_to_acknowledge: list[JobVertex]
    tasks_to_commit: list[JobVertex]

    @property
    def enabled(self) -> bool:
        return self.config.is_checkpointing_enabled()


@dataclass
class JobGraph:
    """Vertices in Flink's ``getVerticesSortedTopologicallyFromSources`` order."""

    job_name: str
    job_type: str
    vertices: list[JobVertex]
    checkpointing: JobCheckpointingSettings
    buffer_timeout: float
    stream_graph: StreamGraph

    @property
    def edges(self) -> list[JobEdge]:
        return [edge for vertex in self.vertices for edge in vertex.inputs]

    @property
    def data_sets(self) -> list[IntermediateDataSet]:
        return [data_set for vertex in self.vertices for data_set in vertex.produced_data_sets]

    def vertex(self, name_or_id: str) -> JobVertex:
        """The vertex with this id or (chained) name."""
        for vertex in self.vertices:
            if name_or_id in (vertex.id, vertex.name):
                return vertex
        raise KeyError(name_or_id)

    def to_dict(self) -> dict[str, Any]:
        """The fields of the golden files' ``job_graph``."""
        return {
            "job_name": self.job_name,
            "job_type": self.job_type,
            "vertices": [_vertex_dict(vertex) for vertex in self.vertices],
            "edges": [_edge_dict(edge) for edge in self.edges],
        }


def _vertex_dict(vertex: JobVertex) -> dict[str, Any]:
    return {
        "index": vertex.index,
        "id": vertex.id,
        "name": vertex.name,
        "parallelism": -1 if vertex.dynamic_parallelism else vertex.parallelism,
        "max_parallelism": vertex.configured_max_parallelism,
        "parallelism_configured": vertex.parallelism_configured,
        "dynamic_parallelism": vertex.dynamic_parallelism,
        "invokable": vertex.invokable,
        "head_stream_node_id": vertex.head.id,
        "chained_operators": [
            {"stream_node_id": node.id, "name": node.operator_name, "chain_index": vertex.chain_indices[node.id]}
            for node in vertex.operators
        ],
        "operator_pretty_name": vertex.operator_pretty_name,
        "slot_sharing_group_index": vertex.slot_sharing_group.index,
        "slot_sharing_group_name": vertex.slot_sharing_group.name,
        "co_location_group": vertex.co_location_group.key if vertex.co_location_group else None,
        "num_inputs": len(vertex.inputs),
        "produced_data_sets": [
            {
                "id": data_set.id,
                "result_partition_type": data_set.result_partition_type,
                "distribution_pattern": data_set.distribution_pattern,
                "is_broadcast": data_set.is_broadcast,
                "is_forward": data_set.is_forward,
                "consumers": [edge.target.index for edge in data_set.consumers],
            }
            for data_set in vertex.produced_data_sets
        ],
    }


def _edge_dict(edge: JobEdge) -> dict[str, Any]:
    return {
        "source_vertex": edge.source_vertex.index,
        "source_name": edge.source_vertex.name,
        "target_vertex": edge.target.index,
        "target_name": edge.target.name,
        "target_input_gate": edge.target_input_gate,
        "ship_strategy": edge.ship_strategy,
        "distribution_pattern": edge.distribution_pattern,
        "result_partition_type": edge.result_partition_type,
        "intermediate_data_set": edge.source.id,
        "is_broadcast": edge.source.is_broadcast,
        "is_forward": edge.source.is_forward,
        "type_number": edge.type_number,
        "upstream_subtask_state_mapper": edge.partitioner.upstream_subtask_state_mapper,
        "downstream_subtask_state_mapper": edge.partitioner.downstream_subtask_state_mapper,
        "pre_processing_operation": None,
    }
