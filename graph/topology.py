"""Flink's ``JobGraph.getVerticesSortedTopologicallyFromSources``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graph.job_graph import JobVertex


def sorted_topologically_from_sources(vertices: list["JobVertex"]) -> list["JobVertex"]:
    """Vertices without inputs first (in ``vertices`` order), then depth-first along the
    produced data sets, adding a vertex once none of its producers remain."""
    remaining = dict.fromkeys(vertices)
    ordered = [vertex for vertex in vertices if not vertex.inputs]
    for vertex in ordered:
        del remaining[vertex]
    position = 0
    while remaining:
        if position >= len(ordered):
            raise ValueError("The job graph is cyclic.")
        _add_nodes_without_new_predecessors(ordered[position], ordered, remaining)
        position += 1
    return ordered


def _add_nodes_without_new_predecessors(start: "JobVertex", ordered: list, remaining: dict) -> None:
    for data_set in start.produced_data_sets:
        for edge in data_set.consumers:
            vertex = edge.target
            if vertex not in remaining:
                continue
            if any(other is not edge and other.source.producer in remaining for other in vertex.inputs):
                continue
            ordered.append(vertex)
            del remaining[vertex]
            _add_nodes_without_new_predecessors(vertex, ordered, remaining)
