"""`shufflesim run`: one scenario on an in-process cluster (or on Spark), and the files of the run.

Builds the scenario's program, compiles it, runs it in the scenario's mode (sim:
virtual time, deterministic for the seed; realtime: TCP on loopback), then writes
plan.json, metrics.parquet, summary.json, (with a trace) trace.jsonl and, from those,
report.html.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph import ExecutionGraph
from scenarios.build import build_program, compile_errors_named
from scenarios.outputs import (METRICS_FILE, PLAN_FILE, SUMMARY_FILE, TRACE_FILE, checkpoint_figures, write_metrics,
                               write_plan, write_summary)
from scenarios.perfetto import PERFETTO_FILE
from scenarios.placement import scenario_plan_json
from scenarios.report import REPORT_FILE, write_report
from scenarios.scenario_file import Scenario, ScenarioError, settings_of
from scenarios.staging import make_staging, remove_stale_staging
from shuffle import kernel
from shuffle.buffer.network_buffer_pool import InsufficientBuffersError
from shuffle.trace import NULL_TRACER, Tracer
from shuffle.transport.auth import secret_from_text
from taskmgr.cluster import ClusterConfig, ProgressCallback, StopCheck, run_job
from taskmgr.faults import SIM_ONLY, Fault
from taskmgr.failover import RestoreNotSupportedError, check_restartable
from taskmgr.jobmanager import JobConfig, JobResult
from taskmgr.metrics.summary import subtask_max
from taskmgr.scheduler import slots_needed
from taskmgr.taskmanager import task_manager_name

if TYPE_CHECKING:
    from scenarios.spark_run import SparkEngine

#: Metrics of the printed table: (header, Flink metric name, format, aggregate over the
#: vertex's subtasks). The max columns are what Flink's web UI writes on each job graph node
#: ("Backpressured (max)", "Busy (max)"): one hot subtask shows, where a mean hides it.
TABLE_COLUMNS = (
    ("bp max", "backPressuredTimeMsPerSecond", "{:.0f}", "max"),
    ("busy max", "busyTimeMsPerSecond", "{:.0f}", "max"),
    ("backpressured", "backPressuredTimeMsPerSecond", "{:.0f}", "mean"),
    ("busy", "busyTimeMsPerSecond", "{:.0f}", "mean"),
    ("idle", "idleTimeMsPerSecond", "{:.0f}", "mean"),
    ("in/s", "numRecordsInPerSecond", "{:.0f}", "mean"),
    ("out/s", "numRecordsOutPerSecond", "{:.0f}", "mean"),
    ("outPool", "outPoolUsage", "{:.2f}", "mean"),
    ("inPool", "inPoolUsage", "{:.2f}", "mean"),
)


#: Where a cluster's secret comes from when the scenario does not give one.
SECRET_VARIABLE = "SHUFFLESIM_SECRET"


#: The files of a run folder: one this run did not write is a previous run's, and is removed
#: (a stale trace.jsonl would otherwise show up in this run's report).
RUN_FILES = (PLAN_FILE, SUMMARY_FILE, METRICS_FILE, TRACE_FILE, REPORT_FILE, PERFETTO_FILE)


class OutputDirError(ValueError):
    """The --out folder cannot be created or written."""


@dataclass
class RunOutcome:
    summary: dict[str, Any]
    result: JobResult
    #: Staging folders of earlier runs into the same --out whose process was gone: removed.
    stale_removed: list[Path] = field(default_factory=list)


def summary_of(scenario: Scenario, result: JobResult, engine: str = "local",
               master: str | None = None) -> dict[str, Any]:
    """summary.json (ARCHITECTURE.md): steady state per vertex, record counts, invariants."""
    summary: dict[str, Any] = {
        "scenario": scenario.name,
        "mode": scenario.mode,
        "seed": scenario.seed,
        "status": result.status.value,
        "duration_s": result.duration,
        "vertices": [vertex | ({"latency_ms": result.latency_summary(vertex["name"])}
                               if vertex["name"] in result.latency else {})
                     | {"end_time_s": result.vertex_end_times.get(vertex["name"])}
                     for vertex in result.vertex_summaries()],
        # End to end, source to sink, over the second half of the run (all sinks together).
        "latency_ms": result.latency_summary(),
        # Per triggered checkpoint: status, type, duration, start delay, alignment, persisted bytes.
        "checkpoints": result.checkpoints,
        "records": {"emitted": result.records_emitted, "received": result.records_received},
        "invariants": result.invariants | {"violations": result.invariant_violations()},
        # Where it ran: the engine, the Spark master (None for local runs) and the TaskManagers.
        "cluster": {"engine": engine, "master": master, "task_managers": result.task_managers},
        # The scenario as it ran (defaults and --set applied), for reports and `shufflesim compare`.
        "settings": settings_of(scenario),
    }
    for vertex in summary["vertices"]:
        states = result.task_states.get(vertex["name"], [])
        for subtask in vertex.get("subtasks", []):
            subtask["state"] = states[subtask["index"]] if subtask["index"] < len(states) else None
    summary |= restarts_summary(result)
    if result.error is not None:
        summary["error"] = failure_text(scenario, result.error)
        # Flink's exception history entry of the root cause: which task, where, when
        summary["failure"] = {"cause": summary["error"], "task": result.failed_task,
                              "task_manager": result.failed_task_manager, "failed_at_s": result.failed_at}
    if result.ended_early:
        # The steady state (vertex metrics and latency_ms) is then the samples of the second half
        # of what ran, not of the planned duration.
        summary["steady_state_from_s"] = result.duration / 2
    if result.stopped_early:
        summary["interrupted"] = {"at_s": result.duration,
                                  "note": "the run was stopped before its duration; results cover 0..at_s, "
                                          "their steady state (vertex metrics and latency_ms) the samples "
                                          "from steady_state_from_s (at_s / 2) on"}
    return summary


def failure_text(scenario: Scenario, error: BaseException) -> str:
    """The root cause of a failed job; for too little network memory, the scenario keys to change
    (the runtime's message names Flink's configuration keys)."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, InsufficientBuffersError):
        network = scenario.network_config()
        text += (f" In the scenario: cluster.network_memory ({network.network_memory} bytes per TaskManager) holds "
                 f"{network.network_memory // network.buffer_size} buffers of network.buffer_size "
                 f"({network.buffer_size} bytes): raise cluster.network_memory, or lower network.buffer_size, "
                 f"network.exclusive_buffers_per_channel or network.floating_buffers_per_gate.")
    return text


def restarts_summary(result: JobResult) -> dict[str, Any]:
    """summary.json's restarts: how many, each one (taskmgr.failover.RestartRecord), the records
    replayed over all of them and, when the failure stood, the strategy that suppressed recovery."""
    history = [record.to_json() for record in result.restart_history]
    summary: dict[str, Any] = {"restarts": len(history), "restart_history": history,
                               "records_replayed": sum(record["records_replayed"] for record in history)}
    if result.recovery_suppressed_by is not None:
        summary["recovery_suppressed_by"] = result.recovery_suppressed_by
    return summary


def format_restarts(summary: dict[str, Any]) -> str | None:
    """The line `shufflesim run` prints about restarts (None: the job did not restart)."""
    history = summary.get("restart_history") or []
    if not history:
        return None
    failed_at = ", ".join(f"{record['failed_at_s']:.3f}" for record in history)
    downtime = ", ".join(f"{record['downtime_ms']:.0f}" for record in history)
    return (f"restarts {len(history)} (failed at {failed_at} s; downtime {downtime} ms; "
            f"records replayed {summary['records_replayed']})")


def check_runnable(scenario: Scenario, graph: ExecutionGraph) -> None:
    """Settings the runtime cannot honour are the scenario's mistake, found before running
    (`run`, and `flink-reference`, which runs the same job on Flink's cluster of that size)."""
    checkpoints = scenario.checkpoints
    if checkpoints.aligned_timeout > 0 and checkpoints.mode != "unaligned":
        raise ScenarioError(f"{scenario.source_path}: checkpoints.aligned_timeout needs mode = \"unaligned\" "
                            f"(Flink's unaligned checkpoints start aligned and switch after the timeout), "
                            f"not {checkpoints.mode!r}")
    try:
        check_restartable(graph, scenario.restart_strategy())
    except RestoreNotSupportedError as e:
        raise ScenarioError(f"{scenario.source_path}: [restart]: {e}") from None
    if not scenario.cluster.heartbeat_interval < scenario.cluster.heartbeat_timeout:
        raise ScenarioError(f"{scenario.source_path}: cluster.heartbeat_interval "
                            f"({scenario.cluster.heartbeat_interval:g} s) must be below cluster.heartbeat_timeout "
                            f"({scenario.cluster.heartbeat_timeout:g} s)")
    _check_faults(scenario, graph)
    needed = slots_needed(graph)
    cluster = scenario.cluster
    available = cluster.task_managers * cluster.slots_per_task_manager
    if needed > available:
        raise ScenarioError(
            f"{scenario.source_path}: cluster: the job needs {needed} slots, the cluster has {available} "
            f"(task_managers = {cluster.task_managers}, slots_per_task_manager = {cluster.slots_per_task_manager})")


def cluster_secret(scenario: Scenario) -> bytes | None:
    """The scenario's `[cluster] secret`, else $SHUFFLESIM_SECRET, else None (random per run)."""
    text = scenario.cluster.secret
    if text is None:
        text = os.environ.get(SECRET_VARIABLE)
        if text is None:
            return None
    try:
        return secret_from_text(text)
    except ValueError as e:
        raise ScenarioError(f"{SECRET_VARIABLE}: {e}") from None


def _check_faults(scenario: Scenario, graph: ExecutionGraph) -> None:
    """Faults must name TaskManagers and vertices the run has; link faults need sim mode."""
    names = {task_manager_name(i) for i in range(scenario.cluster.task_managers)}
    vertices = {vertex.name: vertex for vertex in graph.job_graph.vertices}
    for i, fault in enumerate(scenario.faults):
        where = f"{scenario.source_path}: faults[{i}]"
        for key, tm in (("task_manager", fault.task_manager), *(("between", tm) for tm in fault.between or ())):
            if tm is not None and tm not in names:
                raise ScenarioError(f"{where}.{key}: no TaskManager {tm!r} "
                                    f"(the cluster has {', '.join(sorted(names))})")
        if fault.vertex is not None:
            matches = [vertex for vertex in vertices.values() if vertex.is_named(fault.vertex)]
            if not matches:
                raise ScenarioError(f"{where}.vertex: no vertex {fault.vertex!r} (vertices: {', '.join(vertices)})")
            if fault.subtask >= matches[0].parallelism:
                raise ScenarioError(f"{where}.subtask: {matches[0].name!r} has {matches[0].parallelism} subtasks, "
                                    f"no subtask {fault.subtask}")
        if fault.kind in SIM_ONLY and scenario.mode != "sim":
            raise ScenarioError(f"{where}: a {fault.kind!r} fault needs the simulated link (mode = \"sim\")")


def make_out_dir(out_dir: Path) -> None:
    """Create `out_dir` if needed; `OutputDirError` if it cannot be created or written."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputDirError(f"--out {out_dir}: a file, not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputDirError(f"--out {out_dir}: cannot create the folder: {e.strerror}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise OutputDirError(f"--out {out_dir}: the folder is not writable")


def run_scenario(scenario: Scenario, out_dir: Path, trace: bool = False,
                 progress: ProgressCallback | None = None, should_stop: StopCheck | None = None,
                 engine: SparkEngine | None = None) -> RunOutcome:
    """Run `scenario` and write its outputs into `out_dir`: in this process, or with its
    TaskManagers in Spark executors when `engine` is given (scenarios.spark_run).

    Raises `ScenarioError` for settings the runtime cannot run and `OutputDirError` for
    an --out folder it cannot write, both before running. The outputs are written into a
    hidden folder inside `out_dir` and moved into place only once all are complete: a run
    that is aborted leaves its previous outputs, never a half-written set (one killed
    outright leaves the hidden folder, which a later run removes: scenarios.staging). `should_stop`
    (asked as progress is reported) ends the run early; its outputs then say so.
    """
    out_dir = Path(out_dir)
    env = build_program(scenario)
    with compile_errors_named(scenario.source_path):
        graph = env.get_execution_graph()
    network = scenario.network_config()
    check_runnable(scenario, graph)
    if engine is not None:
        from scenarios.spark_run import check_runnable_on_spark

        check_runnable_on_spark(scenario, trace)
    make_out_dir(out_dir)
    stale = remove_stale_staging(out_dir)
    staging = make_staging(out_dir)
    try:
        outcome = _run_into(scenario, env, graph, network, staging, trace, progress, should_stop, engine)
        outcome.stale_removed = stale
        written = sorted(staging.iterdir())
        for path in written:
            os.replace(path, out_dir / path.name)
        for name in set(RUN_FILES) - {path.name for path in written}:
            (out_dir / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return outcome


def _run_into(scenario: Scenario, env: Any, graph: ExecutionGraph, network: Any, out_dir: Path, trace: bool,
              progress: ProgressCallback | None, should_stop: StopCheck | None,
              engine: SparkEngine | None) -> RunOutcome:
    write_plan(out_dir, scenario_plan_json(scenario, env))
    cluster = ClusterConfig(scenario.mode, scenario.cluster.task_managers, scenario.cluster.slots_per_task_manager,
                            network, cluster_secret(scenario), scenario.cluster.heartbeat_interval,
                            scenario.cluster.heartbeat_timeout)
    job = JobConfig(scenario.duration, scenario.seed, scenario.metrics.sample_period, scenario.cluster.task_managers,
                    checkpoint_costs=scenario.checkpoints.costs(),
                    restart=scenario.restart_strategy(), placement=scenario.cluster.placement,
                    task_cancellation_timeout=scenario.cluster.task_cancellation_timeout)
    with contextlib.ExitStack() as stack:
        tracer = NULL_TRACER
        if trace:
            tracer = Tracer(out=stack.enter_context(open(out_dir / TRACE_FILE, "w")))
        faults = tuple(Fault(**dataclasses.asdict(spec)) for spec in scenario.faults)
        if engine is None:
            result = kernel.run(run_job, graph, cluster, job, tracer, progress, should_stop, faults,
                                mode=scenario.mode)
        else:
            from scenarios.spark_run import run_on_spark

            result = run_on_spark(engine.spark, engine.master, graph, cluster, job, faults, progress, should_stop)
    write_metrics(out_dir, result.metrics)
    summary = summary_of(scenario, result, "local" if engine is None else "spark",
                         None if engine is None else engine.master)
    write_summary(out_dir, summary)
    write_report(out_dir)
    return RunOutcome(summary, result)


def format_checkpoints(summary: dict[str, Any]) -> str | None:
    """One line on the run's checkpoints: how many completed and failed, p50 duration."""
    figures = checkpoint_figures(summary)
    if not figures:
        return None
    line = (f"checkpoints: {figures['checkpoints_completed']} completed, {figures['checkpoints_failed']} failed, "
            f"{figures['checkpoints_in_progress']} in progress")
    if figures["checkpoint_duration_p50_ms"] is not None:
        line += f", p50 duration {figures['checkpoint_duration_p50_ms']:.1f} ms"
    return line


def format_table(summary: dict[str, Any]) -> str:
    """The per-vertex table `shufflesim run` prints."""
    headers = ["vertex", "p", "level"] + [header for header, _, _, _ in TABLE_COLUMNS]
    rows = []
    for vertex in summary["vertices"]:
        cells = [vertex["name"], str(vertex["parallelism"]), vertex["backpressure_level"]]
        for _, name, fmt, aggregate in TABLE_COLUMNS:
            value = vertex["metrics"].get(name) if aggregate == "mean" else subtask_max(vertex, name)
            cells.append("-" if value is None else fmt.format(value))
        rows.append(cells)
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in [headers, *rows]]
    return "\n".join(lines)
