"""Where a scenario's subtasks will run, known before it runs (`shufflesim plan`, plan.json).

The slots are the ones the JobManager deploys the job into: `taskmgr.scheduler` allocates
them on the cluster's TaskManagers (`tm-0`, `tm-1`, ..., `slots_per_task_manager` slots
each) as `cluster.placement` says, drawn from the scenario's seed when "random". A channel
is local when its producer runs on the consumer's TaskManager and remote otherwise
(`taskmgr.deployment.channel_locality`), which decides what inPoolUsage counts. That is
the placement of the job's first attempt; a restart allocates again on the TaskManagers
still registered, the same placement unless a fault ended one.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace
from typing import Any

from graph import ExecutionGraph, StreamExecutionEnvironment, plan_json
from scenarios.scenario_file import Scenario
from taskmgr.deployment import channel_locality, execution_id
from taskmgr.faults import ENDS_TASK_MANAGER
from taskmgr.scheduler import NoResourceAvailableError, SlotOffer, allocate_slots, placement_rng
from taskmgr.taskmanager import task_manager_name

#: What the text ends with: why the split into local and remote channels matters.
LOCALITY_NOTE = ("A channel is local when its producer runs on the same TaskManager, remote otherwise; "
                 "inPoolUsage and the input buffer gauges count remote channels only.")


@dataclass(frozen=True)
class SubtaskPlacement:
    """One subtask's slot and, per input gate, its (local, remote) channels."""

    name: str
    vertex: str
    subtask: int
    task_manager: str
    slot: int
    gates: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class PlacementPlan:
    """The placement of a scenario's job; `error`: the job does not fit the cluster;
    `unknown_after`: why later attempts may be placed otherwise (None: they are not)."""

    policy: str
    seed: int
    task_managers: tuple[str, ...]
    slots_per_task_manager: int
    subtasks: tuple[SubtaskPlacement, ...] = ()
    error: str | None = None
    unknown_after: str | None = None

    def to_json(self) -> dict[str, Any]:
        """plan.json's `placement`."""
        return {
            "policy": self.policy, "seed": self.seed, "task_managers": list(self.task_managers),
            "slots_per_task_manager": self.slots_per_task_manager, "error": self.error,
            "unknown_after": self.unknown_after,
            "subtasks": [{"vertex": s.vertex, "subtask": s.subtask, "task_manager": s.task_manager, "slot": s.slot,
                          "gates": [{"local": local, "remote": remote} for local, remote in s.gates]}
                         for s in self.subtasks],
        }

    def render(self) -> str:
        """The section `shufflesim plan` prints: subtasks by TaskManager and slot, and their
        gates' local and remote channels."""
        seed = f", seed {self.seed}" if self.policy == "random" else ""
        lines = [f'Placement (cluster.placement = "{self.policy}"{seed}; '
                 f"{_count(len(self.task_managers), 'TaskManager')}, "
                 f"{_count(self.slots_per_task_manager, 'slot')} each)"]
        if self.error is not None:
            return "\n".join([*lines, f"  none: {self.error}"])
        for task_manager in self.task_managers:
            mine = [s for s in self.subtasks if s.task_manager == task_manager]
            lines.append(f"  {task_manager}" + ("" if mine else "  (no subtask)"))
            for slot in sorted({s.slot for s in mine}):
                for i, subtask in enumerate(s for s in mine if s.slot == slot):
                    head = f"slot {slot}" if i == 0 else ""
                    gates = "; ".join(f"gate {g}: {local} local, {remote} remote"
                                      for g, (local, remote) in enumerate(subtask.gates))
                    lines.append(f"    {head:<8}{subtask.name}" + (f"   {gates}" if gates else ""))
        for note in (LOCALITY_NOTE, self.unknown_after):
            if note is not None:
                lines += textwrap.wrap(note, 100, initial_indent="  ", subsequent_indent="  ")
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def plan_placement(scenario: Scenario, graph: ExecutionGraph) -> PlacementPlan:
    """Where the scenario's job will run: the slots its JobManager allocates on a cluster of
    the scenario's TaskManagers, as `taskmgr.jobmanager` does when it submits the job."""
    cluster = scenario.cluster
    names = tuple(task_manager_name(i) for i in range(cluster.task_managers))
    plan = PlacementPlan(cluster.placement, scenario.seed, names, cluster.slots_per_task_manager)
    offers = [SlotOffer(name, cluster.slots_per_task_manager) for name in names]
    try:
        slots = allocate_slots(graph, offers, placement_rng(cluster.placement, scenario.seed))
    except NoResourceAvailableError as e:
        return replace(plan, error=str(e))
    task_manager_of = {eid: slot.task_manager for eid, slot in slots.items()}
    subtasks = tuple(
        SubtaskPlacement(vertex.name, vertex.job_vertex.name, vertex.subtask_index,
                         slots[execution_id(vertex)].task_manager, slots[execution_id(vertex)].slot_index,
                         tuple(channel_locality(vertex, task_manager_of)))
        for vertex in graph.all_execution_vertices)
    return replace(plan, subtasks=subtasks, unknown_after=_unknown_after(scenario))


def scenario_plan_json(scenario: Scenario, env: StreamExecutionEnvironment) -> dict[str, Any]:
    """plan.json of a scenario: its program's plan (`graph.plan_json`) and its `placement`."""
    return plan_json(env) | {"placement": plan_placement(scenario, env.get_execution_graph()).to_json()}


def _unknown_after(scenario: Scenario) -> str | None:
    """Why the placement after a restart cannot be known before running, or None: the job
    does not restart, or no fault can end a TaskManager (a restart then keeps the placement)."""
    if not scenario.restart_strategy().resolve(scenario.checkpoints.enabled).restarts:
        return None
    ending = [f"faults[{i}] ({fault.kind} at {fault.at:g} s)" for i, fault in enumerate(scenario.faults)
              if fault.kind in ENDS_TASK_MANAGER
              and (fault.kind != "block_task" or scenario.cluster.task_cancellation_timeout > 0)]
    if not ending:
        return None
    return (f"This is the first attempt's placement: {' and '.join(ending)} can end a TaskManager, and a "
            "restart after that places the job on the TaskManagers left, known only by running "
            "(summary.json gives each subtask's task_manager).")
