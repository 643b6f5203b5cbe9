"""When the periodic checkpoint scheduler runs (Flink 2.x's
`ExecutionTrackingCheckpointCoordinatorDeActivator`, which `CheckpointCoordinator.
createActivatorDeactivator` picks for a job whose outputs are all pipelined, FLIP-331).

The scheduler starts once the job runs and every task of it is RUNNING or FINISHED, and
stops as soon as the job stops running (it failed, or it ended) or a task leaves those
states (cancelled, failed, or deployed again). Stopping fails what is pending or queued
with `CHECKPOINT_COORDINATOR_SUSPEND`, so no checkpoint starts while a task is not there
to take it, and none is left waiting for a task that is gone.

Flink follows the execution attempts for the job's whole life; here one deactivator
follows one attempt of the job (a restart deploys every task again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from taskmgr.execution_state import ExecutionState

#: The task states in which the scheduler may run.
_STARTED = (ExecutionState.RUNNING, ExecutionState.FINISHED)


class CheckpointScheduler(Protocol):
    """What the deactivator starts and stops (the CheckpointCoordinator)."""

    def start_checkpoint_scheduler(self) -> None: ...

    def stop_checkpoint_scheduler(self) -> None: ...


class ExecutionTrackingCheckpointCoordinatorDeActivator:
    def __init__(self, coordinator: CheckpointScheduler, executions: Mapping[str, ExecutionState]) -> None:
        """`executions`: the attempt's tasks (execution id) and their states now."""
        self.coordinator = coordinator
        self.pending_executions = {eid for eid, state in executions.items() if state not in _STARTED}
        self.job_running = False
        self.started = False

    def job_status_changes(self, running: bool) -> None:
        """The job runs (Flink's JobStatus.RUNNING), or no longer does."""
        self.job_running = running
        self._maybe_start_or_stop_checkpoint_scheduler()

    def on_state_update(self, execution_id: str, state: ExecutionState) -> None:
        if state in _STARTED:
            self.pending_executions.discard(execution_id)
        else:
            self.pending_executions.add(execution_id)
        self._maybe_start_or_stop_checkpoint_scheduler()

    def _maybe_start_or_stop_checkpoint_scheduler(self) -> None:
        if self.job_running and not self.pending_executions:
            if not self.started:
                self.started = True
                self.coordinator.start_checkpoint_scheduler()
        elif self.started:
            self.started = False
            self.coordinator.stop_checkpoint_scheduler()
