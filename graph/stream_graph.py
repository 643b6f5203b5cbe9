"""StreamGraph: one StreamNode per physical transformation, StreamEdges between them.

Built by ``graph.stream_graph_generator``; virtual transformations (partitioning, side
outputs, unions) are resolved here when edges are added, as Flink's ``StreamGraph`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.api.functions import OutputTag
from graph.api.workload import Cost
from graph.errors import UnsupportedOperationException
from graph.parallelism import resolve_max_parallelism
from graph.partitioners import PartitionerSpec, forward, simple
from graph.transformations import ChainingStrategy

DEFAULT_SLOT_SHARING_GROUP = "default"
#: Flink's ExecutionOptions.DISABLED_NETWORK_BUFFER_TIMEOUT: flush only full buffers.
DISABLED_BUFFER_TIMEOUT = -1


@dataclass(frozen=True)
class IterationBroker:
    """What links an iteration head to its tail (Flink's broker id and loop timeout):
    ``StreamNode.source`` of the head and ``StreamNode.sink`` of the tail."""

    broker_id: str
    wait_time: float


@dataclass(eq=False)
class StreamEdge:
    """An edge between two StreamNodes; ``type_number`` is 0 for one-input (and union)
    inputs, 1 and 2 for the two inputs of a connect."""

    source: "StreamNode"
    target: "StreamNode"
    type_number: int
    partitioner: PartitionerSpec
    output_tag: OutputTag | None = None
    unique_id: int = 0
    supports_unaligned_checkpoints: bool = True

    @property
    def source_id(self) -> int:
        return self.source.id

    @property
    def target_id(self) -> int:
        return self.target.id

    @property
    def edge_id(self) -> str:
        return f"{self.source_id}->{self.target_id}#{self.type_number}"

    def __repr__(self) -> str:
        return f"StreamEdge({self.edge_id}, {self.partitioner.name})"

    def __str__(self) -> str:
        """Flink's ``StreamEdge.toString`` (buffer timeout in ms, as Flink keeps it)."""
        tag = "null" if self.output_tag is None else self.output_tag
        return (f"({self.source} -> {self.target}, "
                f"typeNumber={self.type_number}, outputPartitioner={self.partitioner}, "
                f"exchangeMode=UNDEFINED, bufferTimeout={milliseconds(self.source.buffer_timeout)}, "
                f"outputTag={tag}, uniqueId={self.unique_id})")


def milliseconds(seconds: float) -> int | float:
    """A duration as Flink's long milliseconds show it (fractions kept: ours may have them)."""
    millis = round(seconds * 1000, 6)
    return int(millis) if millis == int(millis) else millis


@dataclass(eq=False)
class StreamNode:
    """One operator. ``name`` is the transformation's name, ``operator_name`` Flink's node
    name (``Source: Seq``); ``operator_description`` is what the plan shows as contents."""

    id: int
    name: str
    operator_name: str
    operator_description: str
    kind: str
    task_class: str
    operator_factory: str
    parallelism: int
    parallelism_configured: bool
    max_parallelism: int
    slot_sharing_group: str
    chaining_strategy: ChainingStrategy
    function: Any = None
    cost: Cost | None = None
    selectivity: float | None = None
    fan_out: int | None = None
    window_size: int | None = None
    source: Any = None
    sink: Any = None
    key_selector: Any = None
    uid: str | None = None
    #: Seconds: the operator's own timeout, else the graph's; -1: only full buffers.
    buffer_timeout: float = DISABLED_BUFFER_TIMEOUT
    co_location_group: str | None = None
    input_requirements: dict[int, str] = field(default_factory=dict)
    in_edges: list[StreamEdge] = field(default_factory=list)
    out_edges: list[StreamEdge] = field(default_factory=list)
    # Set by the JobGraph generator: edges inside / leaving this node's JobVertex.
    chained_outputs: list[StreamEdge] = field(default_factory=list)
    non_chained_outputs: list[StreamEdge] = field(default_factory=list)

    @property
    def keyed(self) -> bool:
        return self.key_selector is not None

    def __str__(self) -> str:
        return f"{self.operator_name}-{self.id}"

    def __repr__(self) -> str:
        return f"StreamNode({self.id}, {self.operator_name!r})"


@dataclass
class StreamGraph:
    """Nodes in creation order; ``dynamic`` is Flink's adaptive (BATCH) graph."""

    job_name: str
    job_type: str
    chaining_enabled: bool
    buffer_timeout: float
    checkpoint_config: Any
    nodes: dict[int, StreamNode] = field(default_factory=dict)
    source_ids: list[int] = field(default_factory=list)
    sink_ids: list[int] = field(default_factory=list)
    iteration_source_sink_pairs: list[tuple[StreamNode, StreamNode]] = field(default_factory=list)
    virtual_partition_nodes: dict[int, tuple[int, PartitionerSpec]] = field(default_factory=dict)
    virtual_side_output_nodes: dict[int, tuple[int, OutputTag]] = field(default_factory=dict)

    @property
    def dynamic(self) -> bool:
        return self.job_type == "BATCH"

    @property
    def is_iterative(self) -> bool:
        return bool(self.iteration_source_sink_pairs)

    @property
    def edges(self) -> list[StreamEdge]:
        return [edge for node in self.nodes.values() for edge in node.out_edges]

    def node(self, node_id: int) -> StreamNode:
        return self.nodes[node_id]

    def add_node(self, node: StreamNode) -> StreamNode:
        if node.id in self.nodes:
            raise RuntimeError(f"duplicate StreamNode id {node.id}")
        self.nodes[node.id] = node
        return node

    def slot_sharing_group_of(self, node_id: int) -> str:
        """Slot sharing group of a node, following virtual nodes to the real one."""
        return self.nodes[self._physical_id(node_id)].slot_sharing_group

    def _physical_id(self, node_id: int) -> int:
        while node_id not in self.nodes:
            if node_id in self.virtual_side_output_nodes:
                node_id = self.virtual_side_output_nodes[node_id][0]
            else:
                node_id = self.virtual_partition_nodes[node_id][0]
        return node_id

    def add_edge(self, upstream_id: int, downstream_id: int, type_number: int) -> None:
        """Flink's ``addEdgeInternal``: resolve virtual upstream ids into a partitioner and
        an output tag, then create the actual edge."""
        partitioner: PartitionerSpec | None = None
        output_tag: OutputTag | None = None
        while upstream_id not in self.nodes:
            if upstream_id in self.virtual_side_output_nodes:
                upstream_id, tag = self.virtual_side_output_nodes[upstream_id]
                output_tag = output_tag or tag
            else:
                upstream_id, virtual_partitioner = self.virtual_partition_nodes[upstream_id]
                partitioner = partitioner or virtual_partitioner
        self._create_actual_edge(
            self.nodes[upstream_id], self.nodes[downstream_id], type_number, partitioner, output_tag
        )

    def _create_actual_edge(
        self,
        upstream: StreamNode,
        downstream: StreamNode,
        type_number: int,
        partitioner: PartitionerSpec | None,
        output_tag: OutputTag | None,
    ) -> None:
        if partitioner is None:
            if upstream.parallelism == downstream.parallelism:
                partitioner = forward(unspecified=self.dynamic)
            else:
                partitioner = simple("REBALANCE")
        if partitioner.name == "FORWARD" and upstream.parallelism != downstream.parallelism:
            raise UnsupportedOperationException(
                "Forward partitioning does not allow change of parallelism. Upstream operation: "
                f"{upstream} parallelism: {upstream.parallelism}, downstream operation: "
                f"{downstream} parallelism: {downstream.parallelism} You must use another "
                "partitioning strategy, such as broadcast, rebalance, shuffle or global."
            )
        unique_id = sum(1 for edge in upstream.out_edges if edge.target is downstream)
        edge = StreamEdge(upstream, downstream, type_number, partitioner, output_tag, unique_id)
        upstream.out_edges.append(edge)
        downstream.in_edges.append(edge)

    def settle_key_groups(self) -> None:
        """HASH edges count the key groups of their consumer: its resolved max parallelism
        (again after a BATCH forward group changed it)."""
        for edge in self.edges:
            if edge.partitioner.name == "HASH":
                edge.partitioner = edge.partitioner.with_max_parallelism(
                    resolve_max_parallelism(edge.target.max_parallelism, edge.target.parallelism)
                )

    def finish(self) -> None:
        """Settle what depends on the whole graph: the key-group count of HASH edges (the
        consumer's resolved max parallelism) and unaligned-checkpoint support, which a node
        gives all its inputs only if every one of its in-edges supports it (Flink's
        ``StreamGraphGenerator.generate``: a task's barrier handler takes one path)."""
        self.settle_key_groups()
        for node in self.nodes.values():
            supported = all(edge.partitioner.supports_unaligned_checkpoints for edge in node.in_edges)
            for edge in node.in_edges:
                edge.supports_unaligned_checkpoints = supported
