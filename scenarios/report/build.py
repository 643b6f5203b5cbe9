"""report.html of one run: the plan on top, then per vertex its behaviour over time, the
channels (with a trace), checkpoints, latency, and the settings and invariants at the
bottom. Built from the run folder's files alone, so `shufflesim report` remakes it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scenarios.channels import channel_timelines, read_trace
from scenarios.outputs import failure_origin, steady_state_window
from scenarios.report.data import SETTINGS_UNITS, Run, flat_settings, load_run
from scenarios.report.figures import (
    BACKPRESSURE,
    BUSY,
    CHECKPOINT_SIZES,
    CHECKPOINT_TIMES,
    LATENCY_STATS,
    VERTEX_PANELS,
    channels_figure,
    checkpoints_figure,
    latency_figure,
    latency_groups,
    plan_figure,
    vertex_figure,
)
from scenarios.report.page import Section, esc, figure_html, render_page, table_html
from taskmgr.metrics.summary import subtask_max

REPORT_FILE = "report.html"

PLAN_NOTE = ("The JobGraph that ran: one box per job vertex (one task per subtask) with its chained operators "
             "and parallelism, framed in the colour of its steady-state backpressure level; arrows carry the "
             "ship strategy (how records are partitioned between the two vertices).")
VERTEX_NOTE = (
    "Per vertex over virtual time; each metric sample is drawn over the period it covers (1 s by default). "
    "<b>Level</b>: Flink's backpressure level of each period (of the most back-pressured subtask). "
    "<b>Back-pressured / busy / idle</b>: where each second went, stacked to 1000 ms as in Flink's web UI; "
    "a task that waits for output buffers is back-pressured, one that waits for input is idle. The source of "
    "backpressure is the first vertex downstream of back-pressured ones that is busy, not back-pressured. "
    "<b>Records per second</b>: throughput (summed over subtasks). <b>Buffer pool usage</b>: outPoolUsage "
    "near 1 means the output buffers are full (the consumer does not keep up); inPoolUsage and the exclusive / "
    "floating split show how many input buffers hold data, of remote channels only, as in Flink: a local "
    "channel reads the producer's buffers, so a task that reads only local channels shows 0 even when its "
    "input is full (its inputQueueLength shows the buffers queued). <b>Queue lengths</b>: buffers queued in "
    "the input channels and subpartitions. Pool usages and queue lengths are means over subtasks; the menu above a "
    "vertex's plots shows one subtask.")
CHANNEL_NOTE = (
    "From trace.jsonl, per channel (<code>partition#subpartition</code>). <b>Credit</b>: buffers the sender may "
    "still send: the initial credit (exclusive buffers), plus AddCredit messages received, minus data buffers "
    "sent; at 0 the channel waits for the consumer to free buffers. Local channels and "
    "<code>flow_control = \"tcp\"</code> have no credit. <b>Backlog</b>: buffers queued behind the one sent, "
    "as the sender announced them; the consumer asks for floating buffers to cover it. <b>In flight</b>: sent "
    "but not yet received. Click a channel in the legend to hide it.")


def _lead(summary: Mapping[str, Any]) -> str:
    records = summary.get("records", {})
    lead = (f"{esc(summary.get('status', '?'))} after {summary.get('duration_s', 0):.3f} s of virtual time "
            f"({esc(summary.get('mode', '?'))} mode, seed {esc(summary.get('seed', '?'))}); records emitted "
            f"{records.get('emitted', '?')}, received {records.get('received', '?')}.")
    if "interrupted" in summary:
        planned = summary.get("settings", {}).get("duration")
        of = f" of {planned:g} s" if isinstance(planned, (int, float)) else ""
        lead += (f' <span class="bad">Stopped early (Ctrl-C or SIGTERM) at {summary["interrupted"]["at_s"]:.3f} s'
                 f"{of}: the results cover the run until then.</span>")
    if summary.get("restarts"):
        lead += f" Restarted {summary['restarts']} time(s); the results are those of the last attempt."
    if "error" in summary:
        lead += f' <span class="bad">Failed{esc(failure_origin(summary.get("failure", {})))}: {esc(summary["error"])}</span>'
    return lead


def _steady_state_table(run: Run) -> str:
    metrics = [(metric, label) for panel in VERTEX_PANELS for metric, label in panel.metrics]
    highest = ((BACKPRESSURE, "back-pressured max"), (BUSY, "busy max"))
    rows = [[v["name"], v["parallelism"], v["backpressure_level"]]
            + [_or_dash(subtask_max(v, m)) for m, _ in highest] + [v["metrics"].get(m, "-") for m, _ in metrics]
            for v in run.vertices]
    table = table_html(["vertex", "p", "level"] + [label for _, label in (*highest, *metrics)], rows,
                       [v["backpressure_level"] for v in run.vertices])
    return (f"<p class=\"note\">Steady state (mean over {steady_state_window(run.summary)}, per subtask; "
            "summary.json). "
            "A vertex's value is the mean over its subtasks; the max columns take its highest subtask, "
            "as Flink's web UI does on each job graph node.</p>" + table)


def _or_dash(value: float | None) -> float | str:
    return "-" if value is None else value


def _channel_labels(plan: Mapping[str, Any] | None, channels: list[str]) -> dict[str, str]:
    """`ds0#0#1` -> `ds0#0#1 Source: Seq[0] → SlowMap[sp 1]`, from the plan's data sets."""
    if plan is None:
        return {}
    graph = plan["job_graph"]
    producers = {ds["id"]: v["name"] for v in graph["vertices"] for ds in v.get("produced_data_sets", [])}
    consumers = {e["intermediate_data_set"]: e["target_name"] for e in graph["edges"]}
    labels = {}
    for channel in channels:
        partition, _, subpartition = channel.rpartition("#")
        data_set, _, producer_subtask = partition.partition("#")
        if data_set in producers:
            labels[channel] = (f"{channel} {producers[data_set]}[{producer_subtask}] → "
                               f"{consumers.get(data_set, '?')} (subpartition {subpartition})")
    return labels


def _channels_section(run: Run) -> Section | None:
    if run.trace is None:
        return None
    timelines = [t for t in channel_timelines(read_trace(run.trace)).values() if t.backlog.times]
    if not timelines:
        return Section("Channels", "<p class=\"note\">trace.jsonl holds no buffers.</p>", "channels")
    labels = _channel_labels(run.plan, [t.name for t in timelines])
    for timeline in timelines:
        if timeline.local:
            labels[timeline.name] = labels.get(timeline.name, timeline.name) + " local"
    body = f'<p class="note">{CHANNEL_NOTE}</p>' + figure_html(channels_figure(timelines, labels), "channels")
    return Section("Channels", body, "channels")


def _checkpoints_section(summary: Mapping[str, Any]) -> Section:
    checkpoints = summary.get("checkpoints") or []
    if not checkpoints:
        return Section("Checkpoints", '<p class="note">No checkpoints were taken in this run.</p>', "checkpoints")
    keys = ["id", "status", "type", "trigger_s"] + [k for k, _ in CHECKPOINT_TIMES + CHECKPOINT_SIZES] + ["failure"]
    rows = [[c.get(k, "-") if c.get(k) is not None else "-" for k in keys] for c in checkpoints]
    classes = ["bad" if str(c.get("status", "")).upper() == "FAILED" else "" for c in checkpoints]
    body = ('<p class="note">Per checkpoint, at its trigger time: end-to-end duration, barrier alignment time and '
            'start delay (from the trigger to the first barrier reaching a task), the largest over the tasks; '
            'in-flight data processed during the alignments and persisted (unaligned checkpoints), and state '
            'size (operator state plus the persisted in-flight data, as Flink counts it), summed.</p>'
            + figure_html(checkpoints_figure(checkpoints), "checkpoints") + table_html(keys, rows, classes))
    return Section("Checkpoints", body, "checkpoints")


RESTART_KEYS = ("attempt", "failed_at_s", "task", "task_manager", "cause", "restarted_at_s", "downtime_ms",
                "records_replayed")


def _restarts_section(summary: Mapping[str, Any]) -> Section | None:
    history = summary.get("restart_history") or []
    suppressed = summary.get("recovery_suppressed_by")
    if not history and suppressed is None:
        return None
    body = ('<p class="note">Each restart of the job: the attempt that failed, when and why; when the next attempt '
            'was deployed (downtime: failure to redeployment, cancellation and restart delay included) and how many '
            'records its sources emit again (all the failed attempt emitted: without a checkpoint a restarted job '
            'starts from the beginning).</p>')
    if history:
        body += table_html(list(RESTART_KEYS), [[record.get(key, "-") for key in RESTART_KEYS] for record in history])
    if suppressed is not None:
        body += f'<p class="bad">Recovery is suppressed by {esc(suppressed)}: the last failure failed the job.</p>'
    return Section("Restarts", body, "restarts")


def _latency_section(summary: Mapping[str, Any]) -> Section | None:
    groups = latency_groups(summary)
    if not groups:
        return None
    rows = [[group] + [stats.get(s, "-") for s in LATENCY_STATS] for group, stats in groups.items()]
    body = ('<p class="note">End-to-end latency of records from source to sink over '
            f'{steady_state_window(summary)}, in ms (virtual time in sim mode).</p>'
            + figure_html(latency_figure(groups), "latency") + table_html(["sinks"] + list(LATENCY_STATS), rows))
    return Section("Latency", body, "latency")


def _settings_section(run: Run) -> Section:
    settings = flat_settings(run.settings)
    if not settings:
        body = '<p class="note">summary.json holds no settings (a run made before runs recorded them).</p>'
    else:
        body = ('<p class="note">The scenario as it ran, with defaults and <code>--set</code> overrides applied; '
                f'{SETTINGS_UNITS}.</p>'
                + table_html(["setting", "value"], sorted(settings.items())))
    return Section("Settings", body, "settings")


def _invariants_section(summary: Mapping[str, Any]) -> Section:
    invariants = dict(summary.get("invariants", {}))
    violations = invariants.pop("violations", [])
    rows = [[key, value] for key, value in invariants.items()]
    rows += [["records emitted", summary.get("records", {}).get("emitted", "-")],
             ["records received", summary.get("records", {}).get("received", "-")]]
    verdict = ('<p class="ok">All invariants hold.</p>' if not violations else
               "".join(f'<p class="bad">Broken: {esc(v)}</p>' for v in violations))
    return Section("Invariants at the end of the run", verdict + table_html(["invariant", "value"], rows),
                   "invariants")


def build_report(run: Run) -> str:
    """The HTML of a run's report."""
    summary = run.summary
    sections = []
    if run.plan is not None:
        levels = {v["name"]: v["backpressure_level"] for v in run.vertices}
        sections.append(Section("Plan", f'<p class="note">{PLAN_NOTE}</p>'
                                + figure_html(plan_figure(run.plan, levels), "plan"), "plan"))
    vertex_parts = [f'<p class="note">{VERTEX_NOTE}</p>', _steady_state_table(run)]
    for vertex in run.vertices:
        vertex_parts.append(f"<h3>{esc(vertex['name'])} <small class=\"{esc(vertex['backpressure_level'])}\">"
                            f"{esc(vertex['backpressure_level'])}</small></h3>")
        vertex_parts.append(figure_html(vertex_figure(run, vertex), f"vertex:{vertex['name']}"))
    sections.append(Section("Backpressure and buffers per vertex", "".join(vertex_parts), "vertices"))
    sections += [s for s in (_channels_section(run), _checkpoints_section(summary), _restarts_section(summary),
                             _latency_section(summary))
                 if s is not None]
    sections += [_settings_section(run), _invariants_section(summary)]
    title = f"shufflesim report: {summary.get('scenario', run.label)}"
    return render_page(title, _lead(summary), sections)


def write_report(run_dir: Path | str, out: Path | str | None = None) -> Path:
    """Write report.html for the run in `run_dir` (into it unless `out` names another file)."""
    run = load_run(run_dir)
    path = Path(out) if out is not None else run.folder / REPORT_FILE
    path.write_text(build_report(run))
    return path
