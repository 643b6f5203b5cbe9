"""`shufflesim compare RUN_A RUN_B ...`: what differs between runs, printed and as HTML.

Settings come from summary.json's `settings` (the scenario as it ran); results are the
steady-state values of summary.json per vertex (matched by JobGraph name) plus the job's
record counts, status, checkpoints (how many completed, failed, in progress; p50 and max
duration) and latency. Only what differs is printed, each later run next to
the first with the change relative to it. The HTML page (`--out`, default `compare.html`
in the current folder) has the same tables and each vertex's main metrics over time with
every run overlaid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scenarios.outputs import CHECKPOINT_FIGURES, checkpoint_figures
from scenarios.report.data import SETTINGS_UNITS, Run, flat_settings, load_run
from scenarios.report.figures import COMPARE_PANELS, latency_groups, overlay_figure
from scenarios.report.page import Section, esc, figure_html, format_value, render_page, table_html

COMPARE_FILE = "compare.html"
#: Steady-state metrics compared per vertex, in this order (plus the backpressure level); the
#: buffers in per second count flushed ones too: what a buffer timeout trades against latency.
RESULT_METRICS = tuple(p.metrics[0][0] for p in COMPARE_PANELS) + (
    "numBytesOutPerSecond", "numBuffersInLocalPerSecond", "numBuffersInRemotePerSecond",
    "inputExclusiveBuffersUsage", "inputFloatingBuffersUsage")
MISSING = "-"
#: How the compared checkpoint figures are named in the tables.
_CHECKPOINT_ROWS = {"checkpoints_completed": "completed", "checkpoints_failed": "failed",
                    "checkpoints_in_progress": "in progress at the end",
                    "checkpoint_duration_p50_ms": "p50 duration ms", "checkpoint_duration_max_ms": "max duration ms"}


@dataclass
class Row:
    """One compared quantity: where (vertex or "job"), what, and its value in each run."""

    scope: str
    name: str
    values: list[Any]

    @property
    def differs(self) -> bool:
        first = self.values[0]
        return any(not _same(first, value) for value in self.values[1:])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def change(first: Any, value: Any) -> str:
    """`+12.5%` (or `+3` from zero) for numbers, empty otherwise."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (first, value)):
        return ""
    if _same(first, value):
        return "="
    if first == 0:
        return f"{value - first:+.4g}"
    percent = (value - first) / abs(first) * 100
    return f"{percent:+.1f}%" if abs(percent) >= 1 else f"{percent:+.2g}%"


@dataclass
class Comparison:
    runs: list[Run]
    settings: list[Row]
    results: list[Row]

    @property
    def labels(self) -> list[str]:
        return [run.label for run in self.runs]


def _unique_labels(runs: Sequence[Run]) -> None:
    names = [run.folder.name for run in runs]
    if len(set(names)) < len(names):
        for run in runs:
            run.label = str(run.folder)


def _result_rows(runs: Sequence[Run]) -> list[Row]:
    rows = [Row("job", "status", [r.summary.get("status", MISSING) for r in runs]),
            # a run stopped by Ctrl-C: its results cover a shorter run than its settings say
            Row("job", "stopped early at s", [r.summary.get("interrupted", {}).get("at_s", MISSING) for r in runs]),
            # a run that ended early (stopped or failed): its steady state is the second half of what ran
            Row("job", "steady state from s", [r.summary.get("steady_state_from_s", MISSING) for r in runs]),
            Row("job", "records emitted", [r.summary.get("records", {}).get("emitted", MISSING) for r in runs]),
            Row("job", "records received", [r.summary.get("records", {}).get("received", MISSING) for r in runs]),
            Row("job", "invariants broken",
                [len(r.summary.get("invariants", {}).get("violations", [])) for r in runs])]
    figures = [checkpoint_figures(r.summary) for r in runs]
    if any(figures):  # what a checkpoint mode or interval changed
        for key in CHECKPOINT_FIGURES:
            values = [f.get(key) for f in figures]  # None: no run took one, or none completed
            rows.append(Row("checkpoints", _CHECKPOINT_ROWS[key], [MISSING if v is None else v for v in values]))
    latency = [latency_groups(r.summary) for r in runs]
    for group in dict.fromkeys(g for groups in latency for g in groups):
        for stat in ("p50", "p99", "max"):
            rows.append(Row(f"latency {group}", f"{stat} ms",
                            [groups.get(group, {}).get(stat, MISSING) for groups in latency]))
    by_name = [{v["name"]: v for v in run.vertices} for run in runs]
    for vertex in dict.fromkeys(name for vertices in by_name for name in vertices):
        present = [vertices.get(vertex) for vertices in by_name]
        rows.append(Row(vertex, "backpressure level", [v["backpressure_level"] if v else MISSING for v in present]))
        for metric in RESULT_METRICS:
            values = [v["metrics"].get(metric, MISSING) if v else MISSING for v in present]
            if any(value is not MISSING for value in values):
                rows.append(Row(vertex, metric, values))
    return rows


def compare_runs(folders: Sequence[Path | str]) -> Comparison:
    """Load the runs and line up their settings and steady-state results."""
    runs = [load_run(folder) for folder in folders]
    _unique_labels(runs)
    settings = [flat_settings(run.settings) for run in runs]
    keys = list(dict.fromkeys(key for flat in settings for key in flat))
    setting_rows = [Row("settings", key, [flat.get(key, MISSING) for flat in settings]) for key in keys]
    return Comparison(runs, setting_rows, _result_rows(runs))


def _columns(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _table_rows(rows: Sequence[Row], with_scope: bool) -> list[list[str]]:
    out = []
    for row in rows:
        cells = [row.scope] if with_scope else []
        cells.append(row.name)
        first = row.values[0]
        for i, value in enumerate(row.values):
            text = format_value(value)
            delta = change(first, value) if i else ""
            cells.append(f"{text} ({delta})" if delta and delta != "=" else text)
        out.append(cells)
    return out


def format_comparison(comparison: Comparison) -> str:
    """What `shufflesim compare` prints: the runs, then the settings and results that differ."""
    labels = comparison.labels
    lines = [f"runs: {', '.join(f'{label} ({run.folder})' for label, run in zip(labels, comparison.runs))}"]
    settings = [row for row in comparison.settings if row.differs]
    lines.append("")
    if settings:
        lines.append(f"settings that differ ({len(settings)} of {len(comparison.settings)}; {SETTINGS_UNITS}):")
        lines.append(_columns([["setting", *labels], *_table_rows(settings, False)]))
    elif not comparison.settings:
        lines.append("settings: not recorded (runs made before summary.json had 'settings')")
    else:
        lines.append(f"settings: all {len(comparison.settings)} equal")
    results = [row for row in comparison.results if row.differs]
    lines.append("")
    if results:
        lines.append(f"results that differ ({len(results)} of {len(comparison.results)}; change against "
                     f"{labels[0]}):")
        lines.append(_columns([["vertex", "metric", *labels], *_table_rows(results, True)]))
    else:
        lines.append(f"results: all {len(comparison.results)} equal")
    return "\n".join(lines)


def comparison_html(comparison: Comparison) -> str:
    """compare.html: the runs, the differing settings and results, each vertex overlaid."""
    runs, labels = comparison.runs, comparison.labels
    overview = table_html(["run", "folder", "scenario", "status", "duration (s)"],
                          [[r.label, str(r.folder), r.summary.get("scenario", MISSING), r.summary.get("status"),
                            r.summary.get("duration_s")] for r in runs])
    settings = [row for row in comparison.settings if row.differs]
    settings_body = (f'<p class="note">{SETTINGS_UNITS.capitalize()}.</p>'
                     + table_html(["setting", *labels], _table_rows(settings, False)) if settings
                     else f'<p class="note">All {len(comparison.settings)} settings are equal.</p>')
    results = comparison.results
    classes = ["bad" if row.differs else "" for row in results]
    results_body = ('<p class="note">Steady state (mean over the second half of each run); rows that differ are '
                    f'marked; changes against {esc(labels[0])}.</p>'
                    + table_html(["vertex", "metric", *labels], _table_rows(results, True), classes))
    vertices = list(dict.fromkeys(v["name"] for run in runs for v in run.vertices))
    plots = "".join(f"<h3>{esc(vertex)}</h3>" + figure_html(overlay_figure(runs, vertex), f"vertex:{vertex}")
                    for vertex in vertices)
    sections = [Section("Runs", overview, "runs"), Section("Settings that differ", settings_body, "settings"),
                Section("Results", results_body, "results"),
                Section("Over time, runs overlaid", '<p class="note">Per vertex (records per second summed over '
                        'subtasks, the rest averaged); click a run in the legend to hide it.</p>' + plots, "plots")]
    return render_page("shufflesim compare: " + " vs ".join(labels), f"{len(runs)} runs", sections)


def write_comparison(comparison: Comparison, out: Path | str) -> Path:
    path = Path(out)
    path.write_text(comparison_html(comparison))
    return path
