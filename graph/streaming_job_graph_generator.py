"""StreamGraph -> JobGraph, following Flink's ``StreamingJobGraphGenerator``: operator
chaining, vertex names and ids, data sets and edges, slot sharing and co-location,
checkpoint settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from graph.errors import IllegalArgumentException, IllegalStateException, UnsupportedOperationException
from graph.hashing import traverse_stream_graph_and_generate_hashes
from graph.job_graph import (
    CoLocationGroup,
    IntermediateDataSet,
    JobCheckpointingSettings,
    JobEdge,
    JobGraph,
    JobVertex,
    SlotSharingGroup,
)
from graph.parallelism import resolve_max_parallelism
from graph.partitioners import forward, simple
from graph.stream_graph import (
    DEFAULT_SLOT_SHARING_GROUP,
    DISABLED_BUFFER_TIMEOUT,
    StreamEdge,
    StreamGraph,
    StreamNode,
    milliseconds,
)
from graph.topology import sorted_topologically_from_sources
from graph.transformations import ChainingStrategy

if TYPE_CHECKING:
    from graph.api.environment import CheckpointConfig


def create_job_graph(stream_graph: StreamGraph) -> JobGraph:
    """Compile a StreamGraph into a JobGraph (the StreamGraph's edges are updated as
    Flink does: dynamic-graph forward partitioners become FORWARD or RESCALE)."""
    return StreamingJobGraphGenerator(stream_graph).create_job_graph()


def is_chainable(edge: StreamEdge, graph: StreamGraph) -> bool:
    """Flink's rule: one input, same slot sharing group, chainable strategies, FORWARD,
    same parallelism, chaining enabled, and not one of several inputs of the same type."""
    upstream, downstream = edge.source, edge.target
    return (
        len(downstream.in_edges) == 1
        and graph.chaining_enabled
        and upstream.slot_sharing_group == downstream.slot_sharing_group
        and _are_operators_chainable(upstream, downstream)
        and edge.partitioner.name == "FORWARD"
        and all(other is edge or other.type_number != edge.type_number for other in downstream.in_edges)
    )


def _are_operators_chainable(upstream: StreamNode, downstream: StreamNode) -> bool:
    if upstream.operator_factory is None or downstream.operator_factory is None:
        return False  # iteration heads and tails have no operator
    if upstream.chaining_strategy == ChainingStrategy.NEVER:
        return False
    if downstream.chaining_strategy in (ChainingStrategy.NEVER, ChainingStrategy.HEAD):
        return False
    if (downstream.chaining_strategy == ChainingStrategy.HEAD_WITH_SOURCES
            and upstream.operator_factory != "SourceOperatorFactory"):
        return False
    return upstream.parallelism == downstream.parallelism


class StreamingJobGraphGenerator:
    """One generation; ``job_vertices`` keeps Flink's creation order (post-order of the
    chains, i.e. reverse topological), which decides input gate order."""

    def __init__(self, stream_graph: StreamGraph) -> None:
        self.graph = stream_graph
        self.job_vertices: dict[int, JobVertex] = {}
        self.chained_names: dict[int, str] = {}
        self.chain_indices: dict[int, dict[int, int]] = {}
        self.transitive_out_edges: dict[int, list[StreamEdge]] = {}

    def create_job_graph(self) -> JobGraph:
        self._pre_validate()
        hashes = traverse_stream_graph_and_generate_hashes(self.graph, is_chainable)
        for source_id in sorted(self.graph.source_ids):
            self._create_chain(source_id, 1, source_id, hashes)
        if self.graph.dynamic:
            self._set_parallelism_of_forward_groups()
        self._connect_vertices()
        vertices = sorted_topologically_from_sources(list(self.job_vertices.values()))
        for index, vertex in enumerate(vertices):
            vertex.index = index
        for index, data_set in enumerate(ds for vertex in vertices for ds in vertex.produced_data_sets):
            data_set.id = f"ds{index}"
        self._set_slot_sharing(vertices)
        self._set_co_location()
        config = self.graph.checkpoint_config
        # Flink's CheckpointCoordinatorConfiguration, built for the JobGraph's checkpointing
        # settings (whether checkpointing is on or not), refuses this combination
        if config.unaligned and config.max_concurrent > 1:
            raise IllegalArgumentException("maxConcurrentCheckpoints can't be > 1 if UnalignedCheckpoints enabled")
        return JobGraph(
            job_name=self.graph.job_name,
            job_type=self.graph.job_type,
            vertices=vertices,
            checkpointing=JobCheckpointingSettings(
                config, [v for v in vertices if v.is_input_vertex], list(vertices), list(vertices)
            ),
            buffer_timeout=self.graph.buffer_timeout,
            stream_graph=self.graph,
        )

    def _pre_validate(self) -> None:
        """Flink's ``preValidate``: refuses what checkpoints cannot handle and turns unaligned
        checkpoints off (on the StreamGraph's copy of the config) for AT_LEAST_ONCE."""
        self._validate_checkpointing(self.graph.checkpoint_config)
        config = self.graph.checkpoint_config
        if config.unaligned and config.mode.name != "EXACTLY_ONCE":
            config.unaligned = False

    def _validate_checkpointing(self, config: CheckpointConfig) -> None:
        if not config.is_checkpointing_enabled():
            return
        if self.graph.is_iterative and not config.force:
            raise UnsupportedOperationException(
                "Checkpointing is currently not supported by default for iterative jobs, as we "
                "cannot guarantee exactly once semantics. State checkpoints happen normally, but "
                "records in-transit during the snapshot will be lost upon failure. \nThe user can "
                "force enable state checkpoints with the reduced guarantees by calling: "
                "env.enableCheckpointing(interval,true)"
            )
        if self.graph.is_iterative and config.unaligned and not config.force_unaligned:
            raise UnsupportedOperationException(
                "Unaligned Checkpoints are currently not supported for iterative jobs, as rescaling "
                "would require alignment (in addition to the reduced checkpointing guarantees).\nThe "
                "user can force Unaligned Checkpoints by using 'execution.checkpointing.unaligned.forced'"
            )
        if (config.unaligned and not config.force_unaligned
                and any(edge.partitioner.name == "CUSTOM" for edge in self.graph.edges)):
            raise UnsupportedOperationException(
                "Unaligned checkpoints are currently not supported for custom partitioners, as "
                "rescaling is not guaranteed to work correctly.\nThe user can force Unaligned "
                "Checkpoints by using 'execution.checkpointing.unaligned.forced'"
            )

    # -- chaining ----------------------------------------------------------------------

    def _create_chain(self, node_id: int, chain_index: int, start_id: int, hashes: dict[int, bytes]) -> list[StreamEdge]:
        """Flink's ``createChain``: returns the edges leaving the chain below ``node_id``."""
        if start_id in self.job_vertices:
            return []
        node = self.graph.node(node_id)
        chainable = [edge for edge in node.out_edges if is_chainable(edge, self.graph)]
        non_chainable = [edge for edge in node.out_edges if edge not in chainable]
        transitive: list[StreamEdge] = []
        for edge in chainable:
            transitive.extend(self._create_chain(edge.target_id, chain_index + 1, start_id, hashes))
        for edge in non_chainable:
            transitive.append(edge)
            self._create_chain(edge.target_id, 1, edge.target_id, hashes)
        self.chained_names[node_id] = self._chained_name(node, chainable)
        self.chain_indices.setdefault(start_id, {})[node_id] = chain_index
        self._convert_dynamic_partitioners(chainable, non_chainable)
        node.chained_outputs, node.non_chained_outputs = chainable, non_chainable
        if node_id == start_id:
            self.transitive_out_edges[start_id] = transitive
            self.job_vertices[start_id] = self._create_job_vertex(node, hashes[start_id])
        return transitive

    def _chained_name(self, node: StreamNode, chainable: list[StreamEdge]) -> str:
        names = [self.chained_names[edge.target_id] for edge in chainable]
        if len(names) > 1:
            return f"{node.operator_name} -> ({', '.join(names)})"
        if names:
            return f"{node.operator_name} -> {names[0]}"
        return node.operator_name

    def _convert_dynamic_partitioners(self, chainable: list[StreamEdge], non_chainable: list[StreamEdge]) -> None:
        """Flink's ``tryConvertPartitionerForDynamicGraph``."""
        for edge in chainable:
            if edge.partitioner.forward_for_unspecified:
                edge.partitioner = forward()
        for edge in non_chainable:
            if edge.partitioner.forward_for_unspecified:
                edge.partitioner = simple("RESCALE")

    def _create_job_vertex(self, head: StreamNode, digest: bytes) -> JobVertex:
        operators = self._chain_in_order(head)
        configured = any(node.parallelism_configured for node in operators)
        return JobVertex(
            id=digest.hex(),
            name=self.chained_names[head.id],
            operators=operators,
            chain_indices=self.chain_indices[head.id],
            parallelism=head.parallelism,
            parallelism_configured=configured,
            dynamic_parallelism=self.graph.dynamic and not configured,
            max_parallelism=resolve_max_parallelism(head.max_parallelism, head.parallelism),
            configured_max_parallelism=head.max_parallelism,
            operator_pretty_name=self._pretty_name(head, head, "", True),
        )

    def _chain_in_order(self, node: StreamNode) -> list[StreamNode]:
        """The chain's nodes head first, each followed by its chained outputs (pre-order)."""
        return [node] + [n for edge in node.chained_outputs for n in self._chain_in_order(edge.target)]

    def _pretty_name(self, head: StreamNode, node: StreamNode, prefix: str, is_last: bool) -> str:
        """Flink's TREE vertex description (``buildTreeDescription``)."""
        if node is head:
            line, child_prefix = "", ""
        elif is_last:
            line, child_prefix = prefix + "+- ", prefix + "   "
        else:
            line, child_prefix = prefix + ":- ", prefix + ":  "
        text = f"{line}{node.operator_description}\n"
        outputs = node.chained_outputs
        for position, edge in enumerate(outputs):
            text += self._pretty_name(head, edge.target, child_prefix, position == len(outputs) - 1)
        return text

    def _set_parallelism_of_forward_groups(self) -> None:
        """Dynamic graphs: vertices joined by FORWARD edges form a group (Flink's
        ``JobVertexForwardGroup``) that shares the parallelism one of them has configured and
        the smallest max parallelism any of them has configured, down to their operators."""
        group_of = {start_id: {start_id} for start_id in self.job_vertices}
        for start_id, edges in self.transitive_out_edges.items():
            for edge in edges:
                if edge.partitioner.class_name == "ForwardPartitioner":
                    merged = group_of[start_id] | group_of[edge.target_id]
                    for member in merged:
                        group_of[member] = merged
        for members in {id(group): group for group in group_of.values()}.values():
            if len(members) > 1:
                self._set_forward_group([self.job_vertices[m] for m in sorted(members)])
        self.graph.settle_key_groups()

    @staticmethod
    def _set_forward_group(vertices: list[JobVertex]) -> None:
        configured = [v.parallelism for v in vertices if v.parallelism_configured]
        max_parallelisms = [v.configured_max_parallelism for v in vertices if v.configured_max_parallelism > 0]
        if configured and max_parallelisms and min(max_parallelisms) < configured[0]:
            raise IllegalStateException(
                "There is a job vertex in the forward group whose maximum parallelism is smaller "
                "than the group's parallelism"
            )
        for vertex in vertices:
            if configured:
                vertex.parallelism = configured[0]
                vertex.parallelism_configured, vertex.dynamic_parallelism = True, False
                for node in vertex.operators:
                    node.parallelism, node.parallelism_configured = configured[0], True
            if max_parallelisms:
                vertex.configured_max_parallelism = vertex.max_parallelism = min(max_parallelisms)
                for node in vertex.operators:
                    node.max_parallelism = min(max_parallelisms)

    # -- data sets and edges -----------------------------------------------------------

    def _connect_vertices(self) -> None:
        """Flink's ``setAllVertexNonChainedOutputsConfigs`` + ``connect``: one data set per
        non-chained edge (re-consumable BLOCKING data sets are reused by equal consumers)."""
        partition_type = "BLOCKING" if self.graph.job_type == "BATCH" else "PIPELINED_BOUNDED"
        outputs_of_node: dict[int, list[tuple[StreamEdge, IntermediateDataSet]]] = {}
        for start_id, producer in self.job_vertices.items():
            for edge in self.transitive_out_edges[start_id]:
                candidates = outputs_of_node.setdefault(edge.source_id, [])
                data_set = next(
                    (ds for other, ds in candidates if partition_type == "BLOCKING" and _reusable(other, edge)),
                    None,
                )
                if data_set is None:
                    data_set = IntermediateDataSet(
                        id="", producer=producer, result_partition_type=partition_type,
                        distribution_pattern="POINTWISE" if edge.partitioner.is_pointwise else "ALL_TO_ALL",
                        partitioner=edge.partitioner,
                    )
                    producer.produced_data_sets.append(data_set)
                    candidates.append((edge, data_set))
                _check_buffer_timeout(data_set.result_partition_type, edge)
                consumer = self.job_vertices[edge.target_id]
                job_edge = JobEdge(data_set, consumer, len(consumer.inputs), edge.partitioner,
                                   edge.type_number, [edge])
                consumer.inputs.append(job_edge)
                data_set.consumers.append(job_edge)

    # -- slot sharing and co-location --------------------------------------------------

    def _set_slot_sharing(self, vertices: list[JobVertex]) -> None:
        """Named groups are shared by name; "default" vertices share their pipelined
        region's group, and in STREAMING all regions share one group."""
        region_group = self._region_slot_sharing_groups(vertices)
        named: dict[str, SlotSharingGroup] = {}
        for vertex in vertices:
            name = vertex.head.slot_sharing_group
            if name == DEFAULT_SLOT_SHARING_GROUP:
                vertex.slot_sharing_group = region_group[vertex.id]
            else:
                vertex.slot_sharing_group = named.setdefault(name, SlotSharingGroup(name))
        for index, group in enumerate(dict.fromkeys(v.slot_sharing_group for v in vertices)):
            group.index = index

    def _region_slot_sharing_groups(self, vertices: list[JobVertex]) -> dict[str, SlotSharingGroup]:
        if self.graph.job_type == "STREAMING":
            shared = SlotSharingGroup(DEFAULT_SLOT_SHARING_GROUP)
            return {vertex.id: shared for vertex in vertices}
        region = {vertex.id: {vertex.id} for vertex in vertices}
        for vertex in vertices:
            for edge in vertex.inputs:
                if edge.result_partition_type != "BLOCKING":
                    merged = region[vertex.id] | region[edge.source_vertex.id]
                    for member in merged:
                        region[member] = merged
        groups: dict[int, SlotSharingGroup] = {}
        return {
            vertex.id: groups.setdefault(id(region[vertex.id]), SlotSharingGroup(DEFAULT_SLOT_SHARING_GROUP))
            for vertex in vertices
        }

    def _set_co_location(self) -> None:
        groups: dict[str, CoLocationGroup] = {}
        sharing: dict[str, SlotSharingGroup] = {}
        for vertex in self.job_vertices.values():
            key = vertex.head.co_location_group
            if key is None:
                continue
            group = groups.setdefault(key, CoLocationGroup(key))
            if sharing.setdefault(key, vertex.slot_sharing_group) is not vertex.slot_sharing_group:
                raise IllegalStateException("Cannot co-locate operators from different slot sharing groups")
            group.vertices.append(vertex)
            vertex.co_location_group = group


def _check_buffer_timeout(result_partition_type: str, edge: StreamEdge) -> None:
    """Flink's ``checkBufferTimeout``: only a pipelined result can be flushed by a timeout."""
    if result_partition_type == "BLOCKING" and edge.source.buffer_timeout != DISABLED_BUFFER_TIMEOUT:
        raise UnsupportedOperationException(
            f"only canBePipelinedConsumed partition support buffer timeout "
            f"{milliseconds(edge.source.buffer_timeout)} for src operator in edge {edge}. \n"
            "Please either disable buffer timeout (via -1) or use the canBePipelinedConsumed partition."
        )


def _reusable(first: StreamEdge, second: StreamEdge) -> bool:
    """Flink's ``createOrReuseOutput`` conditions for sharing one BLOCKING data set."""
    return (first.target.parallelism == second.target.parallelism
            and first.target.max_parallelism == second.target.max_parallelism
            and first.output_tag == second.output_tag
            and first.partitioner.equivalent(second.partitioner))
