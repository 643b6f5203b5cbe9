"""Slot allocation with slot sharing and co-location, as Flink 2.x's default scheduler
places a streaming job.

Which subtasks share a slot follows Flink's `LocalInputPreferredSlotSharingStrategy`:
vertices are taken in topological order and each subtask joins, in this order of
preference, the shared slot of its co-location constraint (iteration head and tail), the
slot of one of its producers in the same slot sharing group (the producers of each input
in turn, each producer's slot offered to one consumer only), the first slot of its group
it is not yet in, or a new slot. So a slot holds at most one subtask of each vertex and
a group needs as many slots as its largest parallelism; over a pointwise edge (rescale)
a consumer shares the slot of a producer it reads where it can (with 2 producers and 3
consumers: consumers 0 and 2 beside producers 0 and 1, consumer 1 alone).

Shared slots take free slots in the order they were created, the TaskManagers' slots in
the order of their names: one TaskManager fills before the next, as Flink's slot manager fills
them by default (`taskmanager.load-balance.mode` NONE; `AnyMatchingResourceMatchingStrategy`).
Flink takes its TaskManagers in no fixed order (a hash map of random instance ids) and
pairs shared slots with the slots offered in no fixed order either (requests in
identity-hash order, offers as they arrive), so which groups share a TaskManager varies
from run to run there. `allocate_slots` takes this one by default (placement "ordered"),
or with a generator draws one as Flink's run would (placement "random"): the TaskManagers
in random order, each filled before the next, and the shared slots paired with the slots
taken at random.
"""

from __future__ import annotations

import re
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from graph import ExecutionGraph, ExecutionVertex
from graph.job_graph import JobVertex

from taskmgr.deployment import execution_id


#: How shared slots land on TaskManagers (`allocate_slots`).
PLACEMENTS = ("ordered", "random")


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


def execution_slot_sharing_groups(graph: ExecutionGraph) -> list[list[ExecutionVertex]]:
    """The subtasks of each shared slot, slots in the order they are created (Flink's
    `LocalInputPreferredSlotSharingStrategy`; see the module doc)."""
    return _SharedSlotBuilder(graph).build()


def slots_needed(graph: ExecutionGraph) -> int:
    """Slots the job needs: per slot sharing group, its largest parallelism."""
    return len(execution_slot_sharing_groups(graph))


def allocate_slots(graph: ExecutionGraph, offers: Sequence[SlotOffer],
                   rng: np.random.Generator | None = None) -> dict[str, SlotAssignment]:
    """The slot of every subtask, by execution id: the TaskManagers in the order of their
    names (tm-0, tm-1, ..., tm-10: not the order they registered in, which varies on Spark)
    and the shared slots in creation order, or, given `rng`, both in an order drawn from
    it as a Flink run's is (placement "random"; see the module doc)."""
    offers = sorted(offers, key=lambda offer: _natural_order(offer.task_manager))
    if rng is not None:
        offers = [offers[i] for i in rng.permutation(len(offers))]
    free = [SlotAssignment(offer.task_manager, i) for offer in offers for i in range(offer.num_slots)]
    groups = execution_slot_sharing_groups(graph)
    if len(groups) > len(free):
        raise NoResourceAvailableError(
            f"Could not acquire the minimum required resources: the job needs {len(groups)} slots, "
            f"the cluster has {len(free)} ({len(offers)} TaskManagers)")
    taken = free[:len(groups)]
    if rng is not None:
        taken = [taken[i] for i in rng.permutation(len(taken))]
    return {execution_id(subtask): slot for group, slot in zip(groups, taken) for subtask in group}


def _natural_order(name: str) -> list[str | int]:
    """A sort key ordering the numbers in names by value (tm-2 before tm-10)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def placement_rng(placement: str, seed: int) -> np.random.Generator | None:
    """The generator `allocate_slots` draws a "random" placement from, the same for every
    allocation of a run (so a restart keeps its slots unless a TaskManager was lost);
    None for "ordered"."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if placement == "ordered":
        return None
    return np.random.default_rng([seed & 0xFFFF_FFFF_FFFF_FFFF, zlib.crc32(b"slot-placement")])


class _SharedSlotBuilder:
    """Flink's `ExecutionSlotSharingGroupBuilder`: shared slots are numbered in creation order."""

    def __init__(self, graph: ExecutionGraph) -> None:
        self._graph = graph
        self._members: dict[object, list[JobVertex]] = {}
        for vertex in graph.job_graph.vertices:
            self._members.setdefault(_sharing_key(vertex), []).append(vertex)
        self._groups: list[list[ExecutionVertex]] = []
        self._group_of: dict[ExecutionVertex, int] = {}
        #: per job vertex id: the shared slots of its group it is not in yet, in creation order
        self._available: dict[str, dict[int, None]] = {}
        #: per consumed partition group (edge, producers): producers' slots not yet offered
        self._candidates: dict[tuple[int, tuple[int, ...]], deque[int]] = {}
        self._co_located: dict[tuple[int, int], int] = {}

    def build(self) -> list[list[ExecutionVertex]]:
        for vertex in self._graph.job_graph.vertices:
            subtasks = self._graph.task_vertices[vertex.id]
            remaining = []
            for subtask in subtasks:
                group = self._co_located_group(subtask)
                if group is None:
                    group = self._producer_group(subtask)
                if group is None:
                    remaining.append(subtask)
                else:
                    self._add(subtask, group)
            for subtask in remaining:
                available = self._available.get(vertex.id)
                self._add(subtask, next(iter(available)) if available else self._new_group(vertex))
            if vertex.co_location_group is not None:
                for subtask in subtasks:
                    key = (id(vertex.co_location_group), subtask.subtask_index)
                    self._co_located[key] = self._group_of[subtask]
        return self._groups

    def _co_located_group(self, subtask: ExecutionVertex) -> int | None:
        co_location = subtask.job_vertex.co_location_group
        if co_location is None:
            return None
        return self._co_located.get((id(co_location), subtask.subtask_index))

    def _producer_group(self, subtask: ExecutionVertex) -> int | None:
        vertex = subtask.job_vertex
        available = self._available.get(vertex.id, {})
        for edge, channels in zip(vertex.inputs, subtask.input_gates, strict=True):
            producers = list(dict.fromkeys(partition.producer for partition, _ in channels))
            key = (id(edge), tuple(producer.subtask_index for producer in producers))
            candidates = self._candidates.get(key)
            if candidates is None:
                candidates = self._candidates[key] = self._producer_groups(vertex, producers)
            while candidates:
                group = candidates.popleft()
                if group in available:
                    return group
        return None

    def _producer_groups(self, vertex: JobVertex, producers: list[ExecutionVertex]) -> deque[int]:
        if not producers or _sharing_key(producers[0].job_vertex) is not _sharing_key(vertex):
            return deque()
        return deque(dict.fromkeys(self._group_of[producer] for producer in producers))

    def _new_group(self, vertex: JobVertex) -> int:
        group = len(self._groups)
        self._groups.append([])
        for member in self._members[_sharing_key(vertex)]:
            self._available.setdefault(member.id, {})[group] = None
        return group

    def _add(self, subtask: ExecutionVertex, group: int) -> None:
        self._groups[group].append(subtask)
        self._group_of[subtask] = group
        self._available.get(subtask.job_vertex.id, {}).pop(group, None)


def _sharing_key(vertex: JobVertex) -> object:
    """A vertex's slot sharing group (a vertex without one shares with no other)."""
    return vertex.slot_sharing_group if vertex.slot_sharing_group is not None else vertex
