"""`shufflesim trace RUN_DIR`: a run as a Chrome / Perfetto trace-event JSON file.

Open `trace.perfetto.json` in ui.perfetto.dev (or chrome://tracing). One process per
TaskManager (plus "job" for events of no TaskManager), and in it:

- one track per task (`SlowMap -> Sink: Writer (1/2)`, Flink's naming) with, per metric
  sample period of metrics.parquet, a `busy`, a `back-pressured` and an `idle` slice as
  long as the task spent in each state during that period. The metrics give totals per
  period, not the order: the slices are laid out busy first, then back-pressured, then
  idle. Counters `outPoolUsage` and `inPoolUsage` per task, one value per period;
- with trace.jsonl, per channel (`ds0#0#1`): a `send` track in the producer's
  TaskManager (`buffer_sent` slices, `credit_received` instants) and a `receive` track in
  the consumer's (`buffer_received` slices, `partition_request` and `credit_announced`
  instants), a flow arrow from each buffer's send to its receive (matched by channel and
  sequence number), the buffers in flight as async slices, and counters `credit`
  (available to the sender), `backlog` and `in flight` (`scenarios.channels`);
- `X_started` / `X_triggered` ... `X_completed` of one checkpoint on one lane (alignments,
  checkpoints) as one slice named X; every other event as an instant on its lane.

Trace events follow the Trace Event Format: `ts`/`dur` in microseconds, `ph` "X" complete
slices (nested per thread, as Perfetto requires), "i" instants, "C" counters, "b"/"e"
async slices, "s"/"f" flow events binding to the slices that enclose them, "M" names.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from scenarios.channels import ChannelTimeline, apply_event, channel_timelines, read_trace
from scenarios.outputs import TRACE_FILE, read_metrics, run_folder

PERFETTO_FILE = "trace.perfetto.json"
#: How long a `buffer_sent` / `buffer_received` slice is drawn (µs); shorter if the next
#: one on its track comes sooner, so slices never overlap.
MARK_US = 1.0
TASK_STATES = (("busy", "busyTimeMsPerSecond"), ("back-pressured", "backPressuredTimeMsPerSecond"),
               ("idle", "idleTimeMsPerSecond"))
TASK_COUNTERS = ("outPoolUsage", "inPoolUsage")
SENDER_EVENTS = frozenset({"buffer_sent", "credit_received", "barrier_sent"})
_OPENS = ("_started", "_triggered")
_CLOSES = "_completed"
FLOW_CAT = "buffer"


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


class _Lanes:
    """Process ids per TaskManager and thread ids per lane, with their name metadata."""

    def __init__(self) -> None:
        self.pids: dict[str, int] = {}
        self.tids: dict[tuple[int, str], int] = {}
        self.metadata: list[dict[str, Any]] = []

    def pid(self, process: str) -> int:
        if process not in self.pids:
            self.pids[process] = len(self.pids) + 1
            self._name("process_name", self.pids[process], 0, process)
        return self.pids[process]

    def of(self, process: str, lane: str) -> tuple[int, int]:
        pid = self.pid(process)
        if (pid, lane) not in self.tids:
            self.tids[pid, lane] = len(self.tids) + 1
            self._name("thread_name", pid, self.tids[pid, lane], lane)
        return pid, self.tids[pid, lane]

    def _name(self, kind: str, pid: int, tid: int, name: str) -> None:
        self.metadata.append({"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}})


@dataclass
class _Mark:
    """A buffer_sent / buffer_received slice; its duration is fixed once the next one is known."""

    event: dict[str, Any]
    flow: dict[str, Any] | None = None


@dataclass
class _Builder:
    lanes: _Lanes = field(default_factory=_Lanes)
    out: list[dict[str, Any]] = field(default_factory=list)
    marks: dict[tuple[int, int], list[_Mark]] = field(default_factory=lambda: defaultdict(list))

    def add(self, process: str, lane: str, ph: str, name: str, t_us: float, **extra: Any) -> dict[str, Any]:
        pid, tid = self.lanes.of(process, lane)
        event = {"name": name, "ph": ph, "ts": t_us, "pid": pid, "tid": tid} | extra
        self.out.append(event)
        return event

    def mark(self, process: str, lane: str, name: str, t_us: float, args: dict[str, Any]) -> _Mark:
        pid, tid = self.lanes.of(process, lane)
        mark = _Mark({"name": name, "ph": "X", "ts": t_us, "dur": MARK_US, "pid": pid, "tid": tid, "args": args})
        self.marks[pid, tid].append(mark)
        return mark

    def events(self) -> list[dict[str, Any]]:
        """Everything, with mark durations cut to the next mark on their track and flows placed inside."""
        placed: list[dict[str, Any]] = []
        for marks in self.marks.values():
            for mark, after in zip(marks, marks[1:] + [None]):
                event = mark.event
                if after is not None:
                    event["dur"] = min(MARK_US, round(after.event["ts"] - event["ts"], 3))
                placed.append(event)
                if mark.flow is not None:
                    mark.flow["ts"] = round(event["ts"] + event["dur"] / 2, 3)
                    placed.append(mark.flow)
        return self.lanes.metadata + self.out + placed


# --- tasks from metrics.parquet ----------------------------------------------------------


def _task_events(builder: _Builder, metrics: pa.Table) -> None:
    """Busy / back-pressured / idle slices and pool counters per task and sample period."""
    wanted = {metric for _, metric in TASK_STATES} | set(TASK_COUNTERS)
    samples: dict[tuple[str, int], dict[float, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    task_managers: dict[tuple[str, int], str] = {}
    rows = metrics.select(["t", "vertex", "subtask", "task_manager", "metric", "value"]).to_pydict()
    for t, vertex, subtask, tm, metric, value in zip(*rows.values()):
        if metric in wanted:
            samples[vertex, subtask][round(t, 6)][metric] = value
            task_managers[vertex, subtask] = tm
    parallelism: dict[str, int] = defaultdict(int)
    for vertex, subtask in samples:
        parallelism[vertex] = max(parallelism[vertex], subtask + 1)
    for (vertex, subtask), by_time in samples.items():
        process, lane = task_managers[vertex, subtask], f"{vertex} ({subtask + 1}/{parallelism[vertex]})"
        start = 0.0
        for t in sorted(by_time):
            values = by_time[t]
            period_end = _us(t)
            cursor = _us(start)
            for state, metric in TASK_STATES:
                if metric not in values:
                    continue
                dur = min(round(values[metric] * (t - start) * 1e3, 3), round(period_end - cursor, 3))
                if dur > 0:
                    builder.add(process, lane, "X", state, cursor, dur=dur, cat="task",
                                args={"ms_per_second": values[metric]})
                    cursor = round(cursor + dur, 3)
            counters = {name: values[name] for name in TASK_COUNTERS if name in values}
            if counters:
                builder.add(process, lane, "C", lane, period_end, args=counters)
            start = t


# --- trace.jsonl -------------------------------------------------------------------------


def _lane(event: Mapping[str, Any]) -> str:
    if "channel" in event:
        side = "send" if event["event"] in SENDER_EVENTS else "receive"
        return f"{event['channel']} {side}"
    if "gate" in event:
        return f"gate {event['gate']}"
    if "task" in event:
        return f"{event['task']} barriers"
    return "checkpoints"


def _args(event: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in event.items() if key not in ("t", "event")}


def _span_name(event_name: str, suffixes: tuple[str, ...]) -> str | None:
    for suffix in suffixes:
        if event_name.endswith(suffix):
            return event_name[: -len(suffix)]
    return None


def _counters(builder: _Builder, timeline: ChannelTimeline, process: str, t_us: float,
              last: dict[str, dict[str, float]]) -> None:
    values = {"backlog": timeline.backlog.last, "in flight": timeline.in_flight.last}
    if timeline.credit is not None:
        values["credit"] = timeline.credit.last
    previous = last.setdefault(timeline.name, {})
    for name, value in values.items():
        if previous.get(name) != value:
            builder.add(process, f"{timeline.name} send", "C", timeline.name, t_us, args={name: value})
            previous[name] = value


def _trace_events(builder: _Builder, events: list[dict[str, Any]]) -> None:
    homes = {name: t.sender_tm or t.receiver_tm or "job" for name, t in channel_timelines(events).items()}
    timelines: dict[str, ChannelTimeline] = {}
    last_counters: dict[str, dict[str, float]] = {}
    sent: dict[tuple[str, Any], deque[tuple[_Mark, dict[str, Any]]]] = defaultdict(deque)
    open_spans: dict[tuple[str, str, str, Any], dict[str, Any]] = {}
    flow_id = 0
    for event in events:
        name, process, t_us = event["event"], str(event.get("tm", "job")), _us(event["t"])
        timeline = apply_event(timelines, event)
        if timeline is not None:
            _counters(builder, timeline, homes[timeline.name], t_us, last_counters)
        lane = _lane(event)
        if name == "buffer_sent":
            mark = builder.mark(process, lane, name, t_us, _args(event))
            sent[event["channel"], event.get("seq")].append((mark, event))
            continue
        if name == "buffer_received":
            mark = builder.mark(process, lane, name, t_us, _args(event))
            pending = sent.get((event["channel"], event.get("seq")))
            if pending:
                send_mark, send_event = pending.popleft()
                flow_id += 1
                pid, tid = send_mark.event["pid"], send_mark.event["tid"]
                send_mark.flow = {"name": "buffer", "cat": FLOW_CAT, "ph": "s", "id": flow_id, "pid": pid, "tid": tid}
                mark.flow = {"name": "buffer", "cat": FLOW_CAT, "ph": "f", "bp": "e", "id": flow_id,
                             "pid": mark.event["pid"], "tid": mark.event["tid"]}
                # async slices are per process: drawn next to the channel's counters
                home, flight = homes[event["channel"]], f"{event['channel']} in flight"
                send_lane = f"{event['channel']} send"
                builder.add(home, send_lane, "b", flight, _us(send_event["t"]), cat=FLOW_CAT, id=flow_id,
                            args={"seq": event.get("seq"), "bytes": event.get("bytes")})
                builder.add(home, send_lane, "e", flight, t_us, cat=FLOW_CAT, id=flow_id)
            continue
        checkpoint = event.get("checkpoint_id")
        opened = _span_name(name, _OPENS)
        if opened is not None:
            open_spans[process, lane, opened, checkpoint] = event
            continue
        closed = _span_name(name, (_CLOSES,))
        start = open_spans.pop((process, lane, closed, checkpoint), None) if closed else None
        if start is None:
            builder.add(process, lane, "i", name, t_us, s="t", args=_args(event))
        else:
            builder.add(process, lane, "X", closed, _us(start["t"]), dur=round(t_us - _us(start["t"]), 3),
                        args=_args(start) | _args(event))
    for (process, lane, _, _), start in open_spans.items():  # never completed: kept as instants
        builder.add(process, lane, "i", start["event"], _us(start["t"]), s="t", args=_args(start))


def perfetto_trace(metrics: pa.Table | None, events: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """The trace-event JSON object of a run's metrics and trace events."""
    builder = _Builder()
    if metrics is not None:
        _task_events(builder, metrics)
    _trace_events(builder, list(events))
    return {"traceEvents": builder.events(), "displayTimeUnit": "ms"}


def write_perfetto(run_dir: Path | str, out: Path | str | None = None) -> Path:
    """Write `trace.perfetto.json` for a run folder (metrics.parquet, and trace.jsonl if present)."""
    run_dir = run_folder(run_dir)
    metrics = read_metrics(run_dir)
    trace = run_dir / TRACE_FILE
    events = read_trace(trace) if trace.exists() else ()
    path = Path(out) if out is not None else run_dir / PERFETTO_FILE
    path.write_text(json.dumps(perfetto_trace(metrics, events), separators=(",", ":")))
    return path
