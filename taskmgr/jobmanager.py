"""JobManager: TaskManager registration, scheduling, deployment, job status, job end.

TaskManagers connect and register (slots, shuffle address). `submit_job` waits for the
TaskManagers it needs, allocates slots (taskmgr.scheduler), deploys every subtask with
a descriptor saying where each input's producer runs, and follows the task states:

- every task FINISHED: the job is FINISHED (bounded sources ran out);
- a task FAILED or a TaskManager is lost: the job restarts if its restart strategy allows
  (taskmgr.failover), else it FAILS with that root cause and the other tasks are cancelled;
- the run's duration is over: sources are stopped and the pipeline drains (modelled costs
  off), then the job is FINISHED; a job that does not drain in time is cancelled.

At the end every TaskManager releases the job and reports (metrics, collected records,
verification, buffer pool state); the JobManager merges the reports into a `JobResult`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict, dataclass, field
import enum
import itertools
import zlib
from typing import Any

import numpy as np
import pyarrow as pa

from graph import ExecutionGraph
from shuffle import kernel
from shuffle.netty.connection_manager import Transport
from shuffle.trace import NULL_TRACER, Tracer
from shuffle.transport import ByteStream
from taskmgr.checkpointing.checkpoint_coordinator import CheckpointCoordinator
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.checkpointing.exactly_once import verify_checkpoint
from taskmgr.deployment import JobInformation, create_descriptor, execution_id, new_attempt_ids
from taskmgr.failover import Failover, RestartRecord, RestoreNotSupportedError, check_restartable
from taskmgr.metrics.latency import LatencyHistogram
from taskmgr.metrics.summary import VertexLayout, vertex_summaries
from taskmgr.metrics.table import MetricTable
from taskmgr.operators.sinks import Verification
from taskmgr.restart_strategy import RestartStrategy
from taskmgr.rpc import FIRST_MESSAGE_TIMEOUT, REGISTRY, RpcConnection, RpcError
from taskmgr.scheduler import NoResourceAvailableError, SlotOffer, allocate_slots
from taskmgr.task import ExecutionState

log = logging.getLogger(__name__)

#: Operator kinds that emit exactly one record per input record.
_ONE_TO_ONE = frozenset({"source", "map", "keyed_reduce", "sink"})


class JobStatus(str, enum.Enum):
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


class JobExecutionError(RuntimeError):
    """The job failed; the root cause is `__cause__`."""


@dataclass(frozen=True)
class JobConfig:
    """How to run a job: its duration (seconds of the run's clock) and the run's settings."""

    duration: float
    seed: int = 0
    sample_period: float = 1.0
    task_managers: int = 1
    registration_timeout: float = 10.0
    drain_timeout: float = 30.0
    cancel_timeout: float = 10.0
    checkpoint_costs: CheckpointCosts = field(default_factory=CheckpointCosts)
    restart: RestartStrategy = RestartStrategy()


@dataclass
class JobResult:
    job_id: str
    status: JobStatus
    duration: float
    error: BaseException | None = None
    collected: dict[str, list[Any]] = field(default_factory=dict)
    verifications: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Sink vertex name -> end-to-end latency of its records over the steady state.
    latency: dict[str, LatencyHistogram] = field(default_factory=dict)
    records_emitted: int = 0
    records_received: int = 0
    metrics: pa.Table = field(default_factory=lambda: MetricTable().to_arrow())
    invariants: dict[str, Any] = field(default_factory=dict)
    #: Vertex name -> the TaskManager of each subtask.
    placement: dict[str, list[str]] = field(default_factory=dict)
    #: The run was ended before its duration (Ctrl-C, SIGTERM): its results cover `duration` only.
    stopped_early: bool = False
    #: One entry per triggered checkpoint (summary.json's `checkpoints`).
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    #: Every restart of the job, in order (results are those of its last attempt).
    restart_history: list[RestartRecord] = field(default_factory=list)
    #: The failure stood because the restart strategy allowed no more restarts (Flink's
    #: "Recovery is suppressed by ..."): the strategy, as Flink names it.
    recovery_suppressed_by: str | None = None

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
        return broken


def is_lossless(graph: ExecutionGraph) -> bool:
    """Whether every source record reaches exactly one sink (so emitted == received)."""
    nodes = [node for vertex in graph.job_graph.vertices for node in vertex.operators]
    edges = [edge for node in nodes for edge in node.out_edges]
    return (all(node.kind in _ONE_TO_ONE for node in nodes)
            and sum(node.kind == "sink" for node in nodes) == 1
            and all(edge.partitioner.name != "BROADCAST" and edge.output_tag is None for edge in edges))


@dataclass
class _TaskManagerRecord:
    name: str
    shuffle_address: Any
    num_slots: int
    connection: RpcConnection
    last_heartbeat: float = 0.0


class _JobExecution:
    """The JobManager's view of a running job: task states, failure, reports."""

    def __init__(self, job_id: str, placement: dict[str, str]) -> None:
        self.job_id = job_id
        self.placement = placement  # execution id -> TaskManager
        self.states = dict.fromkeys(placement, ExecutionState.DEPLOYING)
        self.failure: BaseException | None = None
        self.reports: dict[str, dict[str, Any]] = {}
        self._changed = kernel.Event()
        self.stopped_early = False
        self.checkpoint_coordinator: CheckpointCoordinator | None = None
        self.attempt = 0
        self.restart_history: list[RestartRecord] = []
        self.recovery_suppressed_by: str | None = None
        #: TaskManager -> records its sources emitted in the attempt it cancelled (taskmgr.failover).
        self.cancelled_attempt: dict[str, int] = {}

    def _notify(self) -> None:
        self._changed.set()
        self._changed = kernel.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()

    @property
    def all_terminal(self) -> bool:
        return all(state.is_terminal for state in self.states.values())

    @property
    def all_finished(self) -> bool:
        return all(state is ExecutionState.FINISHED for state in self.states.values())

    def fail(self, cause: BaseException) -> None:
        if self.failure is None:
            self.failure = cause
        self._notify()

    def new_attempt(self, placement: dict[str, str]) -> None:
        """The job restarts: its next attempt runs on `placement`, without failure yet."""
        self.attempt += 1
        self.placement = placement
        self.states = dict.fromkeys(placement, ExecutionState.DEPLOYING)
        self.failure = None
        self._notify()

    def on_attempt_cancelled(self, task_manager: str, message: dict[str, Any]) -> None:
        if message["attempt"] == self.attempt:
            self.cancelled_attempt[task_manager] = message["records_emitted"]
            self._notify()

    def stop_early(self) -> None:
        """End the run now, as if its duration were over (an interrupted run)."""
        self.stopped_early = True
        self._notify()

    def on_task_state(self, message: dict[str, Any]) -> None:
        state = ExecutionState(message["state"])
        cause = None
        if state is ExecutionState.FAILED:
            cause = REGISTRY.pop(message["error_ref"]) if "error_ref" in message else RuntimeError(message["error"])
        stale = message.get("attempt", self.attempt) != self.attempt
        if stale or self.states[message["execution_id"]].is_terminal:
            return
        self.states[message["execution_id"]] = state
        if cause is not None:
            self.fail(cause)
        self._notify()

    def on_report(self, task_manager: str, report: dict[str, Any]) -> None:
        self.reports[task_manager] = report
        self._notify()

    def on_task_manager_lost(self, name: str) -> None:
        if name in self.placement.values() and name not in self.reports:
            self.fail(RuntimeError(f"TaskManager {name} is lost (its connection to the JobManager closed)"))


class JobManager:
    """Runs jobs on the TaskManagers that register with it; watches them with heartbeats.

    Every `heartbeat_interval` seconds it asks each TaskManager for a heartbeat; one that
    has not answered for `heartbeat_timeout` seconds is lost, as Flink's HeartbeatManager
    decides (defaults: `heartbeat.interval` 10 s, `heartbeat.timeout` 50 s). A closed
    connection is noticed at once.
    """

    def __init__(self, transport: Transport, address: Hashable = "jobmanager",
                 heartbeat_interval: float = 10.0, heartbeat_timeout: float = 50.0,
                 tracer: Tracer = NULL_TRACER) -> None:
        if not 0 < heartbeat_interval < heartbeat_timeout:
            raise ValueError(f"heartbeat interval ({heartbeat_interval} s) must be > 0 and below the timeout "
                             f"({heartbeat_timeout} s)")
        self.transport = transport
        self.address = address
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.tracer = tracer
        self.task_managers: dict[str, _TaskManagerRecord] = {}
        self._registered = kernel.Event()
        self._jobs: dict[str, _JobExecution] = {}
        self._job_ids = itertools.count()

    async def run(self, *, task_status: Any = kernel.TASK_STATUS_IGNORED) -> None:
        """Accept TaskManagers until cancelled; reports the bound address via task_status."""
        async with kernel.open_nursery() as nursery:
            self.address = await nursery.start(self.transport.serve, self.address, self._serve_task_manager)
            nursery.start_soon(self._watch_heartbeats, nursery)
            task_status.started(self.address)

    async def _watch_heartbeats(self, nursery: Any) -> None:
        while True:
            await kernel.sleep(self.heartbeat_interval)
            now = kernel.current_time()
            for record in list(self.task_managers.values()):
                if now - record.last_heartbeat > self.heartbeat_timeout:
                    self._heartbeat_timed_out(record, nursery)
                else:
                    nursery.start_soon(self._request_heartbeat, record)

    async def _request_heartbeat(self, record: _TaskManagerRecord) -> None:
        with kernel.move_on_after(self.heartbeat_interval):
            try:
                await record.connection.send("heartbeat_request")
            except (kernel.BrokenResourceError, kernel.ClosedResourceError):
                pass  # its connection loop notices the loss

    def _heartbeat_timed_out(self, record: _TaskManagerRecord, nursery: Any) -> None:
        """Flink's "Heartbeat of TaskManager with id ... timed out": its tasks are lost."""
        if self.task_managers.pop(record.name, None) is None:
            return
        cause = TimeoutError(f"Heartbeat of TaskManager with id {record.name} timed out "
                             f"(no answer for {self.heartbeat_timeout:g} s).")
        log.warning("JobManager: %s", cause)
        for job in self._jobs.values():
            job.fail(cause)
        nursery.start_soon(record.connection.aclose)

    async def _serve_task_manager(self, stream: ByteStream) -> None:
        """Serve one connection; a peer that breaks the protocol is logged and disconnected."""
        connection = RpcConnection(stream)
        try:
            await self._follow_task_manager(connection)
        except RpcError as exc:
            log.warning("JobManager: closed a connection that broke the protocol: %s", exc)
        finally:
            await connection.aclose()

    async def _follow_task_manager(self, connection: RpcConnection) -> None:
        message = await connection.receive(timeout=FIRST_MESSAGE_TIMEOUT)
        if message is None:
            return
        if message["type"] != "register_task_manager":
            raise RpcError(f"a TaskManager must register first, got {message['type']!r}")
        record = _TaskManagerRecord(message["task_manager"], message["shuffle_address"], message["num_slots"],
                                    connection, kernel.current_time())
        self.task_managers[record.name] = record
        self._registered.set()
        self._registered = kernel.Event()
        try:
            while True:
                message = await connection.receive()
                if message is None:
                    break
                if message["type"] == "heartbeat":
                    record.last_heartbeat = kernel.current_time()
                    continue
                job = self._jobs.get(message.get("job_id"))
                if job is None:
                    continue
                coordinator = job.checkpoint_coordinator
                if message["type"] == "task_state":
                    job.on_task_state(message)
                elif message["type"] == "acknowledge_checkpoint" and coordinator is not None:
                    coordinator.receive_acknowledge(message["execution_id"], REGISTRY.pop(message["ack_ref"]))
                elif message["type"] == "decline_checkpoint" and coordinator is not None:
                    coordinator.receive_decline(message["execution_id"], message["checkpoint_id"],
                                                message["reason"])
                elif message["type"] == "job_report":
                    job.on_report(record.name, REGISTRY.pop(message["report_ref"]))
                elif message["type"] == "attempt_cancelled":
                    job.on_attempt_cancelled(record.name, message)
        finally:
            self.task_managers.pop(record.name, None)
            for job in self._jobs.values():
                job.on_task_manager_lost(record.name)

    def stop_jobs_early(self) -> None:
        """End every running job now; each drains and reports as at the end of its duration."""
        for job in self._jobs.values():
            job.stop_early()

    async def shutdown(self) -> None:
        """Tell every registered TaskManager to shut down."""
        for task_manager in list(self.task_managers):
            await self._send(task_manager, "shutdown")

    async def _wait_for_task_managers(self, n: int, timeout: float) -> None:
        with kernel.move_on_after(timeout):
            while len(self.task_managers) < n:
                await self._registered.wait()
            return
        raise NoResourceAvailableError(
            f"only {len(self.task_managers)} of {n} TaskManagers registered within {timeout} s")

    async def submit_job(self, graph: ExecutionGraph, config: JobConfig) -> JobResult:
        """Run the job to its end and return its result (never raises for a failed job)."""
        job_id = f"job-{next(self._job_ids)}"
        try:
            check_restartable(graph, config.restart)
            await self._wait_for_task_managers(config.task_managers, config.registration_timeout)
            offers = [SlotOffer(tm.name, tm.num_slots) for tm in self.task_managers.values()]
            slots = allocate_slots(graph, offers)
        except (NoResourceAvailableError, RestoreNotSupportedError) as exc:
            return JobResult(job_id, JobStatus.FAILED, 0.0, error=exc)
        placement = {eid: slot.task_manager for eid, slot in slots.items()}
        job = _JobExecution(job_id, placement)
        self._jobs[job_id] = job
        try:
            duration = await self._execute(job, graph, config, kernel.current_time())
            return await self._finish(job, graph, config, duration)
        finally:
            del self._jobs[job_id]

    async def _send(self, task_manager: str, kind: str, **fields: Any) -> None:
        record = self.task_managers.get(task_manager)
        if record is None:
            return
        try:
            await record.connection.send(kind, **fields)
        except (kernel.BrokenResourceError, kernel.ClosedResourceError):
            pass  # lost TaskManagers fail the job through their connection loop

    async def _execute(self, job: _JobExecution, graph: ExecutionGraph, config: JobConfig, start: float) -> float:
        """Deploy, run until the end of the job; returns the run's measured duration."""
        job_ref = REGISTRY.put(graph)
        failover = Failover(self, job, graph, config, start)
        try:
            while True:
                await self._deploy(job, graph, config, start, job_ref, failover.restore_point())
                async with kernel.open_nursery() as nursery:
                    job.checkpoint_coordinator = self._checkpoint_coordinator(job, graph, config, start)
                    if job.checkpoint_coordinator is not None:
                        nursery.start_soon(job.checkpoint_coordinator.run)
                    with kernel.move_on_at(start + config.duration):
                        await job.wait_for(lambda: job.all_terminal or job.failure is not None or job.stopped_early)
                    nursery.cancel_scope.cancel()  # no checkpoints while the job drains or restarts
                if not await failover.recover():
                    break
            duration = min(config.duration, kernel.current_time() - start)
            if not job.all_terminal and job.failure is None:
                for task_manager in dict.fromkeys(job.placement.values()):
                    await self._send(task_manager, "stop_sources", job_id=job.job_id)
                with kernel.move_on_after(config.drain_timeout):
                    await job.wait_for(lambda: job.all_terminal or job.failure is not None)
                if not job.all_terminal and job.failure is None:
                    job.fail(TimeoutError(f"the job did not drain within {config.drain_timeout} s"))
            if not job.all_terminal:
                for eid, state in job.states.items():
                    if not state.is_terminal:
                        await self._send(job.placement[eid], "cancel_task", execution_id=eid)
                with kernel.move_on_after(config.cancel_timeout):
                    await job.wait_for(lambda: job.all_terminal)
            return duration
        finally:
            REGISTRY.pop(job_ref)

    async def _deploy(self, job: _JobExecution, graph: ExecutionGraph, config: JobConfig, start: float,
                      job_ref: str, restore: Mapping[str, Any] | None) -> None:
        """Deploy every subtask as the job's current attempt, from `restore` (None: the beginning)."""
        addresses = {eid: self.task_managers[tm].shuffle_address for eid, tm in job.placement.items()}
        attempts = new_attempt_ids(graph)
        for vertex in graph.all_execution_vertices:
            eid = execution_id(vertex)
            info = JobInformation(job.job_id, job_ref, config.seed, kernel.current_time() - start,
                                  config.duration, config.sample_period, asdict(config.checkpoint_costs),
                                  job.attempt)
            descriptor = create_descriptor(vertex, info, addresses, attempts,
                                           None if restore is None else restore.get(eid))
            await self._send(job.placement[eid], "deploy_task", descriptor=descriptor.to_message())

    def _checkpoint_coordinator(self, job: _JobExecution, graph: ExecutionGraph, config: JobConfig,
                                start: float) -> CheckpointCoordinator | None:
        settings = graph.job_graph.checkpointing
        if settings is None or not settings.enabled:
            return None
        triggered = [execution_id(ev) for vertex in settings.tasks_to_trigger for ev in graph.task_vertices[vertex.id]]

        async def send_trigger(eid: str, barrier: Any) -> None:
            options = barrier.options
            await self._send(job.placement[eid], "trigger_checkpoint", job_id=job.job_id, execution_id=eid,
                             checkpoint_id=barrier.id, timestamp=barrier.timestamp, alignment=int(options.alignment),
                             aligned_timeout=options.aligned_checkpoint_timeout)

        async def send_abort(checkpoint_id: int) -> None:
            for task_manager in dict.fromkeys(job.placement.values()):
                await self._send(task_manager, "abort_checkpoint", job_id=job.job_id, checkpoint_id=checkpoint_id)

        rng = np.random.default_rng([config.seed & 0xFFFF_FFFF, zlib.crc32(b"checkpoint-coordinator")])
        return CheckpointCoordinator(settings.config, config.checkpoint_costs, triggered, list(job.placement),
                                     send_trigger, send_abort, lambda: kernel.current_time() - start, rng,
                                     self.tracer)

    async def _finish(self, job: _JobExecution, graph: ExecutionGraph, config: JobConfig,
                      duration: float) -> JobResult:
        """Release the job everywhere, merge the TaskManagers' reports."""
        hosts = [tm for tm in dict.fromkeys(job.placement.values()) if tm in self.task_managers]
        for task_manager in hosts:
            await self._send(task_manager, "release_job", job_id=job.job_id)
        with kernel.move_on_after(config.cancel_timeout):
            await job.wait_for(lambda: all(tm in job.reports or tm not in self.task_managers for tm in hosts))
        if job.failure is not None:
            status = JobStatus.FAILED
        elif job.all_finished:
            status = JobStatus.FINISHED
        else:
            status = JobStatus.CANCELED
        return _merge_reports(job, graph, status, duration)


def _merge_reports(job: _JobExecution, graph: ExecutionGraph, status: JobStatus, duration: float) -> JobResult:
    reports = list(job.reports.values())
    collected: dict[str, list[Any]] = {}
    verifications: dict[str, Verification] = {}
    emitted_per_origin: dict[int, int] = {}
    latency: dict[str, LatencyHistogram] = {}
    for report in reports:
        for vertex, message in report.get("latency", {}).items():
            latency.setdefault(vertex, LatencyHistogram()).merge(LatencyHistogram.from_message(message))
        for name, values in report.get("collected", {}).items():
            collected.setdefault(name, []).extend(values)
        for name, verification in report.get("verifications", {}).items():
            verifications.setdefault(name, Verification()).merge(verification)
        for origin, n in report.get("emitted_per_origin", {}).items():
            emitted_per_origin[origin] = emitted_per_origin.get(origin, 0) + n
    tables = [report["metrics"] for report in reports if "metrics" in report]
    emitted = sum(report.get("records_emitted", 0) for report in reports)
    received = sum(report.get("records_received", 0) for report in reports)
    lossless = status is JobStatus.FINISHED and is_lossless(graph)
    placement = {vertex.name: [job.placement[execution_id(ev)] for ev in graph.task_vertices[vertex.id]]
                 for vertex in graph.job_graph.vertices}
    return JobResult(
        job.job_id, status, duration, error=job.failure, collected=collected,
        verifications={name: v.report(emitted_per_origin) for name, v in verifications.items()},
        latency=latency,
        records_emitted=emitted, records_received=received,
        metrics=pa.concat_tables(tables) if tables else MetricTable().to_arrow(),
        invariants={
            "records_match": (emitted == received) if lossless else None,
            "buffers_leaked": sum(r["total_segments"] - r["available_segments"] for r in reports),
            "credit_violations": sum(r.get("credit_violations", 0) for r in reports),
            "task_managers_reported": len(reports),
        },
        placement=placement,
        stopped_early=job.stopped_early,
        checkpoints=_checkpoint_stats(job.checkpoint_coordinator),
        restart_history=job.restart_history,
        recovery_suppressed_by=job.recovery_suppressed_by,
    )


def _checkpoint_stats(coordinator: CheckpointCoordinator | None) -> list[dict[str, Any]]:
    """Each checkpoint's figures; a completed one also with its exactly-once accounting."""
    if coordinator is None:
        return []
    entries = []
    for checkpoint in coordinator.checkpoints:
        entry = checkpoint.stats()
        if checkpoint.status == "COMPLETED":
            verified = verify_checkpoint(checkpoint.acks.values())
            if verified is not None:
                entry["exactly_once"] = verified
        entries.append(entry)
    return entries
