"""Flink's web UI backpressure classification (spec 7.4, 1.13+)."""

from __future__ import annotations

import enum
from collections.abc import Iterable

OK_MAX_RATIO = 0.10
LOW_MAX_RATIO = 0.5


class BackpressureLevel(str, enum.Enum):
    OK = "ok"
    LOW = "low"
    HIGH = "high"


def backpressure_level(ratio: float) -> BackpressureLevel:
    """Level of one subtask: ratio = backPressuredTimeMsPerSecond / 1000.

    OK <= 0.10 < LOW <= 0.5 < HIGH.
    """
    if ratio <= OK_MAX_RATIO:
        return BackpressureLevel.OK
    if ratio <= LOW_MAX_RATIO:
        return BackpressureLevel.LOW
    return BackpressureLevel.HIGH


def vertex_backpressure_level(subtask_ratios: Iterable[float]) -> BackpressureLevel:
    """Level of a job vertex: the level of its maximum subtask ratio (OK without subtasks)."""
    return backpressure_level(max(subtask_ratios, default=0.0))
