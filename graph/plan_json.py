"""JSON views of the graphs: Flink's execution plan (``getStreamingPlanAsJSON``), a
field-by-field StreamGraph view (the golden files' ``stream_graph_detail``) and
``plan_json(env)`` for ``plan.json``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from graph.stream_graph import StreamGraph

if TYPE_CHECKING:
    from graph.api.environment import StreamExecutionEnvironment


def stream_graph_plan(graph: StreamGraph) -> dict[str, Any]:
    """Flink's ``JSONGenerator``: nodes by id with sinks last; every predecessor's side is
    "second" (Flink adds the entry before testing whether the list is empty)."""
    sinks = set(graph.sink_ids)
    nodes = []
    for node_id in sorted(graph.nodes, key=lambda i: (i in sinks, i)):
        node = graph.node(node_id)
        entry: dict[str, Any] = {
            "id": node.id,
            "type": node.operator_name,
            "pact": "Data Source" if node.id in graph.source_ids else "Data Sink" if node.id in sinks else "Operator",
            "contents": node.operator_description,
            "parallelism": node.parallelism,
        }
        if node.id not in graph.source_ids:
            entry["predecessors"] = [
                {"id": edge.source_id, "ship_strategy": edge.partitioner.name, "side": "second"}
                for edge in node.in_edges
            ]
        nodes.append(entry)
    return {"nodes": nodes}


def stream_graph_json(graph: StreamGraph) -> str:
    """The execution plan as Flink's JSON string (what ``get_execution_plan`` returns)."""
    return json.dumps(stream_graph_plan(graph), indent=2)


def stream_graph_detail(graph: StreamGraph) -> dict[str, Any]:
    """The StreamGraph field by field, with the golden files' ``stream_graph_detail`` names
    for what shufflesim models."""
    return {
        "job_type": graph.job_type,
        "chaining_enabled": graph.chaining_enabled,
        "source_ids": sorted(graph.source_ids),
        "sink_ids": sorted(graph.sink_ids),
        "nodes": [
            {
                "id": node.id,
                "name": node.operator_name,
                "operator_factory": node.operator_factory,
                "chaining_strategy": node.chaining_strategy.value,
                "parallelism": node.parallelism,
                "max_parallelism": node.max_parallelism,
                "slot_sharing_group": node.slot_sharing_group,
                "co_location_group": node.co_location_group,
                "task_class": node.task_class,
                "input_requirements": {str(i): r for i, r in node.input_requirements.items()},
                "keyed": node.keyed,
                "in_edges": [edge.edge_id for edge in node.in_edges],
                "out_edges": [edge.edge_id for edge in node.out_edges],
            }
            for node in graph.nodes.values()
        ],
        "edges": [
            {
                "source": edge.source_id,
                "target": edge.target_id,
                "partitioner": edge.partitioner.name,
                "partitioner_class": edge.partitioner.class_name,
                "type_number": edge.type_number,
                "output_tag": edge.output_tag.tag_id if edge.output_tag else None,
                "supports_unaligned_checkpoints": edge.supports_unaligned_checkpoints,
            }
            for edge in graph.edges
        ],
    }


def plan_json(env: "StreamExecutionEnvironment") -> dict[str, Any]:
    """``plan.json``: the execution plan and the JobGraph of the program."""
    return {
        "stream_graph": stream_graph_plan(env.get_stream_graph()),
        "job_graph": env.get_job_graph().to_dict(),
    }
