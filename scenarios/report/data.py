"""A finished run folder, loaded for reading: summary, plan, metric time series, trace.

`load_run(folder)` reads what `shufflesim run` wrote (ARCHITECTURE.md, "Outputs of a
run"). Metric series come per subtask or per vertex: a vertex's records per second are the
sum over its subtasks (the vertex's throughput, as Flink's web UI shows it), every other
metric the mean over its subtasks (as summary.json's vertex values), and its
back-pressured time for the level band the maximum (Flink's vertex level is the level of
its most back-pressured subtask).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from scenarios.outputs import (PLAN_FILE, SUMMARY_FILE, TRACE_FILE, RunFolderError, missing_run_file, read_metrics,
                               run_folder)

Aggregate = Literal["mean", "sum", "max"]

#: Samples of different subtasks taken in one sampling round differ by float noise.
_TIME_DECIMALS = 6


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise missing_run_file(path) from None
    except OSError as e:
        raise RunFolderError(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise RunFolderError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a JSON object")
    return data


def default_aggregate(metric: str) -> Aggregate:
    """How a vertex's value of `metric` combines its subtasks' values."""
    return "sum" if metric.startswith("num") and metric.endswith("PerSecond") else "mean"


class MetricSeries:
    """metrics.parquet indexed by (vertex, metric): time series per subtask or per vertex."""

    def __init__(self, table: pa.Table) -> None:
        self._t = table["t"].to_numpy()
        self._subtask = table["subtask"].to_numpy()
        self._value = table["value"].to_numpy()
        self._rows: dict[tuple[str, str], np.ndarray] = {}
        if table.num_rows == 0:
            return
        vertex = table["vertex"].combine_chunks().dictionary_encode()
        metric = table["metric"].combine_chunks().dictionary_encode()
        n_metrics = len(metric.dictionary)
        key = vertex.indices.to_numpy().astype(np.int64) * n_metrics + metric.indices.to_numpy()
        order = np.lexsort((self._t, key))
        keys, starts = np.unique(key[order], return_index=True)
        vertices, metrics = vertex.dictionary.to_pylist(), metric.dictionary.to_pylist()
        for k, rows in zip(keys, np.split(order, starts[1:])):
            self._rows[vertices[k // n_metrics], metrics[k % n_metrics]] = rows

    def has(self, vertex: str, metric: str) -> bool:
        return (vertex, metric) in self._rows

    def subtask(self, vertex: str, metric: str, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of one subtask, in time order (empty if never sampled)."""
        rows = self._rows.get((vertex, metric), np.empty(0, dtype=np.int64))
        rows = rows[self._subtask[rows] == index]
        return self._t[rows], self._value[rows]

    def vertex(self, vertex: str, metric: str, how: Aggregate | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of the vertex: its subtasks' values combined per sampling round."""
        rows = self._rows.get((vertex, metric), np.empty(0, dtype=np.int64))
        times, slot = np.unique(np.round(self._t[rows], _TIME_DECIMALS), return_inverse=True)
        values = self._value[rows]
        how = how or default_aggregate(metric)
        if how == "max":
            out = np.full(len(times), -np.inf)
            np.maximum.at(out, slot, values)
            return times, out
        out = np.zeros(len(times))
        np.add.at(out, slot, values)
        if how == "mean":
            out /= np.bincount(slot, minlength=len(times))
        return times, out


@dataclass
class Run:
    """One run folder: summary.json, plan.json (None if absent), the metric series, the trace."""

    folder: Path
    summary: dict[str, Any]
    plan: dict[str, Any] | None
    metrics: MetricSeries
    trace: Path | None
    #: How reports and comparisons name the run; by default its folder's name.
    label: str = ""

    def __post_init__(self) -> None:
        self.label = self.label or self.folder.name or str(self.folder)

    @property
    def vertices(self) -> list[dict[str, Any]]:
        """summary.json's vertices (name, parallelism, backpressure_level, metrics, subtasks)."""
        return self.summary.get("vertices", [])

    @property
    def settings(self) -> dict[str, Any]:
        """The scenario's settings as the run recorded them (empty for runs made before that)."""
        return self.summary.get("settings", {})


def load_summary(folder: Path | str) -> dict[str, Any]:
    """The summary.json of a run folder; `RunFolderError` names what is missing or broken."""
    return _read_json(run_folder(folder) / SUMMARY_FILE)


def load_run(folder: Path | str) -> Run:
    """Read a run folder; `RunFolderError` names what is missing or broken."""
    folder = run_folder(folder)
    summary = load_summary(folder)
    plan = _read_json(folder / PLAN_FILE) if (folder / PLAN_FILE).exists() else None
    metrics = MetricSeries(read_metrics(folder))
    trace = folder / TRACE_FILE
    return Run(folder, summary, plan, metrics, trace if trace.exists() else None)


def bucket_mean(t: np.ndarray, v: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` points: consecutive samples averaged (keeps stacked sums exact)."""
    if len(t) <= max_points:
        return t, v
    edges = np.linspace(0, len(t), max_points + 1).astype(np.int64)
    counts = np.diff(edges)
    return np.add.reduceat(t, edges[:-1]) / counts, np.add.reduceat(v, edges[:-1]) / counts


def bucket_extremes(t: np.ndarray, v: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` points of a step series: the minimum and maximum of each stretch."""
    if len(t) <= max_points:
        return t, v
    edges = np.linspace(0, len(t), max_points // 2 + 1).astype(np.int64)[:-1]
    lows, highs = np.minimum.reduceat(v, edges), np.maximum.reduceat(v, edges)
    ends = np.append(edges[1:], len(t)) - 1
    times = np.column_stack((t[edges], t[ends])).ravel()
    values = np.column_stack((lows, highs)).ravel()
    return times, values


#: The units of summary.json's settings, as tables of them say.
SETTINGS_UNITS = "times in seconds, sizes in bytes, bandwidth in bytes per second"


def flat_settings(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Settings as dotted keys, as `--set` names them: `network.buffer_timeout`, `job.stages[Map].cost`."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= flat_settings(value, f"{path}.")
        elif isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
            for i, item in enumerate(value):
                flat |= flat_settings(item, f"{path}[{item.get('name') or i}].")
        else:
            flat[path] = value
    return flat
