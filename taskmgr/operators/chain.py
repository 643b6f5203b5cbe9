"""The operator chain of one task: its operators wired head to tail, outputs to writers.

Operators are built from the tail backwards, so every operator gets an `Output` holding
the operators it is chained to and the record writers of its non-chained edges (one
writer per produced data set, shared by the edges that carry it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from graph import GeneratorSource, JobVertex, StreamNode
from shuffle.writer.record_writer import RecordWriter
from taskmgr.operators.base import OperatorContext, Output, RecordWriterOutput, StreamOperator
from taskmgr.operators.one_input import (
    CountWindowReduceOperator,
    FilterOperator,
    FlatMapOperator,
    KeyedReduceOperator,
    MapOperator,
    ProcessOperator,
)
from taskmgr.operators.sinks import IterationTailOperator, SinkOperator
from taskmgr.operators.sources import (
    GeneratorSourceOperator,
    IterationHeadOperator,
    ListSourceOperator,
    SourceOperator,
)
from taskmgr.operators.two_input import CoOperator

_OPERATORS: dict[str, type[StreamOperator]] = {
    "map": MapOperator,
    "filter": FilterOperator,
    "flat_map": FlatMapOperator,
    "process": ProcessOperator,
    "keyed_process": ProcessOperator,
    "keyed_reduce": KeyedReduceOperator,
    "count_window_reduce": CountWindowReduceOperator,
    "co_map": CoOperator,
    "co_flat_map": CoOperator,
    "co_process": CoOperator,
    "sink": SinkOperator,
    "iteration_tail": IterationTailOperator,
    "iteration_head": IterationHeadOperator,
}


@dataclass
class OperatorChain:
    operators: list[StreamOperator]
    #: One per produced data set, in the vertex's order (Flink's `OperatorChain.streamOutputs`).
    outputs: list[RecordWriterOutput]

    @property
    def head(self) -> StreamOperator:
        return self.operators[0]

    @property
    def source(self) -> SourceOperator | None:
        head = self.head
        return head if isinstance(head, SourceOperator) else None


def _create(node: StreamNode, ctx: OperatorContext, output: Output, batch_bytes: int) -> StreamOperator:
    if node.kind == "source":
        if isinstance(node.source, GeneratorSource):
            return GeneratorSourceOperator(node, ctx, output, batch_bytes)
        return ListSourceOperator(node, ctx, output)
    try:
        cls = _OPERATORS[node.kind]
    except KeyError:
        raise NotImplementedError(f"operator kind {node.kind!r} of {node.operator_name} is not supported") from None
    return cls(node, ctx, output)


def build_operator_chain(vertex: JobVertex, ctx: OperatorContext, writers: Sequence[RecordWriter],
                         buffer_size: int) -> OperatorChain:
    """The chain of `vertex`; `writers[i]` writes `vertex.produced_data_sets[i]`.

    A generator source emits batches of about one buffer per output subpartition, so a
    batch fills about one buffer of each channel between two output availability checks.
    """
    channels = max((w.num_subpartitions for w in writers if not w.selector.is_broadcast), default=1)
    output_of_edge = {}
    writer_outputs = []
    for data_set, writer in zip(vertex.produced_data_sets, writers, strict=True):
        stream_edges = [stream_edge for job_edge in data_set.consumers for stream_edge in job_edge.stream_edges]
        writer_output = RecordWriterOutput(writer, ctx.io, all(e.supports_unaligned_checkpoints for e in stream_edges))
        writer_outputs.append(writer_output)
        for stream_edge in stream_edges:
            output_of_edge[stream_edge] = writer_output
    operators: dict[int, StreamOperator] = {}
    for node in reversed(vertex.operators):
        output = Output()
        for edge in node.chained_outputs:
            output.chained.append((edge.output_tag, operators[edge.target.id]))
        for edge in node.non_chained_outputs:
            entry = (edge.output_tag, output_of_edge[edge])
            if not any(tag == entry[0] and writer is entry[1] for tag, writer in output.writers):
                output.writers.append(entry)
        operators[node.id] = _create(node, ctx, output, buffer_size * channels)
    return OperatorChain([operators[node.id] for node in vertex.operators], writer_outputs)
