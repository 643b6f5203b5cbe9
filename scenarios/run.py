"""`shufflesim run`: one scenario on an in-process cluster, and the files of the run.

Builds the scenario's program, compiles it, runs it in the scenario's mode (sim:
virtual time, deterministic for the seed; realtime: TCP on loopback), then writes
plan.json, metrics.parquet, summary.json and (with a trace) trace.jsonl.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph import ExecutionGraph, plan_json
from scenarios.build import build_program
from scenarios.outputs import TRACE_FILE, write_metrics, write_plan, write_summary
from scenarios.scenario_file import Scenario, ScenarioError
from shuffle.trace import NULL_TRACER, Tracer
from taskmgr import clock
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.jobmanager import JobConfig, JobResult
from taskmgr.rpc import REGISTRY
from taskmgr.scheduler import slots_needed

#: Metrics of the printed table: (header, Flink metric name, format).
TABLE_COLUMNS = (
    ("backpressured", "backPressuredTimeMsPerSecond", "{:.0f}"),
    ("busy", "busyTimeMsPerSecond", "{:.0f}"),
    ("idle", "idleTimeMsPerSecond", "{:.0f}"),
    ("in/s", "numRecordsInPerSecond", "{:.0f}"),
    ("out/s", "numRecordsOutPerSecond", "{:.0f}"),
    ("outPool", "outPoolUsage", "{:.2f}"),
    ("inPool", "inPoolUsage", "{:.2f}"),
)


class OutputDirError(ValueError):
    """The --out folder cannot be created or written."""


@dataclass
class RunOutcome:
    summary: dict[str, Any]
    result: JobResult


def summary_of(scenario: Scenario, result: JobResult) -> dict[str, Any]:
    """summary.json (ARCHITECTURE.md): steady state per vertex, record counts, invariants."""
    summary: dict[str, Any] = {
        "scenario": scenario.name,
        "mode": scenario.mode,
        "seed": scenario.seed,
        "status": result.status.value,
        "duration_s": result.duration,
        "vertices": result.vertex_summaries(),
        # Per checkpoint: duration, alignment, start delay, persisted bytes. The runtime
        # takes no checkpoints yet (run_scenario rejects scenarios that ask for them).
        "checkpoints": [],
        "records": {"emitted": result.records_emitted, "received": result.records_received},
        "invariants": result.invariants | {"violations": result.invariant_violations()},
    }
    if result.error is not None:
        summary["error"] = f"{type(result.error).__name__}: {result.error}"
    return summary


def _check_runnable(scenario: Scenario, graph: ExecutionGraph) -> None:
    """Settings the runtime cannot honour are the scenario's mistake, found before running."""
    checkpointing = graph.job_graph.checkpointing
    if checkpointing is not None and checkpointing.enabled:
        where = (f"checkpoints.interval = {scenario.checkpoints.interval:g} s" if scenario.checkpoints.enabled
                 else f"job.program {scenario.job.program!r} enables checkpointing")
        raise ScenarioError(f"{scenario.source_path}: {where}: the runtime does not take checkpoints yet "
                            "(barriers are passed through); remove it to run ('shufflesim plan' shows it)")
    needed = slots_needed(graph)
    cluster = scenario.cluster
    available = cluster.task_managers * cluster.slots_per_task_manager
    if needed > available:
        raise ScenarioError(
            f"{scenario.source_path}: cluster: the job needs {needed} slots, the cluster has {available} "
            f"(task_managers = {cluster.task_managers}, slots_per_task_manager = {cluster.slots_per_task_manager})")


def make_out_dir(out_dir: Path) -> None:
    """Create `out_dir` if needed; `OutputDirError` if it cannot be created or written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputDirError(f"--out {out_dir}: cannot create the folder: {e.strerror}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise OutputDirError(f"--out {out_dir}: the folder is not writable")


def _reset_object_registry() -> None:
    """Start every run with reference ids from "ref-0", as in a fresh process.

    The in-process RPC registry numbers its references for the life of the process, and a
    reference's length is part of the RPC frames that cross the simulated links: without
    this, the fifth run of a scenario in one process (a serial sweep, a reused Spark
    worker) differs from `shufflesim run` in the last digits of its metrics. The registry
    holds nothing between runs. (A per-run registry in taskmgr would make this go away.)
    """
    REGISTRY.__init__()


def run_scenario(scenario: Scenario, out_dir: Path, trace: bool = False) -> RunOutcome:
    """Run `scenario` and write its outputs into `out_dir`.

    Raises `ScenarioError` for settings the runtime cannot run and `OutputDirError` for
    an --out folder it cannot write, both before running.
    """
    out_dir = Path(out_dir)
    env = build_program(scenario)
    graph = env.get_execution_graph()
    network = scenario.network_config()
    _check_runnable(scenario, graph)
    make_out_dir(out_dir)
    write_plan(out_dir, plan_json(env))
    cluster = ClusterConfig(scenario.mode, scenario.cluster.task_managers, scenario.cluster.slots_per_task_manager,
                            network)
    job = JobConfig(scenario.duration, scenario.seed, scenario.metrics.sample_period, scenario.cluster.task_managers)
    with contextlib.ExitStack() as stack:
        tracer = NULL_TRACER
        if trace:
            tracer = Tracer(out=stack.enter_context(open(out_dir / TRACE_FILE, "w")))
        _reset_object_registry()
        result = clock.run(run_job, graph, cluster, job, tracer, mode=scenario.mode, seed=scenario.seed)
    write_metrics(out_dir, result.metrics)
    summary = summary_of(scenario, result)
    write_summary(out_dir, summary)
    return RunOutcome(summary, result)


def format_table(summary: dict[str, Any]) -> str:
    """The per-vertex table `shufflesim run` prints."""
    headers = ["vertex", "p", "level"] + [header for header, _, _ in TABLE_COLUMNS]
    rows = []
    for vertex in summary["vertices"]:
        metrics = vertex["metrics"]
        cells = [vertex["name"], str(vertex["parallelism"]), vertex["backpressure_level"]]
        cells += [fmt.format(metrics[name]) if name in metrics else "-" for _, name, fmt in TABLE_COLUMNS]
        rows.append(cells)
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in [headers, *rows]]
    return "\n".join(lines)
