"""Steady-state summary of a run's metrics: the ``vertices`` part of ``summary.json``.

The steady state of a metric is its mean over the second half of the run (samples with
``t >= end / 2``), per (vertex, subtask, metric); a vertex's value is the mean over its
subtasks; its backpressure level is the level of its most backpressured subtask (spec 7.4).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from taskmgr.metrics.backpressure import vertex_backpressure_level

BACKPRESSURE_METRIC = "backPressuredTimeMsPerSecond"


@dataclass(frozen=True)
class VertexLayout:
    """A job vertex by its JobGraph name, and the TaskManager of each subtask (by index)."""

    name: str
    task_managers: Sequence[str]


def steady_state(metrics: pa.Table, end: float | None = None) -> dict[tuple[str, int, str], float]:
    """Mean of each (vertex, subtask, metric) over samples with ``t >= end / 2``.

    ``end`` is the run's duration in the table's time; by default the last sample time.
    """
    if metrics.num_rows == 0:
        return {}
    if end is None:
        end = pc.max(metrics["t"]).as_py()
    half = metrics.filter(pc.greater_equal(metrics["t"], end / 2))
    means = half.group_by(["vertex", "subtask", "metric"]).aggregate([("value", "mean")])
    return {
        (vertex, subtask, metric): value
        for vertex, subtask, metric, value in zip(
            *(means[c].to_pylist() for c in ("vertex", "subtask", "metric", "value_mean"))
        )
    }


def vertex_summaries(
    metrics: pa.Table, vertices: Sequence[VertexLayout], end: float | None = None
) -> list[dict[str, Any]]:
    """The ``vertices`` list of ``summary.json``, in the order of ``vertices``."""
    per_subtask: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for (vertex, subtask, metric), value in steady_state(metrics, end).items():
        per_subtask[vertex, subtask][metric] = value
    summaries = []
    for layout in vertices:
        subtasks = [
            {"index": i, "task_manager": tm, "metrics": dict(sorted(per_subtask[layout.name, i].items()))}
            for i, tm in enumerate(layout.task_managers)
        ]
        by_metric: dict[str, list[float]] = defaultdict(list)
        for subtask in subtasks:
            for metric, value in subtask["metrics"].items():
                by_metric[metric].append(value)
        ratios = [
            s["metrics"][BACKPRESSURE_METRIC] / 1000.0 for s in subtasks if BACKPRESSURE_METRIC in s["metrics"]
        ]
        summaries.append(
            {
                "name": layout.name,
                "parallelism": len(layout.task_managers),
                "backpressure_level": vertex_backpressure_level(ratios).value,
                "metrics": {metric: fmean(values) for metric, values in sorted(by_metric.items())},
                "subtasks": subtasks,
            }
        )
    return summaries


def subtask_max(vertex: dict[str, Any], metric: str) -> float | None:
    """The largest steady-state value of `metric` over a ``vertices`` entry's subtasks (as
    Flink's web UI shows back-pressured and busy time per job vertex), None if none has it."""
    values = [s["metrics"][metric] for s in vertex["subtasks"] if metric in s["metrics"]]
    return max(values) if values else None
