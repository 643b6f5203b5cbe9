"""Graphviz DOT renderings of the StreamGraph, JobGraph and ExecutionGraph."""

from __future__ import annotations

from graph.execution_graph import ExecutionGraph
from graph.job_graph import JobGraph
from graph.stream_graph import StreamGraph


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: StreamGraph | JobGraph | ExecutionGraph) -> str:
    """DOT text of any of the three graphs."""
    if isinstance(graph, StreamGraph):
        return _stream_graph_dot(graph)
    if isinstance(graph, JobGraph):
        return _job_graph_dot(graph)
    if isinstance(graph, ExecutionGraph):
        return _execution_graph_dot(graph)
    raise TypeError(f"to_dot: expected a StreamGraph, JobGraph or ExecutionGraph, got {graph!r}")


def _stream_graph_dot(graph: StreamGraph) -> str:
    lines = ["digraph StreamGraph {", "  rankdir=LR;", "  node [shape=box];"]
    for node in graph.nodes.values():
        label = f"{node.operator_name}\nid {node.id}, p={node.parallelism}\nssg {node.slot_sharing_group}"
        lines.append(f"  {_node_ref(node.id)} [label={_quote(label)}];")
    for edge in graph.edges:
        label = edge.partitioner.name + (f" [{edge.output_tag.tag_id}]" if edge.output_tag else "")
        if edge.type_number:
            label += f" #{edge.type_number}"
        lines.append(f"  {_node_ref(edge.source_id)} -> {_node_ref(edge.target_id)} [label={_quote(label)}];")
    return "\n".join(lines + ["}"]) + "\n"


def _node_ref(node_id: int) -> str:
    """DOT name of a StreamNode; iteration nodes have negative ids."""
    return f"n{node_id}" if node_id >= 0 else f"n_{-node_id}"


def _job_graph_dot(graph: JobGraph) -> str:
    lines = ["digraph JobGraph {", "  rankdir=LR;", "  node [shape=box];"]
    for vertex in graph.vertices:
        label = f"{vertex.name}\np={vertex.parallelism} ssg {vertex.slot_sharing_group.name}"
        lines.append(f"  v{vertex.index} [label={_quote(label)}];")
    for edge in graph.edges:
        label = f"{edge.ship_strategy}\n{edge.distribution_pattern} {edge.result_partition_type}"
        lines.append(f"  v{edge.source_vertex.index} -> v{edge.target.index} [label={_quote(label)}];")
    return "\n".join(lines + ["}"]) + "\n"


def _execution_graph_dot(graph: ExecutionGraph) -> str:
    lines = ["digraph ExecutionGraph {", "  rankdir=LR;", "  node [shape=box];"]
    for vertex in graph.job_graph.vertices:
        lines.append(f"  subgraph cluster_v{vertex.index} {{ label={_quote(vertex.name)};")
        for subtask in graph.execution_vertices(vertex):
            lines.append(f'    v{vertex.index}_{subtask.subtask_index} [label="{subtask.subtask_index}"];')
        lines.append("  }")
    for consumer in graph.all_execution_vertices:
        for gate, channels in enumerate(consumer.input_gates):
            for channel, (partition, subpartition) in enumerate(channels):
                producer = partition.producer
                lines.append(
                    f"  v{producer.job_vertex.index}_{producer.subtask_index} -> "
                    f"v{consumer.job_vertex.index}_{consumer.subtask_index} "
                    f'[label="sp{subpartition} g{gate}c{channel}"];'
                )
    return "\n".join(lines + ["}"]) + "\n"
