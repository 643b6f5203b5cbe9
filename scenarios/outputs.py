"""The files a run writes into its output folder (ARCHITECTURE.md, "Outputs of a run").

`plan.json`, `summary.json`, `metrics.parquet` (schema `taskmgr.metrics.table.SCHEMA`:
t float64, vertex string, subtask int32, task_manager string, metric string, value
float64), `trace.jsonl` (one event per line; `shuffle.trace.Tracer` can stream into
`out_dir / TRACE_FILE` directly), and `trace_to_perfetto` to view a trace in Perfetto or
chrome://tracing.
"""

from __future__ import annotations

import json
import math
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


def write_metrics(out_dir: Path, metrics: pa.Table) -> Path:
    """`metrics.parquet`: one row per (t, vertex, subtask, metric), in the fixed schema."""
    path = Path(out_dir) / METRICS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(metrics.select(SCHEMA.names).cast(SCHEMA), path)
    return path


def read_metrics(out_dir: Path) -> pa.Table:
    """The metric table of a finished run."""
    return pq.read_table(Path(out_dir) / METRICS_FILE, schema=SCHEMA)


def write_trace(out_dir: Path, events: Iterable[Mapping[str, Any]]) -> Path:
    """`trace.jsonl` from events collected in memory, one JSON object per line."""
    path = Path(out_dir) / TRACE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        for event in events:
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    return path


# --- Chrome / Perfetto trace-event format ------------------------------------------------

_OPENS = ("_started", "_triggered")
_CLOSES = "_completed"
_LANE_FIELDS = ("channel", "gate", "task")


class _Lanes:
    """Process ids per TaskManager and thread ids per lane (channel, gate or task), with names."""

    def __init__(self) -> None:
        self.pids: dict[str, int] = {}
        self.tids: dict[tuple[int, str], int] = {}
        self.metadata: list[dict[str, Any]] = []

    def of(self, event: Mapping[str, Any]) -> tuple[int, int]:
        process = str(event.get("tm", "job"))
        lane = next((str(event[f]) for f in _LANE_FIELDS if f in event), "job")
        if process not in self.pids:
            self.pids[process] = len(self.pids)
            self._name("process_name", self.pids[process], 0, process)
        pid = self.pids[process]
        if (pid, lane) not in self.tids:
            self.tids[pid, lane] = len(self.tids) + 1
            self._name("thread_name", pid, self.tids[pid, lane], lane)
        return pid, self.tids[pid, lane]

    def _name(self, kind: str, pid: int, tid: int, name: str) -> None:
        self.metadata.append({"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}})


def _span_name(event_name: str, suffixes: tuple[str, ...]) -> str | None:
    for suffix in suffixes:
        if event_name.endswith(suffix):
            return event_name[: -len(suffix)]
    return None


def _args(event: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in event.items() if key not in ("t", "event")}


def _trace_event(event: Mapping[str, Any], lanes: _Lanes, ph: str, **extra: Any) -> dict[str, Any]:
    pid, tid = lanes.of(event)
    chrome = {"name": event["event"], "ph": ph, "ts": event["t"] * 1e6, "pid": pid, "tid": tid}
    return chrome | {"args": _args(event)} | extra


def perfetto_events(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chrome trace events of trace.jsonl events.

    `X_started` (or `X_triggered`) ... `X_completed` on the same lane with the same
    `checkpoint_id` become one duration event named X (alignments, checkpoints); every
    other event is an instant event on its lane: the channel, gate or task it names, in one
    process per TaskManager. Spans never completed stay visible as instant events.
    """
    lanes = _Lanes()
    open_spans: dict[tuple[str, tuple[int, int], Any], Mapping[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for event in events:
        name = event["event"]
        key = (lanes.of(event), event.get("checkpoint_id"))
        opened = _span_name(name, _OPENS)
        if opened is not None:
            open_spans[(opened, *key)] = event
            continue
        closed = _span_name(name, (_CLOSES,))
        start = open_spans.pop((closed, *key), None) if closed else None
        if start is None:
            out.append(_trace_event(event, lanes, "i", s="t"))
        else:
            duration = (event["t"] - start["t"]) * 1e6
            args = _args(start) | _args(event)
            out.append(_trace_event(start, lanes, "X", name=closed, dur=duration, args=args))
    out.extend(_trace_event(span, lanes, "i", s="t") for span in open_spans.values())
    return lanes.metadata + out


def trace_to_perfetto(trace_jsonl_path: Path, out_path: Path) -> Path:
    """Convert `trace.jsonl` to a Chrome trace-event JSON file (open it in ui.perfetto.dev)."""
    with open(trace_jsonl_path) as f:
        events = [json.loads(line) for line in f if line.strip()]
    out_path = Path(out_path)
    out_path.write_text(json.dumps({"traceEvents": perfetto_events(events), "displayTimeUnit": "ms"}))
    return out_path
