"""Readable terminal text of the StreamGraph, JobGraph and ExecutionGraph of a program
(what ``shufflesim plan`` prints)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from graph.execution_graph import ExecutionGraph, build_execution_graph
from graph.job_graph import JobGraph
from graph.stream_graph import StreamGraph

if TYPE_CHECKING:
    from graph.api.environment import StreamExecutionEnvironment


def render_plan(program: "StreamExecutionEnvironment | JobGraph") -> str:
    """The three graphs of an environment's program (or of a compiled JobGraph) as text."""
    job_graph = program if isinstance(program, JobGraph) else program.get_job_graph()
    return "\n".join([
        render_stream_graph(job_graph.stream_graph),
        render_job_graph(job_graph),
        render_execution_graph(build_execution_graph(job_graph)),
    ])


def render_stream_graph(graph: StreamGraph) -> str:
    lines = [f"StreamGraph ({graph.job_type}, chaining {'on' if graph.chaining_enabled else 'off'})"]
    for node in graph.nodes.values():
        extras = [f"p={node.parallelism}", f"ssg={node.slot_sharing_group}"]
        if node.chaining_strategy.value != "ALWAYS":
            extras.append(f"chaining={node.chaining_strategy.value}")
        if node.co_location_group:
            extras.append(f"co-location={node.co_location_group}")
        lines.append(f"  [{node.id}] {node.operator_name}  ({', '.join(extras)})")
        for edge in node.in_edges:
            tag = f" side output {edge.output_tag.tag_id!r}" if edge.output_tag else ""
            input_number = f" input {edge.type_number}" if edge.type_number else ""
            lines.append(f"      <- [{edge.source_id}] {edge.partitioner.name}{tag}{input_number}")
    return "\n".join(lines) + "\n"


def render_job_graph(graph: JobGraph) -> str:
    lines = [f"JobGraph {graph.job_name!r} ({graph.job_type})"]
    for vertex in graph.vertices:
        group = vertex.slot_sharing_group
        extras = [f"p={vertex.parallelism}", f"max={vertex.max_parallelism}",
                  f"slot sharing group {group.name}#{group.index}"]
        if vertex.co_location_group:
            extras.append(f"co-located {vertex.co_location_group.key}")
        lines.append(f"  ({vertex.index}) {vertex.name}  [{', '.join(extras)}]  id {vertex.id}")
        for line in vertex.operator_pretty_name.splitlines():
            lines.append(f"        {line}")
        for edge in vertex.inputs:
            lines.append(
                f"      gate {edge.target_input_gate} <- ({edge.source_vertex.index}) {edge.ship_strategy} "
                f"{edge.distribution_pattern} {edge.result_partition_type} [{edge.source.id}]"
            )
    return "\n".join(lines) + "\n"


def render_execution_graph(graph: ExecutionGraph) -> str:
    lines = ["ExecutionGraph"]
    for subtask in graph.all_execution_vertices:
        lines.append(f"  {subtask.name}")
        for partition in subtask.produced_partitions:
            targets = ", ".join(
                "/".join(f"{c.job_vertex.index}.{c.subtask_index}" for c in readers)
                for readers in partition.consumers
            )
            count = partition.num_subpartitions
            lines.append(f"      writes {partition.partition_id}: {count} subpartition{'s' * (count != 1)} -> [{targets}]")
        for gate, channels in enumerate(subtask.input_gates):
            sources = ", ".join(f"{partition.partition_id}[{sub}]" for partition, sub in channels)
            lines.append(f"      gate {gate} reads {sources}")
    return "\n".join(lines) + "\n"
