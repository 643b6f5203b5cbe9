"""Flink's readings beside a shufflesim run's steady state, subtask by subtask."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scenarios.flink_reference.runner import LATENCY, METRICS

#: What the table shows, in this order (each where either side has it).
SHOWN = tuple(m for m in METRICS if not m.startswith("numBytes")) + tuple(LATENCY.values())


def _ours(summary: Mapping[str, Any] | None) -> dict[tuple[str, int], Mapping[str, float]]:
    if summary is None:
        return {}
    return {(vertex["name"], subtask["index"]): subtask["metrics"]
            for vertex in summary["vertices"] for subtask in vertex["subtasks"]}


def format_table(flink: Mapping[str, Mapping[int, Mapping[str, float]]],
                 summary: Mapping[str, Any] | None = None) -> str:
    """One line per subtask and metric: Flink's mean reading, and ours (steady state) if given."""
    ours = _ours(summary)
    header = f"{'subtask':<34} {'metric':<34} {'flink':>12}" + (f" {'shufflesim':>12}" if summary else "")
    lines = [header]
    for vertex, subtasks in flink.items():
        for index, metrics in sorted(subtasks.items(), key=lambda item: int(item[0])):
            mine = ours.get((vertex, int(index)), {})
            for metric in SHOWN:
                if metric not in metrics and metric not in mine:
                    continue
                line = f"{f'{vertex} ({index})':<34} {metric:<34} {_show(metrics.get(metric)):>12}"
                lines.append(line + (f" {_show(mine.get(metric)):>12}" if summary else ""))
    return "\n".join(lines)


def _show(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}" if abs(value) < 1e6 else f"{value:.0f}"
