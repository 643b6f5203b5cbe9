"""What tasks and jobs give back: the TaskManagers' job reports and the merged JobResult.

A TaskManager reports, per job, what its tasks gathered (metrics, collected values,
verifications, latency, counts); the JobManager merges the reports into a `JobResult`.
A module of its own so that the TaskManager, the JobManager and the operators share
these types without importing each other.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from graph import ExecutionGraph
from taskmgr.deployment import execution_id
from taskmgr.metrics.latency import LatencyHistogram
from taskmgr.metrics.summary import VertexLayout, vertex_summaries
from taskmgr.metrics.table import MetricTable

if TYPE_CHECKING:
    from taskmgr.failover import RestartRecord

#: Sequence numbers of generator subtask i start at i << ORIGIN_SHIFT, so a sink can tell
#: which source subtask a record comes from.
ORIGIN_SHIFT = 40

#: Operator kinds that emit exactly one record per input record.
_ONE_TO_ONE = frozenset({"source", "map", "keyed_reduce", "sink"})


@dataclass
class Verification:
    """What the verifying sinks of one name saw: sequence numbers per source subtask
    (origin) and how often the order per (channel, origin) broke."""

    seqs: dict[int, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))
    out_of_order: int = 0

    def compacted(self) -> Verification:
        """The same, one array per origin (what a TaskManager reports: pickling thousands of
        small arrays costs ~100 B each on top of their data)."""
        seqs = defaultdict(list, {origin: [np.concatenate(arrays)] for origin, arrays in self.seqs.items() if arrays})
        return Verification(seqs, self.out_of_order)

    def merge(self, other: Verification) -> None:
        for origin, arrays in other.seqs.items():
            self.seqs[origin].extend(arrays)
        self.out_of_order += other.out_of_order

    def report(self, emitted_per_origin: dict[int, int], duplicates_expected: bool = False,
               order_kept: bool = True) -> dict[str, Any]:
        """Counts of received, out-of-order, duplicated and missing records; `duplicates_expected`
        (a restore from an at-least-once checkpoint): duplicates do not make it fail;
        `order_kept` False (`keeps_source_order`): out-of-order is None, not checked."""
        received = duplicates = missing = 0
        for origin in set(self.seqs) | set(emitted_per_origin):
            arrays = self.seqs.get(origin, [])
            seqs = np.sort(np.concatenate(arrays)) if arrays else np.zeros(0, dtype=np.int64)
            # Distinct values of the sorted array (np.unique hashes, ~10x slower on millions).
            distinct = seqs[np.concatenate(([True], seqs[1:] != seqs[:-1]))] if len(seqs) else seqs
            received += len(seqs)
            duplicates += len(seqs) - len(distinct)
            expected = emitted_per_origin.get(origin, 0)
            base = origin << ORIGIN_SHIFT
            valid = int(np.count_nonzero((distinct >= base) & (distinct < base + expected)))
            missing += expected - valid
        out_of_order = self.out_of_order if order_kept else None
        ok = (duplicates == 0 or duplicates_expected) and missing == 0 and not out_of_order
        return {"received": received, "out_of_order": out_of_order, "duplicates": duplicates,
                "missing": missing, "ok": ok}


class JobStatus(str, enum.Enum):
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


class JobExecutionError(RuntimeError):
    """The job failed; the root cause is `__cause__`."""


@dataclass
class JobResult:
    job_id: str
    status: JobStatus
    duration: float
    error: BaseException | None = None
    collected: dict[str, list[Any]] = field(default_factory=dict)
    verifications: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Sink vertex name -> end-to-end latency of its records over the steady state (see `ended_early`).
    latency: dict[str, LatencyHistogram] = field(default_factory=dict)
    records_emitted: int = 0
    records_received: int = 0
    metrics: pa.Table = field(default_factory=lambda: MetricTable().to_arrow())
    invariants: dict[str, Any] = field(default_factory=dict)
    #: Vertex name -> the TaskManager of each subtask.
    placement: dict[str, list[str]] = field(default_factory=dict)
    #: The run was ended before its duration (Ctrl-C, SIGTERM): its results cover `duration` only.
    stopped_early: bool = False
    #: The job ended before its duration (stopped, failed or finished): its steady state and
    #: `latency` are those of the second half of `duration`, not of the planned duration.
    ended_early: bool = False
    #: One entry per triggered checkpoint (summary.json's `checkpoints`).
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    #: Vertex name -> when its last subtask finished (job time, s; None: not all did).
    vertex_end_times: dict[str, float | None] = field(default_factory=dict)
    #: The TaskManagers of the run (`JobManager.registrations`).
    task_managers: list[dict[str, Any]] = field(default_factory=list)
    #: Every restart of the job, in order (results are those of its last attempt).
    restart_history: list[RestartRecord] = field(default_factory=list)
    #: The failure stood because the restart strategy allowed no more restarts (Flink's
    #: "Recovery is suppressed by ..."): the strategy, as Flink names it.
    recovery_suppressed_by: str | None = None
    #: Where the failure that stands (`error`) came from, as Flink's exception history says:
    #: the task (``SlowMap -> Sink: Writer (1/1)``) and its TaskManager (None, None: a
    #: failure of the job itself), and when (job time, s).
    failed_task: str | None = None
    failed_task_manager: str | None = None
    failed_at: float | None = None
    #: Vertex name -> the state each subtask of the last attempt ended in (FINISHED, FAILED,
    #: CANCELED), as Flink's job details list them.
    task_states: dict[str, list[str]] = field(default_factory=dict)

    def raise_for_status(self) -> JobResult:
        """Raise JobExecutionError (root cause chained) unless the job finished."""
        if self.status is not JobStatus.FINISHED:
            raise JobExecutionError(f"Job {self.job_id} {self.status.value.lower()}: {self.error}") from self.error
        return self

    def vertex_summaries(self) -> list[dict[str, Any]]:
        """Steady state of every vertex (summary.json's `vertices`), in topological order."""
        layouts = [VertexLayout(name, task_managers) for name, task_managers in self.placement.items()]
        return vertex_summaries(self.metrics, layouts, self.duration)

    def latency_summary(self, vertex: str | None = None) -> dict[str, float] | None:
        """summary.json's `latency_ms` over the steady state: of one sink vertex, or of all
        sinks together (None: no record reached a sink in that time)."""
        if vertex is not None:
            histogram = self.latency.get(vertex)
            return histogram.summary_ms() if histogram is not None else None
        overall = LatencyHistogram()
        for histogram in self.latency.values():
            overall.merge(histogram)
        return overall.summary_ms()

    def vertex_summary(self, name: str) -> dict[str, Any]:
        """The steady state of the vertex named `name` (or whose chained name starts with it)."""
        summaries = self.vertex_summaries()
        for summary in summaries:
            if summary["name"] == name:
                return summary
        for summary in summaries:
            if summary["name"].startswith(name):
                return summary
        raise KeyError(f"no vertex {name!r} in {[s['name'] for s in summaries]}")

    def invariant_violations(self) -> list[str]:
        """The end-of-run invariants that do not hold (empty when all hold)."""
        broken = []
        if self.invariants.get("records_match") is False:
            broken.append(f"sources emitted {self.records_emitted} records, sinks received {self.records_received}")
        if self.invariants.get("buffers_leaked"):
            broken.append(f"{self.invariants['buffers_leaked']} network buffers not back in their pools")
        if self.invariants.get("credit_violations"):
            broken.append(f"{self.invariants['credit_violations']} credit violations")
        broken += [f"verifying sink {name!r}: {report}" for name, report in self.verifications.items()
                   if not report["ok"]]
        hosts = len({tm for task_managers in self.placement.values() for tm in task_managers})
        reported = self.invariants.get("task_managers_reported", hosts)
        if self.status is JobStatus.FINISHED and reported < hosts:
            broken.append(f"{hosts - reported} of the {hosts} TaskManagers that ran tasks sent no report (lost "
                          "after the job ended): their tasks' records, metrics and verifications are missing")
        return broken


def is_lossless(graph: ExecutionGraph) -> bool:
    """Whether every source record reaches exactly one sink (so emitted == received)."""
    nodes = [node for vertex in graph.job_graph.vertices for node in vertex.operators]
    edges = [edge for node in nodes for edge in node.out_edges]
    return (all(node.kind in _ONE_TO_ONE for node in nodes)
            and sum(node.kind == "sink" for node in nodes) == 1
            and all(edge.partitioner.name != "BROADCAST" and edge.output_tag is None for edge in edges))


def keeps_source_order(graph: ExecutionGraph, sink_name: str) -> bool:
    """Whether every channel into the tasks of the verifying sinks named `sink_name` carries
    each source subtask's records in the order it emitted them. Flink keeps each channel's
    order only, so that holds where the channel's producer got each source subtask's records
    in order over one channel: it read them from producers that each hold all of one source
    subtask's records (sources, or tasks behind forward exchanges only), in order."""
    from taskmgr.operators.sinks import VerifyingSink  # which imports this module

    whole: dict[int, bool] = {}  # vertex id: a source subtask's records are all in one of its subtasks
    ordered: dict[int, bool] = {}  # vertex id: its subtasks get each source subtask's records in order

    def in_one_subtask(vertex: Any) -> bool:
        if vertex.id not in whole:
            whole[vertex.id] = all(edge.partitioner.name == "FORWARD" and in_one_subtask(edge.source_vertex)
                                   for edge in vertex.inputs)
        return whole[vertex.id]

    def in_order(vertex: Any) -> bool:
        if vertex.id not in ordered:
            ordered[vertex.id] = all(in_order(edge.source_vertex) and in_one_subtask(edge.source_vertex)
                                     for edge in vertex.inputs)
        return ordered[vertex.id]

    return all(in_order(edge.source_vertex)
               for vertex in graph.job_graph.vertices
               if any(isinstance(node.sink, VerifyingSink) and node.sink.name == sink_name
                      for node in vertex.operators)
               for edge in vertex.inputs)


def merge_reports(job_id: str, placement: dict[str, str], reports_by_task_manager: dict[str, dict[str, Any]],
                  graph: ExecutionGraph, status: JobStatus, duration: float, failure: BaseException | None,
                  stopped_early: bool, ended_early: bool, checkpoints: list[dict[str, Any]],
                  replayed_at_least_once: bool = False) -> JobResult:
    """The JobResult of the TaskManagers' reports; `placement` maps execution id -> TaskManager.
    `replayed_at_least_once`: the job restarted with at-least-once checkpoints, so its sinks
    may see records twice (their counts are then not checked against the sources')."""
    reports = list(reports_by_task_manager.values())
    collected: dict[str, list[Any]] = {}
    verifications: dict[str, Verification] = {}
    emitted_per_origin: dict[int, int] = {}
    for report in reports:
        for name, values in report.get("collected", {}).items():
            collected.setdefault(name, []).extend(values)
        for name, verification in report.get("verifications", {}).items():
            verifications.setdefault(name, Verification()).merge(verification)
        for origin, n in report.get("emitted_per_origin", {}).items():
            emitted_per_origin[origin] = emitted_per_origin.get(origin, 0) + n
    tables = [report["metrics"] for report in reports if "metrics" in report]
    emitted = sum(report.get("records_emitted", 0) for report in reports)
    received = sum(report.get("records_received", 0) for report in reports)
    # a TaskManager lost after the job ended took its tasks' counts with it
    complete = set(placement.values()) <= set(reports_by_task_manager)
    lossless = status is JobStatus.FINISHED and complete and is_lossless(graph)
    by_vertex = {vertex.name: [placement[execution_id(ev)] for ev in graph.task_vertices[vertex.id]]
                 for vertex in graph.job_graph.vertices}
    return JobResult(
        job_id, status, duration, error=failure, collected=collected,
        verifications={name: v.report(emitted_per_origin, replayed_at_least_once, keeps_source_order(graph, name))
                       for name, v in verifications.items()},
        latency=_merge_latency(reports, duration / 2 if ended_early else None),
        records_emitted=emitted, records_received=received,
        metrics=pa.concat_tables(tables) if tables else MetricTable().to_arrow(),
        invariants={
            "records_match": (emitted == received) if lossless and not replayed_at_least_once else None,
            "buffers_leaked": sum(r["total_segments"] - r["available_segments"] for r in reports),
            "credit_violations": sum(r.get("credit_violations", 0) for r in reports),
            "task_managers_reported": len(reports),
        },
        placement=by_vertex,
        stopped_early=stopped_early,
        ended_early=ended_early,
        checkpoints=checkpoints,
    )


def _merge_latency(reports: list[dict[str, Any]], since: float | None) -> dict[str, LatencyHistogram]:
    """Per sink vertex, its latency over the steady state: the reports' steady histograms (`since`
    None), or their sample periods from `since` on (the samples the steady state of the metrics takes)."""
    latency: dict[str, LatencyHistogram] = {}
    for report in reports:
        if since is None:
            for vertex, message in report.get("latency", {}).items():
                latency.setdefault(vertex, LatencyHistogram()).merge(LatencyHistogram.from_message(message))
            continue
        for vertex, periods in report.get("latency_periods", {}).items():
            histogram = latency.setdefault(vertex, LatencyHistogram())
            for t, message in periods:
                if t >= since:
                    histogram.merge(LatencyHistogram.from_message(message))
    return latency
