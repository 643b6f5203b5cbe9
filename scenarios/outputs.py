"""The files a run writes into its output folder (ARCHITECTURE.md, "Outputs of a run").

`plan.json`, `summary.json`, `metrics.parquet` (schema `taskmgr.metrics.table.SCHEMA`:
t float64, vertex string, subtask int32, task_manager string, metric string, value
float64), `trace.jsonl` (one event per line; `shuffle.trace.Tracer` can stream into
`out_dir / TRACE_FILE` directly). Made from these afterwards: `report.html`
(`scenarios.report`) and `trace.perfetto.json` (`scenarios.perfetto`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from taskmgr.metrics.table import SCHEMA

PLAN_FILE = "plan.json"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.parquet"
TRACE_FILE = "trace.jsonl"


class RunFolderError(ValueError):
    """A run folder lacks a file, or a file cannot be read; the message names it."""


def _json_safe(value: Any) -> Any:
    """NaN and infinities become null: summary.json stays valid JSON for every reader."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def _write_json(path: Path, data: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(data), indent=2, allow_nan=False) + "\n")
    return path


def write_plan(out_dir: Path, plan: Mapping[str, Any]) -> Path:
    """`plan.json`: the execution plan and the JobGraph as the compiler describes them."""
    return _write_json(Path(out_dir) / PLAN_FILE, plan)


def write_summary(out_dir: Path, summary: Mapping[str, Any]) -> Path:
    """`summary.json` (vertices, checkpoints, record counts, invariants)."""
    return _write_json(Path(out_dir) / SUMMARY_FILE, summary)


def steady_state_window(summary: Mapping[str, Any]) -> str:
    """What the steady state of a summary.json is the mean of, in words: the second half of the
    run, or for a run that ended before its duration (`steady_state_from_s`) of what ran."""
    start = summary.get("steady_state_from_s")
    if start is None:
        return "the second half of the run"
    return (f"the samples from {start:.3f} s on: the second half of the {summary['duration_s']:.3f} s "
            "that ran (it ended before its duration)")


#: The figures `checkpoint_figures` gives, in order: what a run's checkpoints came to.
CHECKPOINT_FIGURES = ("checkpoints_completed", "checkpoints_failed", "checkpoints_in_progress",
                      "checkpoint_duration_p50_ms", "checkpoint_duration_max_ms")


#: The figures `latency_figures` gives: a run's end-to-end latency over all its sinks.
LATENCY_FIGURES = ("latency_p50_ms", "latency_p99_ms")


def latency_figures(summary: Mapping[str, Any]) -> dict[str, float]:
    """summary.json's `latency_ms` (all sinks, steady state) as `LATENCY_FIGURES`; empty where
    no record reached a sink then: what a sweep's table and results show of latency."""
    latency = summary.get("latency_ms")
    return dict(zip(LATENCY_FIGURES, (latency["p50"], latency["p99"]))) if latency else {}


def checkpoint_figures(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """A run's checkpoints in a few numbers (`CHECKPOINT_FIGURES`): how many completed, failed
    and were still in progress at the end, and the completed ones' median and longest
    end-to-end duration (None without any); empty for a run that took none. The one
    reading of summary.json's `checkpoints` that the run's table, `compare` and a sweep's
    results share, so that comparing checkpoint modes shows what they changed."""
    checkpoints = summary.get("checkpoints") or []
    if not checkpoints:
        return {}
    durations = [c["duration_ms"] for c in checkpoints if c["status"] == "COMPLETED"]
    failed = sum(c["status"] == "FAILED" for c in checkpoints)
    return dict(zip(CHECKPOINT_FIGURES, (
        len(durations), failed, len(checkpoints) - len(durations) - failed,
        statistics.median(durations) if durations else None, max(durations) if durations else None)))


def write_metrics(out_dir: Path, metrics: pa.Table) -> Path:
    """`metrics.parquet`: one row per (t, vertex, subtask, metric), in the fixed schema."""
    path = Path(out_dir) / METRICS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(metrics.select(SCHEMA.names).cast(SCHEMA), path)
    return path


def run_folder(folder: Path | str) -> Path:
    """`folder` if it is a folder; else the `RunFolderError` of a RUN_DIR argument that is none."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "a file, not a folder" if folder.exists() else "no such folder"
        raise RunFolderError(f"{folder}: {what} (give the --out folder of a 'shufflesim run')")
    return folder


def missing_run_file(path: Path) -> RunFolderError:
    """The error for a run file that is not there; a folder holding runs (a sweep's) names one."""
    folder = path.parent
    inside = sorted(folder.glob(f"*/{SUMMARY_FILE}")) or sorted(folder.glob(f"*/*/{SUMMARY_FILE}"))
    hint = f"{folder} holds runs: give one, e.g. {inside[0].parent}" if inside else \
        f"is {folder} the --out folder of a run?"
    return RunFolderError(f"{path}: no such file ({hint})")


def read_metrics(out_dir: Path) -> pa.Table:
    """The metric table of a finished run; `RunFolderError` if it is missing or unreadable."""
    path = Path(out_dir) / METRICS_FILE
    if not path.is_file():
        raise missing_run_file(path)
    try:
        return pq.read_table(path, schema=SCHEMA)
    except (OSError, pa.ArrowException) as e:
        raise RunFolderError(f"{path}: cannot read: {e}") from None


def write_trace(out_dir: Path, events: Iterable[Mapping[str, Any]]) -> Path:
    """`trace.jsonl` from events collected in memory, one JSON object per line."""
    path = Path(out_dir) / TRACE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        for event in events:
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    return path


def failure_origin(failure: Mapping[str, Any]) -> str:
    """Where and when the failure of summary.json's `failure` came from, as " at T s in TASK
    on TM" (" at T s (the job, not a task)" for a failure of no task); empty when it does not say."""
    at = f" at {failure['failed_at_s']:.3f} s" if failure.get("failed_at_s") is not None else ""
    if failure.get("task") is None:
        return f"{at} (the job, not a task)" if at else ""
    return f"{at} in {failure['task']} on {failure['task_manager']}"
