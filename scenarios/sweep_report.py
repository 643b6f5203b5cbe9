"""What `shufflesim sweep` shows a person: progress while it runs, a table and a plot at the end.

The table and the plot show, per point, the first vertex's backpressure (the source's,
`backPressuredTimeMsPerSecond`), the last vertex's input rate over all its subtasks
(the sink's `numRecordsInPerSecond` x parallelism) and, where measured, the sinks' latency
p50 and p99: how much the pipeline holds the source back, what gets through, and how late.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import fmean
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from scenarios.progress import PLAIN_INTERVAL, StatusLine

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from scenarios.sweep import PointResult

PLOT_FILE = "sweep.png"
SOURCE_METRIC = "backPressuredTimeMsPerSecond"
SINK_METRIC = "numRecordsInPerSecond"


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}:{seconds:02d}"


def progress_line(done: int, total: int, elapsed: float) -> str:
    """`3/8 points done, 0:12 elapsed, about 0:20 left`."""
    left = f"about {_clock(elapsed / done * (total - done))} left" if done else "time left not known yet"
    return f"{done}/{total} points done, {_clock(elapsed)} elapsed, {left}"


class SweepProgress:
    """Prints sweep progress (a `StatusLine`): redrawn on a terminal, else a line per change."""

    def __init__(self, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.status = StatusLine(out or sys.stdout)
        self.clock = clock
        self.start = clock()
        self.last_done = -1
        self._last_shown = self.start

    def __call__(self, done: int, total: int, running: str | None = None) -> None:
        """Points done of `total`; `running`: how far the point running now is (one by one).
        Off a terminal, a line per point done, and one every PLAIN_INTERVAL on a long point."""
        if not (self.status.on_terminal or done != self.last_done
                or (running is not None and self.clock() - self._last_shown >= PLAIN_INTERVAL)):
            return
        self._last_shown = now = self.clock()
        line = progress_line(done, total, now - self.start)
        self.status.show(line if running is None else f"{line}; {running}")
        self.last_done = done

    def close(self) -> None:
        """End the redrawn line (on a terminal)."""
        self.status.close()


def _source_sink(result: PointResult) -> tuple[float | None, float | None]:
    """The first vertex's backpressure (ms/s) and the last vertex's records in per second (all subtasks)."""
    if not result.vertices:
        return None, None
    source, sink = result.vertices[0], result.vertices[-1]
    rate = sink.metrics.get(SINK_METRIC)
    return source.metrics.get(SOURCE_METRIC), None if rate is None else rate * sink.parallelism


def _checkpoints_cell(result: PointResult) -> str:
    """`6 completed, p50 12 ms` (`, 1 failed`, `, 1 in progress` where there are)."""
    figures = result.checkpoints
    if not figures:
        return "-"
    cell = f"{figures['checkpoints_completed']} completed"
    for key, word in (("checkpoints_failed", "failed"), ("checkpoints_in_progress", "in progress")):
        cell += f", {figures[key]} {word}" if figures[key] else ""
    p50 = figures["checkpoint_duration_p50_ms"]
    return cell if p50 is None else f"{cell}, p50 {p50:.0f} ms"


def _ms(value: float) -> str:
    """`151`, `2.61`, `15,030`: three figures, whole ms from 100 on."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _latency_cell(result: PointResult) -> str:
    """`48.6 / 98.2`: the p50 and p99 in ms over all sinks (`-`: no record reached one)."""
    if not result.latency:
        return "-"
    return f"{_ms(result.latency['latency_p50_ms'])} / {_ms(result.latency['latency_p99_ms'])}"


def format_results_table(results: Sequence[PointResult], keys: Sequence[str]) -> str:
    """One row per point: its id, seed, swept values, status, source backpressure, sink rate,
    its sinks' latency where some point's measured it, and its checkpoints where some point took any."""
    keys = [key for key in keys if key != "seed"]  # a swept seed is in the seed column
    with_latency = any(result.latency for result in results)
    with_checkpoints = any(result.checkpoints for result in results)
    headers = ["point", "seed", *keys, "status", "source backpressure", "sink records/s"]
    headers += ["latency p50 / p99 ms"] if with_latency else []
    headers += ["checkpoints"] if with_checkpoints else []
    rows = []
    for result in results:
        backpressure, sink_rate = _source_sink(result)
        level = result.vertices[0].backpressure_level if result.vertices else ""
        rows.append([result.point, "" if result.seed is None else str(result.seed),
                     *(result.values.get(key, "") for key in keys), result.status,
                     "-" if backpressure is None else f"{level} ({backpressure:.0f} ms/s)",
                     "-" if sink_rate is None else f"{sink_rate:.0f}"]
                    + ([_latency_cell(result)] if with_latency else [])
                    + ([_checkpoints_cell(result)] if with_checkpoints else []))
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in [headers, *rows])


def short_key(key: str) -> str:
    """`job.stages[SlowMap].cost` -> `SlowMap.cost`, `network.buffer_timeout` -> `buffer_timeout`."""
    if key.startswith("job.stages["):
        return key[len("job.stages["):].replace("]", "", 1)
    return key.rsplit(".", 1)[-1]


def _series(results: Sequence[PointResult], keys: Sequence[str]) -> tuple[str | None, list[str], dict]:
    """The x key (the first swept key that varies), the series keys (the other varying keys)
    and the results grouped by (series values, x value), seeds together."""
    varying = [key for key in keys if key != "seed" and len({r.values.get(key) for r in results}) > 1]
    x_key, series_keys = (varying[0], varying[1:]) if varying else (None, [])
    groups: dict[tuple[tuple[str, ...], str], list[PointResult]] = {}
    for result in results:
        x = result.values.get(x_key, "-") if x_key else result.point
        groups.setdefault((tuple(result.values.get(k, "-") for k in series_keys), x), []).append(result)
    return x_key, series_keys, groups


def _mean_and_range(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return float("nan"), 0.0, 0.0
    mean = fmean(values)
    return mean, mean - min(values), max(values) - mean


#: A figure of a point's results (None: not measured).
PointFigure = Callable[["PointResult"], "float | None"]


def _latency(key: str) -> PointFigure:
    """A point's sink latency figure `key` (ms; None: no record reached a sink)."""
    return lambda result: result.latency.get(key)


#: The plot's panels: a label, a point's figure drawn as a bar and one drawn as a mark over
#: it (None: none). Latency only where some point's sinks measured it.
PANELS: tuple[tuple[str, PointFigure, PointFigure | None], ...] = (
    (f"source {SOURCE_METRIC}", lambda result: _source_sink(result)[0], None),
    ("sink records in/s (all subtasks)", lambda result: _source_sink(result)[1], None),
)
LATENCY_PANEL = ("sink latency ms (bar p50, mark p99)", _latency("latency_p50_ms"), _latency("latency_p99_ms"))
#: A latency panel whose values span this factor or more is drawn on a log scale.
LOG_SPAN = 100


def write_plot(results: Sequence[PointResult], keys: Sequence[str], path: Path, title: str) -> Path:
    """A PNG of `sweep_figure`."""
    import matplotlib.pyplot as plt

    figure = sweep_figure(results, keys, title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def sweep_figure(results: Sequence[PointResult], keys: Sequence[str], title: str) -> Figure:
    """Source backpressure, sink records/s and, where measured, sink latency (p50 and p99)
    against the swept keys.

    The first swept key that varies is the x axis; the other varying keys make one bar
    series per combination; over seeds a bar (or mark) is the mean, its whisker the min-max
    range. Points that failed have no bar, and their status is written at the bottom. The
    latency panel is on a log scale when its values span two decades or more (a buffer
    timeout of 0 against 100 ms: 0.5 ms against 150).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key, series_keys, groups = _series(results, keys)
    xs = list(dict.fromkeys(x for _, x in groups))
    series = list(dict.fromkeys(values for values, _ in groups))
    width = 0.8 / len(series)
    panels = PANELS + ((LATENCY_PANEL,) if any(result.latency for result in results) else ())
    figure, axes = plt.subplots(len(panels), 1, sharex=True,
                                figsize=(max(6.0, 0.5 * len(groups) + 3), 3.25 * len(panels)), squeeze=False)
    axes = axes[:, 0]
    for axis, (name, bar_figure, mark_figure) in zip(axes, panels):
        for n, values in enumerate(series):
            bars = _bars(groups, xs, values, n, width, bar_figure, axis)
            label = ", ".join(f"{short_key(k)}={v}" for k, v in zip(series_keys, values)) or None
            drawn = axis.bar(bars.positions, bars.means, width * 0.9, yerr=bars.spread(), capsize=3, label=label)
            if mark_figure is not None:
                marks = _bars(groups, xs, values, n, width, mark_figure, None)
                color = drawn.patches[0].get_facecolor() if drawn.patches else None
                axis.errorbar(marks.positions, marks.means, yerr=marks.spread(), fmt="_", markersize=14,
                              markeredgewidth=2, capsize=3, color=color)[0].set_gid("mark")
        axis.set_ylabel(name, fontsize=9)
        axis.grid(axis="y", alpha=0.3)
        if mark_figure is not None:
            _log_scale_if_spread(axis, [f(r) for r in results if not r.failed for f in (bar_figure, mark_figure)])
    axes[0].set_ylim(0, 1050)
    if series_keys:
        axes[0].legend(fontsize=8)
    axes[-1].set_xticks(range(len(xs)), xs, fontsize=8)
    axes[-1].set_xlabel(x_key or "point")
    axes[0].set_title(title, fontsize=10)
    figure.tight_layout()
    return figure


@dataclass
class _Bars:
    """One series' bars in a panel: where, how high (the mean over seeds), the whiskers."""

    positions: list[float] = field(default_factory=list)
    means: list[float] = field(default_factory=list)
    whiskers: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))

    def spread(self) -> tuple[list[float], list[float]] | None:
        """The whiskers, None if no bar has any (one seed)."""
        return self.whiskers if any(self.whiskers[0] + self.whiskers[1]) else None


def _bars(groups: dict, xs: list[str], values: tuple[str, ...], n: int, width: float,
          figure_of: PointFigure, axis: Axes | None) -> _Bars:
    """The `n`-th series' (`values`) bars; on `axis`, the status of points that measured nothing."""
    bars = _Bars()
    for i, x in enumerate(xs):
        members = groups.get((values, x))
        if not members:
            continue
        position = i - 0.4 + width * (n + 0.5)
        measured = [v for v in (figure_of(r) for r in members if not r.failed) if v is not None]
        mean, low, high = _mean_and_range(measured)
        bars.positions.append(position)
        bars.means.append(mean)
        bars.whiskers[0].append(low)
        bars.whiskers[1].append(high)
        if not measured and axis is not None:
            axis.annotate(members[0].status, (position, 0), xycoords=("data", "axes fraction"), ha="center",
                          va="bottom", color="#c44e52", fontsize=7, rotation=90)
    return bars


def _log_scale_if_spread(axis: Axes, values: list[float | None]) -> None:
    """A log scale when the positive `values` span `LOG_SPAN` or more."""
    measured = [v for v in values if v is not None and v > 0]
    if measured and max(measured) >= LOG_SPAN * min(measured):
        axis.set_yscale("log")
        axis.set_ylim(min(measured) / 2, max(measured) * 2)
