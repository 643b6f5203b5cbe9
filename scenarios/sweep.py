"""`shufflesim sweep`: every point of a sweep is one sim run, in a Spark task or in this process.

A point's run is `run_scenario` of the base scenario with the point's overrides, exactly
what `shufflesim run SCENARIO --set KEY=VALUE ...` runs, and writes the same files into
`OUT/points/<point>/`. The results are one table, `OUT/results.parquet`: one row per
(point, vertex) with `point`, `seed`, one string column per swept key (the value as
written in the sweep file), `vertex`, `parallelism`, `status`, `error`,
`backpressure_level` and one column per steady-state metric (Flink's names, as in
summary.json: a vertex's value is the mean over its subtasks); where a point took
checkpoints, the point's checkpoint figures too (`checkpoints_completed`, ...), and where a
point's sinks measured latency, its `latency_p50_ms` and `latency_p99_ms`. A point that did not run
(invalid overrides, or a crash of the run itself) is one row with a null vertex. A sweep
into the folder of an earlier one first removes that one's points, table and plot.

Statuses: the job's (`FINISHED`, `FAILED`, `CANCELED`), `INVALID` (the scenario or the
runtime rejects the point's overrides) or `ERROR` (the run crashed, or its Spark task failed:
its Python worker died). A point failed if
its status is not FINISHED or it has an error (e.g. a broken end-of-run invariant).
"""

from __future__ import annotations

import functools
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from scenarios.outputs import CHECKPOINT_FIGURES, LATENCY_FIGURES, SUMMARY_FILE, checkpoint_figures, latency_figures
from scenarios.run import make_out_dir, run_scenario
from scenarios.scenario_file import ScenarioError
from scenarios.sweep_file import Sweep, SweepPoint
from scenarios.sweep_report import PLOT_FILE, write_plot
from taskmgr.cluster import ProgressCallback

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RESULTS_FILE = "results.parquet"
POINTS_DIR = "points"
INVALID = "INVALID"
ERROR = "ERROR"


class Progress(Protocol):
    """Told the points done of the total, and (run one by one) how far the running one is."""

    def __call__(self, done: int, total: int, running: str | None = None) -> None: ...


@dataclass(frozen=True)
class VertexResult:
    """A job vertex's steady state in one point's run (summary.json's `vertices` entry)."""

    name: str
    parallelism: int
    backpressure_level: str
    #: Flink metric name -> steady-state value (None where summary.json has null).
    metrics: dict[str, float | None]


@dataclass(frozen=True)
class PointResult:
    """What one point's run gave: its status, root cause and per-vertex steady state."""

    point: str
    seed: int | None
    #: Swept key -> its value as written in the sweep file.
    values: dict[str, str]
    status: str
    error: str | None = None
    vertices: tuple[VertexResult, ...] = field(default=())
    #: What its checkpoints came to (`checkpoint_figures`; empty: it took none).
    checkpoints: dict[str, float | None] = field(default_factory=dict)
    #: Its latency over all sinks (`latency_figures`; empty: no record reached a sink).
    latency: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status != "FINISHED" or self.error is not None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _swept_values(sweep: Sweep, point: SweepPoint) -> dict[str, str]:
    return {key: value for key, value in point.written().items() if key in sweep.keys}


def run_point(sweep: Sweep, point: SweepPoint, points_dir: str,
              progress: ProgressCallback | None = None) -> PointResult:
    """Run one point into `points_dir/<point id>/`; every failure becomes the result's status.
    `progress` is the run's (virtual time, records emitted)."""
    result = functools.partial(PointResult, point.id, point.seed, _swept_values(sweep, point))
    try:
        outcome = run_scenario(sweep.scenario(point), Path(points_dir) / point.id, progress=progress)
    except ScenarioError as e:
        return result(INVALID, str(e))
    except Exception as e:  # the run itself crashed: report it, let the other points run
        return result(ERROR, f"{type(e).__name__}: {e}")
    summary = outcome.summary
    violations = summary["invariants"]["violations"]
    error = summary.get("error") or ("invariant broken: " + "; ".join(violations) if violations else None)
    vertices = tuple(
        VertexResult(v["name"], v["parallelism"], v["backpressure_level"],
                     {m: _finite(x) for m, x in v["metrics"].items()})
        for v in summary["vertices"]
    )
    return result(summary["status"], error, vertices, checkpoint_figures(summary), latency_figures(summary))


# --- the results table -------------------------------------------------------------------

def results_table(results: Sequence[PointResult], keys: Sequence[str]) -> pa.Table:
    """The results table: one row per (point, vertex); a point without vertices has one row.
    With checkpoints (some point took one) each row also has its point's `CHECKPOINT_FIGURES`,
    with latency (some point's sinks measured it) its `LATENCY_FIGURES`."""
    metrics = sorted({metric for r in results for v in r.vertices for metric in v.metrics})
    swept = [key for key in keys if key != "seed"]  # the seed column holds it
    checkpoints = [(name, pa.float64() if name.endswith("_ms") else pa.int64())
                   for name in CHECKPOINT_FIGURES if any(r.checkpoints for r in results)]
    latency = [(name, pa.float64()) for name in LATENCY_FIGURES if any(r.latency for r in results)]
    schema = pa.schema(
        [("point", pa.string()), ("seed", pa.int64())] + [(key, pa.string()) for key in swept]
        + [("vertex", pa.string()), ("parallelism", pa.int64()), ("status", pa.string()), ("error", pa.string())]
        + checkpoints + latency + [("backpressure_level", pa.string())]
        + [(metric, pa.float64()) for metric in metrics])
    rows = []
    for result in results:
        common = result.values | result.checkpoints | result.latency | {"point": result.point, "seed": result.seed,
                                                       "status": result.status, "error": result.error}
        for vertex in result.vertices or (None,):
            row = dict(common)
            if vertex is not None:
                row |= {"vertex": vertex.name, "parallelism": vertex.parallelism,
                        "backpressure_level": vertex.backpressure_level} | vertex.metrics
            rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema)


def write_results(path: Path, table: pa.Table) -> None:
    """`results.parquet`, replacing an earlier one (also a folder, as Spark writes them)."""
    if path.is_dir():
        shutil.rmtree(path)
    pq.write_table(table, path)


# --- running a sweep ---------------------------------------------------------------------


@dataclass
class SweepOutcome:
    sweep: Sweep
    results: list[PointResult]
    out_dir: Path
    #: The results table, as written to `results.parquet`.
    table: pa.Table

    @property
    def failed(self) -> list[PointResult]:
        return [result for result in self.results if result.failed]

    @property
    def results_path(self) -> Path:
        return self.out_dir / RESULTS_FILE

    def dataframe(self, spark: SparkSession) -> DataFrame:
        """The results table as a Spark DataFrame (e.g. to join sweeps or aggregate over seeds)."""
        return spark.createDataFrame(self.table)


def run_sweep(sweep: Sweep, out_dir: Path, spark: SparkSession | None = None,
              on_progress: Progress | None = None) -> SweepOutcome:
    """Run every point of `sweep`, one Spark task each (in this process, in order, if `spark` is
    None); a point whose Spark task failed (its Python worker died) is an `ERROR` row, the others
    run (after such a failure, which ends the Spark job, the points run again, a job each).

    Writes `out_dir/points/<point>/` per point, `out_dir/results.parquet` and the plot
    `out_dir/sweep.png`, having first removed those of an earlier sweep (`clear_earlier_sweep`).
    Raises `OutputDirError` (before running) if `out_dir` cannot be written.
    """
    out_dir = Path(out_dir).resolve()
    make_out_dir(out_dir)
    clear_earlier_sweep(out_dir)
    # each Spark job ships the task: without the other points, not a sweep's worth per point
    task = functools.partial(run_point, replace(sweep, points=()), points_dir=str(out_dir / POINTS_DIR))
    try:
        if spark is None:
            results = []
            total = len(sweep.points)
            for point in sweep.points:
                within = None if on_progress is None else _running_point(on_progress, len(results), total, point.id)
                results.append(task(point, progress=within))
                if on_progress is not None:
                    on_progress(len(results), total)
        else:
            from scenarios.spark_session import SparkJobError, TaskFailed, run_isolated, run_tasks

            try:  # one Spark job for all points: the fastest way
                outcomes: Sequence[PointResult | TaskFailed] = run_tasks(spark, task, sweep.points, on_progress)
            except SparkJobError:
                # a point's task failed (its Python worker died) and took the job with it: the
                # points again, a job each, so that it fails alone (runs are deterministic:
                # the points done give the same results again)
                outcomes = run_isolated(spark, task, sweep.points, on_progress)
            results = [
                PointResult(point.id, point.seed, _swept_values(sweep, point), ERROR,
                            f"its Spark task failed: {outcome.cause}") if isinstance(outcome, TaskFailed) else outcome
                for point, outcome in zip(sweep.points, outcomes)
            ]
    finally:  # also on Ctrl-C: the points done keep their folders, the point running loses its
        _remove_points_without_outputs(out_dir / POINTS_DIR)
    # The rows are on the driver already: write them here, so that results.parquet is the
    # same file whichever way the points ran, and lands on the driver's disk on a cluster.
    outcome = SweepOutcome(sweep, results, out_dir, results_table(results, sweep.keys))
    write_results(outcome.results_path, outcome.table)
    write_plot(results, sweep.keys, out_dir / PLOT_FILE, f"{sweep.source_path.name} ({sweep.scenario_path.name})")
    return outcome


def _running_point(on_progress: Progress, done: int, total: int, name: str) -> ProgressCallback:
    """The progress callback of the point `name` run one by one: how far it is, in the sweep's line."""
    def within(job_time: float, _records: int | None) -> None:
        on_progress(done, total, f"{name} at {job_time:.0f} s")
    return within


def clear_earlier_sweep(out_dir: Path) -> None:
    """Remove what an earlier sweep wrote into `out_dir` (its points, results and plot; other
    files stay): from the start of a sweep, the folder holds only this sweep's, so an
    interrupted one leaves its points done and nothing that would pass for them."""
    for path in (out_dir / POINTS_DIR, out_dir / RESULTS_FILE, out_dir / PLOT_FILE):
        if path.is_dir():  # also a results.parquet as Spark writes them
            shutil.rmtree(path)
        path.unlink(missing_ok=True)


def _remove_points_without_outputs(points_dir: Path) -> None:
    """Remove the point folders without a run's outputs: a run that crashed or was interrupted
    leaves its folder empty (an invalid point makes none)."""
    if points_dir.is_dir():
        for path in points_dir.iterdir():
            if path.is_dir() and not (path / SUMMARY_FILE).exists():
                shutil.rmtree(path)


def points_done(out_dir: Path) -> list[str]:
    """The points whose runs are in `out_dir/points/` (what an interrupted sweep leaves)."""
    points_dir = Path(out_dir) / POINTS_DIR
    if not points_dir.is_dir():
        return []
    return sorted(path.name for path in points_dir.iterdir() if (path / SUMMARY_FILE).exists())


def read_results(out_dir: Path) -> pa.Table:
    """The results table of a sweep."""
    return pq.read_table(Path(out_dir) / RESULTS_FILE)
