"""Which tasks a checkpoint triggers and waits for (Flink's `DefaultCheckpointPlanCalculator`
and `CheckpointPlan`, FLIP-147).

While every task runs, a checkpoint triggers the source tasks and waits for every task.
Once some tasks have finished (`execution.checkpointing.checkpoints-after-tasks-finish`,
default true), it triggers the running tasks that have no running predecessor, waits for
every running task and counts the finished ones as finished: they acknowledge nothing.
With the option off, no checkpoint is triggered after a task finished
(`NOT_ALL_REQUIRED_TASKS_RUNNING`).

Flink decides per job vertex first: a vertex none of whose tasks can be triggered is one
with an ALL_TO_ALL input from a vertex that still has a running task, or a POINTWISE
input from a vertex whose tasks all run; otherwise each running task is triggered unless
a producer it reads through a POINTWISE input still runs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from graph import ExecutionGraph, JobVertex
from taskmgr.deployment import execution_id

#: Flink's CheckpointFailureReason when tasks are not all running (the option is off).
NOT_ALL_REQUIRED_TASKS_RUNNING = "NOT_ALL_REQUIRED_TASKS_RUNNING"


class CheckpointPlanError(Exception):
    """No checkpoint can be planned now; the message starts with Flink's failure reason."""


@dataclass(frozen=True)
class CheckpointPlan:
    """Execution ids: where the checkpoint starts, who must acknowledge it, who has finished."""

    tasks_to_trigger: tuple[str, ...]
    tasks_to_wait_for: tuple[str, ...]
    finished_tasks: tuple[str, ...]
    #: Names of the job vertices all of whose tasks have finished.
    fully_finished_vertices: tuple[str, ...]


class DefaultCheckpointPlanCalculator:
    def __init__(self, graph: ExecutionGraph, allow_checkpoints_after_tasks_finished: bool) -> None:
        self.graph = graph
        self.allow_checkpoints_after_tasks_finished = allow_checkpoints_after_tasks_finished
        self.vertices: list[JobVertex] = list(graph.job_graph.vertices)  # topological order

    def _tasks(self, vertex: JobVertex) -> list[str]:
        return [execution_id(ev) for ev in self.graph.task_vertices[vertex.id]]

    def calculate_checkpoint_plan(self, finished: Collection[str]) -> CheckpointPlan:
        """The plan given the finished execution ids; `CheckpointPlanError` if none is allowed."""
        if not finished:
            return CheckpointPlan(
                tuple(eid for vertex in self.vertices if vertex.is_input_vertex for eid in self._tasks(vertex)),
                tuple(eid for vertex in self.vertices for eid in self._tasks(vertex)), (), ())
        if not self.allow_checkpoints_after_tasks_finished:
            raise CheckpointPlanError(f"{NOT_ALL_REQUIRED_TASKS_RUNNING}: some tasks of the job have finished "
                                      "(checkpoints_after_tasks_finish = false)")
        return self._calculate_after_tasks_finished(set(finished))

    def _calculate_after_tasks_finished(self, finished: set[str]) -> CheckpointPlan:
        running = {vertex.id: [eid not in finished for eid in self._tasks(vertex)] for vertex in self.vertices}
        to_trigger: list[str] = []
        to_wait_for: list[str] = []
        finished_tasks: list[str] = []
        fully_finished: list[str] = []
        for vertex in self.vertices:
            tasks, status = self._tasks(vertex), running[vertex.id]
            if not any(status):
                fully_finished.append(vertex.name)
                finished_tasks.extend(tasks)
                continue
            may_trigger = not any(self._has_active_upstream_vertex(edge.distribution_pattern,
                                                                   running[edge.source_vertex.id])
                                  for edge in vertex.inputs)
            for subtask, eid in enumerate(tasks):
                if not status[subtask]:
                    finished_tasks.append(eid)
                    continue
                to_wait_for.append(eid)
                if may_trigger and not self._has_running_pointwise_producer(vertex, subtask, running):
                    to_trigger.append(eid)
        return CheckpointPlan(tuple(to_trigger), tuple(to_wait_for), tuple(finished_tasks), tuple(fully_finished))

    @staticmethod
    def _has_active_upstream_vertex(pattern: str, upstream_running: list[bool]) -> bool:
        """Every task of the vertex has a running predecessor through this input."""
        if pattern == "ALL_TO_ALL":
            return any(upstream_running)
        return all(upstream_running)

    def _has_running_pointwise_producer(self, vertex: JobVertex, subtask: int, running: dict[str, list[bool]]) -> bool:
        execution_vertex = self.graph.task_vertices[vertex.id][subtask]
        for edge, gate in zip(vertex.inputs, execution_vertex.input_gates, strict=True):
            if edge.distribution_pattern != "POINTWISE":
                continue
            for partition, _ in gate:
                producer = partition.producer
                if running[producer.job_vertex.id][producer.subtask_index]:
                    return True
        return False
