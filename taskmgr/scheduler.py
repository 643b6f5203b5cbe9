"""Slot allocation with slot sharing and co-location, as Flink schedules a streaming job by default.

Subtasks of the vertices of one slot sharing group share slots: shared slot i holds
subtask i of every vertex of the group, so a slot holds at most one subtask of each
vertex and a group needs as many slots as its largest parallelism. Co-located vertices
(iteration head and tail) are in one group, so subtask i of each lands in the same slot.
Shared slots are requested group by group in topological order and take free slots in
TaskManager registration order (the first TaskManager fills up first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from graph import ExecutionGraph

from taskmgr.deployment import execution_id


class NoResourceAvailableError(RuntimeError):
    """The cluster has fewer slots than the job needs (Flink's NoResourceAvailableException)."""


@dataclass(frozen=True)
class SlotOffer:
    """What a registered TaskManager offers: its id and number of slots."""

    task_manager: str
    num_slots: int


@dataclass(frozen=True)
class SlotAssignment:
    task_manager: str
    slot_index: int


def slots_needed(graph: ExecutionGraph) -> int:
    """Slots the job needs: per slot sharing group, its largest parallelism."""
    return sum(max(v.parallelism for v in vertices) for vertices in _sharing_groups(graph))


def _sharing_groups(graph: ExecutionGraph) -> list[list]:
    groups: dict[int, list] = {}
    for vertex in graph.job_graph.vertices:
        key = id(vertex.slot_sharing_group) if vertex.slot_sharing_group is not None else id(vertex)
        groups.setdefault(key, []).append(vertex)
    return list(groups.values())


def allocate_slots(graph: ExecutionGraph, offers: Sequence[SlotOffer]) -> dict[str, SlotAssignment]:
    """The slot of every subtask, by execution id."""
    free = [SlotAssignment(offer.task_manager, i) for offer in offers for i in range(offer.num_slots)]
    needed = slots_needed(graph)
    if needed > len(free):
        raise NoResourceAvailableError(
            f"Could not acquire the minimum required resources: the job needs {needed} slots, "
            f"the cluster has {len(free)} ({len(offers)} TaskManagers)")
    placement: dict[str, SlotAssignment] = {}
    next_free = iter(free)
    for vertices in _sharing_groups(graph):
        shared = [next(next_free) for _ in range(max(v.parallelism for v in vertices))]
        for vertex in vertices:
            for subtask in graph.task_vertices[vertex.id]:
                placement[execution_id(subtask)] = shared[subtask.subtask_index]
    return placement
