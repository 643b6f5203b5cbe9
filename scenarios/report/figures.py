"""The plots of report.html and compare.html, as plotly figures.

Everything is over the run's (virtual) time in seconds. Colours follow Flink's web UI:
back-pressured black, busy red, idle blue; levels ok green, low orange, high red.
Long series are thinned to `MAX_POINTS` per trace so a report of a long run stays small.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from scenarios.channels import ChannelTimeline, Steps
from scenarios.report.data import Aggregate, MetricSeries, Run, bucket_extremes, bucket_mean
from taskmgr.metrics.backpressure import LOW_MAX_RATIO, OK_MAX_RATIO, backpressure_level

MAX_POINTS = 2000
TEMPLATE = "plotly_white"
BACKPRESSURE = "backPressuredTimeMsPerSecond"
BUSY = "busyTimeMsPerSecond"
IDLE = "idleTimeMsPerSecond"
LEVEL_COLORS = {"ok": "#5cb85c", "low": "#f0ad4e", "high": "#d9534f"}
TIME_COLORS = {BACKPRESSURE: "#3c3c3c", BUSY: "#e0584f", IDLE: "#5b9bd5"}
#: Flink's level thresholds in ms per second (spec 7.4).
LOW_FROM_MS = OK_MAX_RATIO * 1000
HIGH_FROM_MS = LOW_MAX_RATIO * 1000
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


@dataclass(frozen=True)
class Panel:
    """One row of a vertex figure: a title, its metrics (Flink name, legend label), a y-axis title."""

    title: str
    metrics: tuple[tuple[str, str], ...]
    axis: str


TIME_PANEL = Panel("Back-pressured / busy / idle (stacked)",
                   ((BACKPRESSURE, "back-pressured"), (BUSY, "busy"), (IDLE, "idle")), "ms/s")
VERTEX_PANELS = (
    TIME_PANEL,
    Panel("Records per second", (("numRecordsInPerSecond", "records in"), ("numRecordsOutPerSecond", "records out")),
          "records/s"),
    Panel("Buffer pool usage", (("outPoolUsage", "outPoolUsage"), ("inPoolUsage", "inPoolUsage"),
                                ("inputExclusiveBuffersUsage", "input exclusive"),
                                ("inputFloatingBuffersUsage", "input floating")), "fraction"),
    Panel("Queue lengths", (("inputQueueLength", "inputQueueLength"), ("outputQueueLength", "outputQueueLength")),
          "buffers"),
)
#: compare.html: one metric per row, every run overlaid.
COMPARE_PANELS = tuple(
    Panel(label, ((metric, label),), axis) for metric, label, axis in (
        (BACKPRESSURE, "back-pressured", "ms/s"), (BUSY, "busy", "ms/s"), (IDLE, "idle", "ms/s"),
        ("numRecordsInPerSecond", "records in", "records/s"), ("numRecordsOutPerSecond", "records out", "records/s"),
        ("outPoolUsage", "outPoolUsage", "fraction"), ("inPoolUsage", "inPoolUsage", "fraction"),
        ("inputQueueLength", "inputQueueLength", "buffers"), ("outputQueueLength", "outputQueueLength", "buffers"),
    )
)


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _series(metrics: MetricSeries, vertex: str, metric: str, subtask: int | None,
            how: Aggregate | None = None) -> tuple[np.ndarray, np.ndarray]:
    if subtask is None:
        t, v = metrics.vertex(vertex, metric, how)
    else:
        t, v = metrics.subtask(vertex, metric, subtask)
    return bucket_mean(t, v, MAX_POINTS)


def _periods(t: np.ndarray) -> np.ndarray:
    return np.diff(t, prepend=0.0) if len(t) else t


def _held(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A sample's value drawn over the period it covers: plot with line shape "vh"."""
    if not len(t):
        return t, v
    return np.insert(t, 0, t[0] - _periods(t)[0]), np.insert(v, 0, v[0])


# --- the plan ----------------------------------------------------------------------------


def _layers(vertices: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """Column of each vertex (by index): the longest path from a source.

    JobGraph vertices are in topological order, so one pass sees every input first.
    """
    column: dict[int, int] = {}
    for vertex in vertices:
        inputs = [column[e["source_vertex"]] + 1 for e in edges
                  if e["target_vertex"] == vertex["index"] and e["source_vertex"] in column]
        column[vertex["index"]] = max(inputs, default=0)
    return column


def plan_figure(plan: Mapping[str, Any], levels: Mapping[str, str] | None = None) -> go.Figure:
    """The JobGraph as boxes (chained operators, parallelism) and arrows (ship strategy)."""
    graph = plan["job_graph"]
    vertices, edges = graph["vertices"], graph["edges"]
    column = _layers(vertices, edges)
    rows: dict[int, int] = defaultdict(int)
    pos: dict[int, tuple[float, float]] = {}
    for vertex in vertices:
        c = column[vertex["index"]]
        pos[vertex["index"]] = (c * 1.0, -rows[c] * 1.0)
        rows[c] += 1
    width, height = 0.72, 0.62
    fig = go.Figure()
    levels = levels or {}
    for vertex in vertices:
        x, y = pos[vertex["index"]]
        level = levels.get(vertex["name"])
        fig.add_shape(type="rect", x0=x - width / 2, x1=x + width / 2, y0=y - height / 2, y1=y + height / 2,
                      line=dict(color=LEVEL_COLORS.get(level, "#4a6fa5"), width=2), fillcolor="#f4f7fb", layer="below")
        operators = [op["name"] for op in vertex.get("chained_operators", [])] or [vertex["name"]]
        lines = [f"<b>{operators[0]}</b>"] + [f"→ {op}" for op in operators[1:]]
        lines.append(f"parallelism {vertex['parallelism']}" + (f" · {level}" if level else ""))
        fig.add_annotation(x=x, y=y, text="<br>".join(lines), showarrow=False, font=dict(size=12))
    for edge in edges:
        (x0, y0), (x1, y1) = pos[edge["source_vertex"]], pos[edge["target_vertex"]]
        fig.add_annotation(x=x1 - width / 2, y=y1, ax=x0 + width / 2, ay=y0, xref="x", yref="y", axref="x",
                           ayref="y", text="", showarrow=True, arrowhead=2, arrowsize=1.3, arrowwidth=1.5,
                           arrowcolor="#555")
        label = edge["ship_strategy"] + (" (broadcast)" if edge.get("is_broadcast") else "")
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2 + 0.08, text=label, showarrow=False,
                           font=dict(size=11, color="#444"), bgcolor="rgba(255,255,255,0.8)")
    xs = [pos[v["index"]][0] for v in vertices]
    ys = [pos[v["index"]][1] for v in vertices]
    hover = [f"{v['name']}<br>id {v['id']}<br>{v.get('invokable', '')}<br>slot sharing group "
             f"{v.get('slot_sharing_group_name', '')}" for v in vertices]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", marker=dict(size=1, opacity=0), hovertext=hover,
                             hoverinfo="text", showlegend=False, name="vertices"))
    n_columns, n_rows = max(column.values()) + 1, max(rows.values())
    fig.update_xaxes(visible=False, range=[-0.5, n_columns - 0.5])
    fig.update_yaxes(visible=False, range=[-n_rows + 0.5, 0.5])
    fig.update_layout(template=TEMPLATE, height=120 + 110 * n_rows, margin=dict(l=10, r=10, t=10, b=10))
    return fig


# --- one vertex over time ----------------------------------------------------------------


def _view_traces(metrics: MetricSeries, vertex: str, subtask: int | None) -> list[tuple[int, go.Scatter | go.Bar]]:
    """(row, trace) of one view: the vertex (subtask None) or one subtask."""
    traces: list[tuple[int, Any]] = []
    t, backpressured = _series(metrics, vertex, BACKPRESSURE, subtask, "max")
    if len(t):
        levels = [backpressure_level(v / 1000).value for v in backpressured]
        widths = _periods(t)
        traces.append((1, go.Bar(x=t - widths / 2, y=np.ones(len(t)), width=widths, name="level",
                                 marker=dict(color=[LEVEL_COLORS[level] for level in levels], line=dict(width=0)),
                                 hovertext=[f"{level}: back-pressured {v:.0f} ms/s" for level, v in
                                            zip(levels, backpressured)], hoverinfo="text+x", showlegend=False)))
    for row, panel in enumerate(VERTEX_PANELS, start=2):
        for metric, label in panel.metrics:
            if not metrics.has(vertex, metric):
                continue
            t, v = _held(*_series(metrics, vertex, metric, subtask))
            if panel is TIME_PANEL:
                trace = go.Scatter(x=t, y=v, name=label, stackgroup="time", mode="lines",
                                   line=dict(width=0.5, color=TIME_COLORS[metric], shape="vh"),
                                   fillcolor=TIME_COLORS[metric])
            else:
                trace = go.Scatter(x=t, y=v, name=label, mode="lines", line=dict(shape="vh"))
            traces.append((row, trace))
    return traces


def vertex_figure(run: Run, vertex: Mapping[str, Any]) -> go.Figure:
    """A vertex over time: level band, stacked back-pressured/busy/idle, records, pools, queues.

    With parallelism > 1 a menu switches between the vertex and each subtask.
    """
    name, parallelism = vertex["name"], vertex["parallelism"]
    views: list[tuple[str, int | None]] = [("all subtasks", None)] if parallelism > 1 else []
    views += [(f"subtask {i}", i) for i in range(parallelism)]
    titles = ["Backpressure level (ok ≤ 100 ms/s < low ≤ 500 ms/s < high)"] + [p.title for p in VERTEX_PANELS]
    fig = make_subplots(rows=5, cols=1, shared_xaxes=True, vertical_spacing=0.045, subplot_titles=titles,
                        row_heights=[0.05, 0.3, 0.22, 0.22, 0.21])
    owners: list[int] = []
    for view, (_, subtask) in enumerate(views):
        for row, trace in _view_traces(run.metrics, name, subtask):
            trace.visible = view == 0
            trace.legend = f"legend{row}"  # each panel has its legend beside it
            fig.add_trace(trace, row=row, col=1)
            owners.append(view)
    for threshold, level in ((LOW_FROM_MS, "low"), (HIGH_FROM_MS, "high")):
        fig.add_hline(y=threshold, row=2, col=1, line=dict(color=LEVEL_COLORS[level], dash="dot", width=1),
                      annotation_text=f"{level} above {threshold:.0f}", annotation_position="top left",
                      annotation_font=dict(size=10, color=LEVEL_COLORS[level]))
    if len(views) > 1:
        buttons = [dict(label=label, method="update", args=[{"visible": [owner == view for owner in owners]}])
                   for view, (label, _) in enumerate(views)]
        fig.update_layout(updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.035,
                                            yanchor="bottom", showactive=True)])
    fig.update_yaxes(visible=False, row=1, col=1)
    fig.update_yaxes(range=[0, 1000], row=2, col=1)
    fig.update_yaxes(rangemode="tozero")
    for row, panel in enumerate(VERTEX_PANELS, start=2):
        fig.update_yaxes(title_text=panel.axis, row=row, col=1)
    fig.update_xaxes(title_text="time (s)", row=5, col=1)
    legends = {f"legend{row}": dict(x=1.01, xanchor="left", y=fig.layout[f"yaxis{row}"].domain[1], yanchor="top")
               for row in range(2, 2 + len(VERTEX_PANELS))}
    fig.update_layout(template=TEMPLATE, height=900, bargap=0, hovermode="x unified",
                      margin=dict(l=60, r=20, t=60, b=40), **legends)
    return fig


def overlay_figure(runs: Sequence[Run], vertex: str) -> go.Figure:
    """compare.html: one vertex's main metrics over time, every run in its own colour."""
    def drawn(panel: Panel) -> bool:  # a metric that is zero throughout in every run says nothing here
        metric = panel.metrics[0][0]
        return any(run.metrics.has(vertex, metric) and run.metrics.vertex(vertex, metric)[1].any() for run in runs)

    panels = [p for p in COMPARE_PANELS if drawn(p)]
    fig = make_subplots(rows=max(len(panels), 1), cols=1, shared_xaxes=True, vertical_spacing=0.03,
                        subplot_titles=[p.title for p in panels])
    for i, run in enumerate(runs):
        for row, panel in enumerate(panels, start=1):
            metric = panel.metrics[0][0]
            if not run.metrics.has(vertex, metric):
                continue
            t, v = _held(*_series(run.metrics, vertex, metric, None))
            fig.add_trace(go.Scatter(x=t, y=v, name=run.label, legendgroup=run.label, showlegend=row == 1,
                                     mode="lines", line=dict(color=_color(i), shape="vh")), row=row, col=1)
            fig.update_yaxes(title_text=panel.axis, rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="time (s)", row=max(len(panels), 1), col=1)
    fig.update_layout(template=TEMPLATE, height=170 * max(len(panels), 1) + 80, hovermode="x unified",
                      margin=dict(l=60, r=20, t=40, b=40))
    return fig


# --- channels (trace.jsonl) --------------------------------------------------------------


def _steps(steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    return bucket_extremes(np.asarray(steps.times, dtype=float), np.asarray(steps.values, dtype=float), MAX_POINTS)


def channels_figure(timelines: Sequence[ChannelTimeline], labels: Mapping[str, str]) -> go.Figure:
    """Per channel: the sender's available credit, the backlog it announced, buffers in flight."""
    rows = (("Credit available to the sender", "credit", "buffers"),
            ("Backlog announced with each buffer", "backlog", "buffers"),
            ("Buffers in flight (sent, not yet received)", "in_flight", "buffers"))
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[title for title, _, _ in rows])
    for i, timeline in enumerate(timelines):
        label = labels.get(timeline.name, timeline.name)
        shown = False
        for row, (_, attribute, _) in enumerate(rows, start=1):
            steps = getattr(timeline, attribute)
            if steps is None or not steps.times:
                continue
            t, v = _steps(steps)
            fig.add_trace(go.Scatter(x=t, y=v, name=label, legendgroup=timeline.name, showlegend=not shown,
                                     mode="lines", line=dict(shape="hv", color=_color(i))), row=row, col=1)
            shown = True
    if all(timeline.credit is None for timeline in timelines):
        fig.add_annotation(text='no channel has credit (local channels, or flow_control = "tcp")', showarrow=False,
                           xref="x domain", yref="y domain", x=0.5, y=0.5, font=dict(color="#777"))
    for row, (_, _, axis) in enumerate(rows, start=1):
        fig.update_yaxes(title_text=axis, rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="time (s)", row=3, col=1)
    fig.update_layout(template=TEMPLATE, height=720, hovermode="closest", margin=dict(l=60, r=20, t=40, b=40),
                      legend=dict(title="channel (click to hide)"))
    return fig


# --- checkpoints and latency (summary.json) ----------------------------------------------

CHECKPOINT_TIMES = (("duration_ms", "duration"), ("alignment_ms", "alignment"), ("start_delay_ms", "start delay"))
CHECKPOINT_SIZES = (("processed_bytes", "processed in-flight data"), ("persisted_bytes", "persisted in-flight data"),
                    ("state_bytes", "state"))


def checkpoints_figure(checkpoints: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Per checkpoint (at its trigger time): duration, alignment, start delay; bytes persisted."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=["Checkpoint times", "Checkpoint sizes"])
    x = [c.get("trigger_s") for c in checkpoints]
    hover = [f"checkpoint {c.get('id') or '(no id: its plan failed)'} ({c.get('type', '')}): "
             f"{c.get('status', '')}" + (f"<br>{c['failure']}" if c.get("failure") else "") for c in checkpoints]
    for row, fields in ((1, CHECKPOINT_TIMES), (2, CHECKPOINT_SIZES)):
        for i, (key, label) in enumerate(fields):
            fig.add_trace(go.Scatter(x=x, y=[c.get(key) for c in checkpoints], name=label, mode="lines+markers",
                                     hovertext=hover, line=dict(color=_color(i + 3 * (row - 1)))), row=row, col=1)
    failed = [c for c in checkpoints if str(c.get("status", "")).upper() == "FAILED"]
    if failed:
        fig.add_trace(go.Scatter(x=[c.get("trigger_s") for c in failed], y=[c.get("duration_ms") or 0 for c in failed],
                                 name="failed", mode="markers", marker=dict(symbol="x", size=12, color="#d62728"),
                                 hovertext=[str(c.get("failure") or "") for c in failed]), row=1, col=1)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="bytes", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="trigger time (s)", row=2, col=1)
    fig.update_layout(template=TEMPLATE, height=560, margin=dict(l=60, r=20, t=40, b=40))
    return fig


LATENCY_STATS = ("mean", "p50", "p90", "p99", "p999", "max")


def latency_groups(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """summary.json's latency: "all sinks" (its top-level `latency_ms`) and each sink vertex
    (the `latency_ms` of its entry in `vertices`)."""
    groups: dict[str, Mapping[str, Any]] = {}
    if summary.get("latency_ms"):
        groups["all sinks"] = summary["latency_ms"]
    for vertex in summary.get("vertices", []):
        if vertex.get("latency_ms"):
            groups[vertex["name"]] = vertex["latency_ms"]
    return groups


def latency_figure(groups: Mapping[str, Mapping[str, Any]]) -> go.Figure:
    """End-to-end latency statistics, all sinks together and per sink vertex."""
    fig = go.Figure()
    for i, (group, stats) in enumerate(groups.items()):
        fig.add_trace(go.Bar(x=list(LATENCY_STATS), y=[stats.get(stat) for stat in LATENCY_STATS], name=group,
                             marker=dict(color=_color(i))))
    fig.update_layout(template=TEMPLATE, barmode="group", height=380, yaxis_title="ms",
                      margin=dict(l=60, r=20, t=20, b=40))
    return fig
