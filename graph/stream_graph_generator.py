"""Transformations -> StreamGraph, following Flink's ``StreamGraphGenerator`` and its
translators.

Ids: physical transformations keep their ids; what Flink numbers during translation
(virtual partition / side-output nodes, Sink V2 writers) takes ids from a copy of the
environment's counter, so generating twice gives the same graph. Iteration heads and
tails get -1, -2, ... as from Flink's iteration counter, counted per generation.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from graph.errors import IllegalStateException, UnsupportedOperationException
from graph.stream_graph import (
    DEFAULT_SLOT_SHARING_GROUP,
    DISABLED_BUFFER_TIMEOUT,
    IterationBroker,
    StreamGraph,
    StreamNode,
)
from graph.transformations import (
    ChainingStrategy,
    FeedbackTransformation,
    LegacySinkTransformation,
    OneInputTransformation,
    PartitionTransformation,
    SideOutputTransformation,
    SinkTransformation,
    SourceTransformation,
    Transformation,
    TwoInputTransformation,
    UnionTransformation,
)

if TYPE_CHECKING:
    from graph.api.environment import StreamExecutionEnvironment

ITERATION_SOURCE_NAME_PREFIX = "IterationSource"
ITERATION_SINK_NAME_PREFIX = "IterationSink"


def _should_execute_in_batch_mode(env: "StreamExecutionEnvironment") -> bool:
    """Flink's ``shouldExecuteInBatchMode``: BATCH refuses unbounded sources; AUTOMATIC is
    BATCH when every source is bounded."""
    mode = env.runtime_mode.name
    unbounded = _exists_unbounded_source(env.transformations)
    if mode == "BATCH" and unbounded:
        raise IllegalStateException(
            "Detected an UNBOUNDED source with the 'execution.runtime-mode' set to 'BATCH'. "
            "This combination is not allowed, please set the 'execution.runtime-mode' to "
            "STREAMING or AUTOMATIC"
        )
    return mode == "BATCH" or (mode == "AUTOMATIC" and not unbounded)


def _exists_unbounded_source(transformations: list[Transformation]) -> bool:
    """Flink's ``existsUnboundedSource``: over the program's operators and all upstream."""
    return any(
        isinstance(t, SourceTransformation) and not t.source.bounded
        for operator in transformations
        for t in operator.transitive_predecessors()
    )


class StreamGraphGenerator:
    """Translates the environment's transformations into a fresh StreamGraph."""

    def __init__(self, env: "StreamExecutionEnvironment") -> None:
        self._env = env
        self._batch = _should_execute_in_batch_mode(env)
        self._next_id = env.peek_next_transformation_id()
        self._iteration_id = 0
        self._already_transformed: dict[int, list[int]] = {}
        self._graph = StreamGraph(
            job_name=env.job_name or ("Flink Batch Job" if self._batch else "Flink Streaming Job"),
            job_type="BATCH" if self._batch else "STREAMING",
            chaining_enabled=env.chaining_enabled,
            # BATCH turns execution.buffer-timeout.enabled off: nothing flushes by time
            buffer_timeout=DISABLED_BUFFER_TIMEOUT if self._batch else env.buffer_timeout,
            # a copy, as Flink's; BATCH disables checkpointing ("not needed in BATCH mode")
            checkpoint_config=replace(env.get_checkpoint_config(),
                                      **({"interval": None} if self._batch else {})),
        )

    def generate(self) -> StreamGraph:
        for transformation in self._env.transformations:
            self._transform(transformation)
        self._graph.finish()
        return self._graph

    # -- ids ---------------------------------------------------------------------------

    def _new_node_id(self) -> int:
        node_id = self._next_id
        self._next_id += 1
        return node_id

    def _new_iteration_node_id(self) -> int:
        self._iteration_id -= 1
        return self._iteration_id

    # -- dispatch ----------------------------------------------------------------------

    def _transform(self, t: Transformation) -> list[int]:
        if t.id in self._already_transformed:
            return self._already_transformed[t.id]
        translate = {
            SourceTransformation: self._translate_source,
            OneInputTransformation: self._translate_one_input,
            TwoInputTransformation: self._translate_two_input,
            LegacySinkTransformation: self._translate_legacy_sink,
            SinkTransformation: self._translate_sink,
            PartitionTransformation: self._translate_partition,
            SideOutputTransformation: self._translate_side_output,
            UnionTransformation: self._translate_union,
            FeedbackTransformation: self._translate_feedback,
        }[type(t)]
        ids = translate(t)
        # an iteration registers itself before translating its feedback edges
        return self._already_transformed.setdefault(t.id, ids)

    def _input_ids(self, t: Transformation) -> list[list[int]]:
        return [self._transform(parent) for parent in t.inputs]

    def _determine_slot_sharing_group(self, specified: str | None, input_ids: list[int]) -> str | None:
        """Flink's rule: the specified group, else the inputs' common group, else default."""
        if specified is not None:
            return specified
        input_group: str | None = None
        for input_id in input_ids:
            candidate = self._graph.slot_sharing_group_of(input_id)
            if input_group is None:
                input_group = candidate
            elif input_group != candidate:
                return DEFAULT_SLOT_SHARING_GROUP
        return input_group if input_group is not None else DEFAULT_SLOT_SHARING_GROUP

    def _max_parallelism(self, t: Transformation) -> int:
        return t.max_parallelism if t.max_parallelism > 0 else self._env.max_parallelism

    def _buffer_timeout(self, t: Transformation) -> float:
        """Flink's ``configureBufferTimeout``: the transformation's own timeout, unless it is
        unset or -1, which stand for the graph's default."""
        own = t.buffer_timeout
        return own if own is not None and own >= 0 else self._graph.buffer_timeout

    def _add_node(self, t: Transformation, node_id: int, operator_name: str, slot_sharing_group: str | None,
                  task_class: str, operator_factory: str, **fields) -> StreamNode:
        operator = t.operator
        return self._graph.add_node(StreamNode(
            id=node_id,
            name=t.name,
            operator_name=operator_name,
            operator_description=operator_name if operator.description is None else operator.description,
            kind=operator.kind,
            task_class=task_class,
            operator_factory=operator_factory,
            parallelism=t.parallelism,
            parallelism_configured=t.parallelism_configured,
            max_parallelism=self._max_parallelism(t),
            slot_sharing_group=slot_sharing_group,
            chaining_strategy=t.chaining_strategy,
            function=operator.function,
            cost=operator.cost,
            selectivity=operator.selectivity,
            fan_out=operator.fan_out,
            window_size=operator.window_size,
            uid=t.uid,
            buffer_timeout=self._buffer_timeout(t),
            **fields,
        ))

    def _apply_batch_settings(self, node: StreamNode, *requirements: str) -> None:
        """Flink's ``BatchExecutionUtils.applyBatchExecutionSettings`` for keyed inputs."""
        if node.chaining_strategy in (ChainingStrategy.ALWAYS, ChainingStrategy.HEAD_WITH_SOURCES):
            node.chaining_strategy = ChainingStrategy.HEAD
        node.input_requirements = dict(enumerate(requirements))

    def _sort_keyed_input_in_batch(self, node: StreamNode) -> None:
        """A keyed one-input operator or sink sorts its input in BATCH (Flink's one-input
        and legacy sink translators)."""
        if self._batch and node.keyed:
            self._apply_batch_settings(node, "SORTED")

    # -- translators -------------------------------------------------------------------

    def _translate_source(self, t: SourceTransformation) -> list[int]:
        group = self._determine_slot_sharing_group(t.slot_sharing_group, [])
        self._add_node(t, t.id, f"Source: {t.name}", group, "SourceOperatorStreamTask",
                       "SourceOperatorFactory", source=t.source)
        self._graph.source_ids.append(t.id)
        return [t.id]

    def _translate_one_input(self, t: OneInputTransformation) -> list[int]:
        (input_ids,) = self._input_ids(t)
        if t.id in self._already_transformed:
            return self._already_transformed[t.id]
        group = self._determine_slot_sharing_group(t.slot_sharing_group, input_ids)
        node = self._add_node(t, t.id, t.name, group, "OneInputStreamTask",
                              "SimpleUdfStreamOperatorFactory", key_selector=t.key_selector)
        for input_id in input_ids:
            self._graph.add_edge(input_id, t.id, 0)
        self._sort_keyed_input_in_batch(node)
        return [t.id]

    def _translate_two_input(self, t: TwoInputTransformation) -> list[int]:
        ids1, ids2 = self._input_ids(t)
        if t.id in self._already_transformed:
            return self._already_transformed[t.id]
        group = self._determine_slot_sharing_group(t.slot_sharing_group, ids1 + ids2)
        keyed = t.key_selector1 is not None or t.key_selector2 is not None
        node = self._add_node(t, t.id, t.name, group, "TwoInputStreamTask",
                              "SimpleUdfStreamOperatorFactory",
                              key_selector=(t.key_selector1, t.key_selector2) if keyed else None)
        for type_number, input_ids in ((1, ids1), (2, ids2)):
            for input_id in input_ids:
                self._graph.add_edge(input_id, t.id, type_number)
        if self._batch and keyed:
            self._apply_batch_settings(node, *(
                "SORTED" if selector is not None else "PASS_THROUGH"
                for selector in (t.key_selector1, t.key_selector2)
            ))
        return [t.id]

    def _translate_legacy_sink(self, t: LegacySinkTransformation) -> list[int]:
        (input_ids,) = self._input_ids(t)
        group = self._determine_slot_sharing_group(t.slot_sharing_group, input_ids)
        node = self._add_node(t, t.id, f"Sink: {t.name}", group, "OneInputStreamTask",
                              "SimpleUdfStreamOperatorFactory", sink=t.sink, key_selector=t.key_selector)
        self._graph.sink_ids.append(t.id)
        for input_id in input_ids:
            self._graph.add_edge(input_id, t.id, 0)
        self._sort_keyed_input_in_batch(node)
        return []

    def _translate_sink(self, t: SinkTransformation) -> list[int]:
        (input_ids,) = self._input_ids(t)
        group = self._determine_slot_sharing_group(t.slot_sharing_group, input_ids)
        writer_id = self._new_node_id()
        # the writer is `input.transform(...)`, keyed on a KeyedStream, with the sink's uid
        # the writer's description would be the sink's joined to its own, which it has none of
        node = self._add_node(t, writer_id, f"{t.name}: Writer", group, "OneInputStreamTask",
                              "SinkWriterOperatorFactory", sink=t.sink, key_selector=t.key_selector)
        node.operator_description = node.operator_name
        for input_id in input_ids:
            self._graph.add_edge(input_id, writer_id, 0)
        self._sort_keyed_input_in_batch(node)
        return []

    def _translate_partition(self, t: PartitionTransformation) -> list[int]:
        (input_ids,) = self._input_ids(t)
        virtual_ids = []
        for input_id in input_ids:
            virtual_id = self._new_node_id()
            self._graph.virtual_partition_nodes[virtual_id] = (input_id, t.partitioner)
            virtual_ids.append(virtual_id)
        return virtual_ids

    def _translate_side_output(self, t: SideOutputTransformation) -> list[int]:
        (input_ids,) = self._input_ids(t)
        virtual_ids = []
        for input_id in input_ids:
            virtual_id = self._new_node_id()
            self._graph.virtual_side_output_nodes[virtual_id] = (input_id, t.tag)
            virtual_ids.append(virtual_id)
        return virtual_ids

    def _translate_union(self, t: UnionTransformation) -> list[int]:
        return [node_id for ids in self._input_ids(t) for node_id in ids]

    def _translate_feedback(self, t: FeedbackTransformation) -> list[int]:
        """Flink's ``transformFeedback``: the iteration's ids are the input's plus an
        iteration head; the feedback streams feed an iteration tail."""
        if self._batch:
            raise UnsupportedOperationException(
                "Iterations are not supported in BATCH execution mode. If you want to execute "
                "such a pipeline, please set the 'execution.runtime-mode'=STREAMING"
            )
        if not t.feedback_edges:
            raise IllegalStateException(
                f"Iteration FeedbackTransformation{{id={t.id}, name='{t.name}', "
                f"parallelism={t.parallelism}}} does not have any feedback edges."
            )
        (input_ids,) = self._input_ids(t)
        if t.id in self._already_transformed:
            return self._already_transformed[t.id]
        head, tail = self._create_iteration_source_and_sink(t)
        result_ids = input_ids + [head.id]
        self._already_transformed[t.id] = result_ids
        feedback_ids: list[int] = []
        for feedback in t.feedback_edges:
            ids = self._transform(feedback)
            feedback_ids.extend(ids)
            for feedback_id in ids:
                self._graph.add_edge(feedback_id, tail.id, 0)
        group = self._determine_slot_sharing_group(None, feedback_ids)
        head.slot_sharing_group = tail.slot_sharing_group = group
        return result_ids

    def _create_iteration_source_and_sink(self, t: FeedbackTransformation) -> tuple[StreamNode, StreamNode]:
        co_location_group = f"IterationCoLocationGroup-{t.id}"
        nodes = []
        for kind, prefix, task_class in (
            ("iteration_head", ITERATION_SOURCE_NAME_PREFIX, "StreamIterationHead"),
            ("iteration_tail", ITERATION_SINK_NAME_PREFIX, "StreamIterationTail"),
        ):
            name = f"{prefix}-{t.id}"
            nodes.append(self._graph.add_node(StreamNode(
                id=self._new_iteration_node_id(), name=name, operator_name=name,
                operator_description=name, kind=kind, task_class=task_class,
                operator_factory=None, parallelism=t.parallelism,
                parallelism_configured=t.parallelism_configured,
                max_parallelism=self._max_parallelism(t), slot_sharing_group=None,
                chaining_strategy=ChainingStrategy.ALWAYS, co_location_group=co_location_group,
                buffer_timeout=self._buffer_timeout(t),
            )))
        head, tail = nodes
        tail.max_parallelism = tail.parallelism  # as Flink's createIterationSourceAndSink does
        head.source = tail.sink = IterationBroker(f"broker-{t.id}", t.wait_time)
        self._graph.source_ids.append(head.id)
        self._graph.sink_ids.append(tail.id)
        self._graph.iteration_source_sink_pairs.append((head, tail))
        return head, tail
