"""ExecutionState: the life of one subtask attempt (Flink's `ExecutionState`).

A module of its own so that the JobManager follows task states without importing the
Task (and through it the operators).
"""

from __future__ import annotations

import enum


class ExecutionState(str, enum.Enum):
    DEPLOYING = "DEPLOYING"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    #: The JobManager asked it to cancel and waits for it to end (set by the JobManager only).
    CANCELING = "CANCELING"
    FINISHED = "FINISHED"
    CANCELED = "CANCELED"
    FAILED = "FAILED"

    @property
    def is_terminal(self) -> bool:
        return self in (ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED)
