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
import itertools
import math
import numbers
import zlib
from typing import Any

import numpy as np

from graph import ExecutionGraph
from shuffle import kernel
from shuffle.netty.connection_manager import Transport
from shuffle.trace import NULL_TRACER, Tracer
from shuffle.transport import ByteStream
from taskmgr.checkpointing.checkpoint_coordinator import CheckpointCoordinator
from taskmgr.checkpointing.checkpoint_coordinator_deactivator import ExecutionTrackingCheckpointCoordinatorDeActivator
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.checkpointing.checkpoint_failure_manager import CheckpointFailureManager
from taskmgr.checkpointing.checkpoint_plan import DefaultCheckpointPlanCalculator
from taskmgr.checkpointing.exactly_once import verify_checkpoint
from taskmgr.deployment import JobInformation, create_descriptor, execution_id, new_attempt_ids
from taskmgr.execution_state import ExecutionState
from taskmgr.failover import Failover, RestartRecord, RestoreNotSupportedError, check_restartable
from taskmgr.payloads import dump_object, load_object, load_table
from taskmgr.results import JobResult, JobStatus, merge_reports
from taskmgr.restart_strategy import RestartStrategy
from taskmgr.rpc import (FIRST_MESSAGE_TIMEOUT, AbortCheckpoint, AcknowledgeCheckpoint, AttemptCancelled, CancelTask,
                         DeclineCheckpoint, DeployJob, DeployTask, DescribeTasks, Heartbeat, HeartbeatRequest,
                         JobReport, JobReportPart, NotifyCheckpointComplete, RegisterTaskManager, ReleaseJob,
                         ReportAssembler, RpcConnection, RpcError, RpcMessage, Shutdown, StopSources, TaskDescriptions,
                         TaskExecutionState, TriggerCheckpoint)
from taskmgr.scheduler import NoResourceAvailableError, SlotOffer, allocate_slots, placement_rng

log = logging.getLogger(__name__)

#: Seconds the JobManager waits for the TaskManagers to say what a job that cannot drain
#: waits for (`DescribeTasks`).
DESCRIBE_TIMEOUT = 5.0


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
    #: Flink's task.cancellation.timeout (taskmgr.taskmanager); 0: off.
    task_cancellation_timeout: float = 180.0
    checkpoint_costs: CheckpointCosts = field(default_factory=CheckpointCosts)
    restart: RestartStrategy = RestartStrategy()
    #: How shared slots land on TaskManagers: "ordered" or "random" (taskmgr.scheduler).
    placement: str = "ordered"

    def __post_init__(self) -> None:
        # a duration of 0 or less ran an empty job that read as FINISHED, NaN failed with an
        # empty TooSlowError, infinity never ended an unbounded job, a string failed deep inside
        if (isinstance(self.duration, bool) or not isinstance(self.duration, numbers.Real)
                or not math.isfinite(self.duration) or self.duration <= 0):
            raise ValueError(f"duration must be a finite number of seconds > 0, got {self.duration!r}")


@dataclass
class _TaskManagerRecord:
    name: str
    shuffle_address: Any
    num_slots: int
    connection: RpcConnection
    last_heartbeat: float = 0.0
    pid: int | None = None
    executor_id: str | None = None
    #: Its connection broke: RPCs to it fail at once, but it is registered (its slots too)
    #: until its heartbeats find it lost, as Flink's JobManager does not watch connections.
    unreachable: bool = False
    #: Heartbeat RPCs in a row that failed because it was unreachable.
    failed_heartbeat_rpcs: int = 0


class JobMasterError(RuntimeError):
    """Flink's JobMasterException (here: a TaskManager is no longer reachable)."""


class RecipientUnreachableError(RuntimeError):
    """Flink's RecipientUnreachableException: an RPC to a TaskManager whose connection is gone."""

    def __init__(self, message: str, sender: object, recipient: str) -> None:
        super().__init__(f"Could not send message [{message}] from sender [{sender}] to recipient [{recipient}], "
                         "because the recipient is unreachable. This can either mean that the recipient has been "
                         "terminated or that the remote RpcService is currently not reachable.")


def _failure_cause(message: TaskExecutionState) -> BaseException:
    """The cause a failed task sent: the exception itself if it loads, else its text."""
    if message.cause is not None:
        try:
            cause = load_object(message.cause, "failure cause")
        except RpcError:
            cause = None
        if isinstance(cause, BaseException):
            return cause
    return RuntimeError(message.error or "the task failed without a cause")


class _JobExecution:
    """The JobManager's view of a running job: task states, failure, reports."""

    def __init__(self, job_id: str, placement: dict[str, str]) -> None:
        self.job_id = job_id
        self.placement = placement  # execution id -> TaskManager
        self.states = dict.fromkeys(placement, ExecutionState.DEPLOYING)
        #: When each task of the current attempt finished (kernel time).
        self.finished_at: dict[str, float] = {}
        self.failure: BaseException | None = None
        #: The execution whose failure `failure` is (None: a failure of the job, not of a
        #: task) and when it came (kernel time): Flink's exception history entry.
        self.failed_execution: str | None = None
        self.failed_at: float | None = None
        self.reports: dict[str, dict[str, Any]] = {}
        self._changed = kernel.Event()
        self.stopped_early = False
        #: It ended (finished, failed or was stopped) before its duration (JobResult.ended_early).
        self.ended_early = False
        self.checkpoint_coordinator: CheckpointCoordinator | None = None
        #: Starts and stops the periodic checkpoints while the current attempt runs.
        self.checkpoint_deactivator: ExecutionTrackingCheckpointCoordinatorDeActivator | None = None
        self.attempt = 0
        self.restart_history: list[RestartRecord] = []
        self.recovery_suppressed_by: str | None = None
        #: TaskManager -> records its sources emitted in the attempt it cancelled (taskmgr.failover).
        self.cancelled_attempt: dict[str, int] = {}
        #: TaskManagers that have the job's program (`DeployJob`).
        self.deployed_to: set[str] = set()
        #: What the tasks still running when the job could not drain wait for, by
        #: execution id, and the TaskManagers that answered (`DescribeTasks`).
        self.descriptions: dict[str, str] = {}
        self.described_by: set[str] = set()

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

    def finished_tasks(self) -> set[str]:
        """Execution ids of the current attempt's finished tasks (the checkpoint plan's input)."""
        return {eid for eid, state in self.states.items() if state is ExecutionState.FINISHED}

    @property
    def running(self) -> bool:
        """Flink's job status RUNNING: no failure, and not every task has ended."""
        return self.failure is None and not self.all_terminal

    def fail(self, cause: BaseException, execution_id: str | None = None) -> None:
        """The job fails with `cause`, of the task `execution_id` (None: of no task), unless
        it failed already: the first failure is the root cause, as in Flink's exception history."""
        if self.failure is None:
            self.failure = cause
            self.failed_execution = execution_id
            self.failed_at = kernel.current_time()
        if self.checkpoint_deactivator is not None:
            self.checkpoint_deactivator.job_status_changes(running=False)
        self._notify()

    def failure_origin(self, graph: ExecutionGraph) -> tuple[str | None, str | None]:
        """The failed task's name with subtask (Flink's taskName) and its TaskManager; None,
        None for a failure of the job itself (a checkpoint failure, too few slots, ...)."""
        for vertex in graph.all_execution_vertices:
            eid = execution_id(vertex)
            if eid == self.failed_execution:
                return vertex.name, self.placement[eid]
        return None, None

    def supersede_failure(self, cause: BaseException) -> None:
        """The failure that stands is now `cause` (chained to the first), of no task."""
        cause.__cause__ = self.failure
        self.failure = cause
        self.failed_execution = None
        self.failed_at = kernel.current_time()

    def new_attempt(self, placement: dict[str, str]) -> None:
        """The job restarts: its next attempt runs on `placement`, without failure yet."""
        self.attempt += 1
        self.placement = placement
        self.states = dict.fromkeys(placement, ExecutionState.DEPLOYING)
        self.finished_at.clear()
        self.failure = None
        self.failed_execution = self.failed_at = None
        self._notify()

    def on_attempt_cancelled(self, task_manager: str, message: AttemptCancelled) -> None:
        if message.attempt == self.attempt:
            self.cancelled_attempt[task_manager] = message.records_emitted
            self._notify()

    def on_descriptions(self, task_manager: str, message: TaskDescriptions) -> None:
        self.descriptions.update((str(eid), str(text)) for eid, text in message.descriptions.items())
        self.described_by.add(task_manager)
        self._notify()

    def stop_early(self) -> None:
        """End the run now, as if its duration were over (an interrupted run)."""
        self.stopped_early = True
        self._notify()

    def on_task_state(self, message: TaskExecutionState) -> None:
        try:
            state = ExecutionState(message.state)
        except ValueError:
            raise RpcError(f"task_state: unknown state {message.state[:40]!r}") from None
        if message.execution_id not in self.states:
            raise RpcError(f"task_state: unknown execution {message.execution_id[:80]!r}")
        cause = None
        if state is ExecutionState.FAILED:
            cause = _failure_cause(message)
        stale = message.attempt is not None and message.attempt != self.attempt
        if stale or self.states[message.execution_id].is_terminal:
            return
        self.states[message.execution_id] = state
        if state is ExecutionState.FINISHED:
            self.finished_at[message.execution_id] = kernel.current_time()
        if self.checkpoint_deactivator is not None:
            self.checkpoint_deactivator.on_state_update(message.execution_id, state)
            self.checkpoint_deactivator.job_status_changes(self.running)
        if cause is not None:
            self.fail(cause, message.execution_id)
        self._notify()

    def on_report(self, task_manager: str, report: dict[str, Any]) -> None:
        self.reports[task_manager] = report
        self._notify()

    def on_task_manager_unreachable(self) -> None:
        """A TaskManager's connection broke: waits that ask whether it is reachable look again."""
        self._notify()

    def on_task_manager_lost(self, name: str, cause: BaseException) -> None:
        """The JobManager let the TaskManager go (Flink's disconnectTaskManager): its tasks
        of the job fail with `cause`."""
        if name in self.placement.values() and name not in self.reports:
            lost = [eid for eid, task_manager in self.placement.items()
                    if task_manager == name and not self.states[eid].is_terminal]
            # its tasks are gone with it: each fails with `cause`, the first is the root
            self.fail(cause, lost[0] if lost else None)
            for eid in lost:
                self.states[eid] = ExecutionState.FAILED
            self._notify()

    def on_deployment_failed(self, execution_id: str, cause: BaseException) -> None:
        """The task could not be deployed (its TaskManager is unreachable): it FAILED."""
        self.states[execution_id] = ExecutionState.FAILED
        self.fail(cause, execution_id)


class JobManager:
    """Runs jobs on the TaskManagers that register with it; watches them with heartbeats.

    Every `heartbeat_interval` seconds it asks each TaskManager for a heartbeat; one whose
    last heartbeat (or registration) is `heartbeat_timeout` seconds old is lost at that
    moment, as Flink's DefaultHeartbeatMonitor decides (defaults: `heartbeat.interval`
    10 s, `heartbeat.timeout` 50 s). As Flink's, it does not watch the connections: one
    whose connection broke (its process died) is unreachable, every RPC to it fails at
    once (FLINK-23202), and after `heartbeat_rpc_failure_threshold` heartbeat requests in a
    row have failed so (Flink's `heartbeat.rpc-failure-threshold`, 2; -1: off) it is lost:
    "TaskManager with id ... is no longer reachable." Until then its slots are offered.
    """

    def __init__(self, transport: Transport, address: Hashable = "jobmanager",
                 heartbeat_interval: float = 10.0, heartbeat_timeout: float = 50.0,
                 tracer: Tracer = NULL_TRACER, heartbeat_rpc_failure_threshold: int = 2) -> None:
        if not 0 < heartbeat_interval < heartbeat_timeout:
            raise ValueError(f"heartbeat interval ({heartbeat_interval} s) must be > 0 and below the timeout "
                             f"({heartbeat_timeout} s)")
        self.transport = transport
        self.address = address
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        if not (heartbeat_rpc_failure_threshold == -1 or heartbeat_rpc_failure_threshold >= 1):
            raise ValueError(f"heartbeat RPC failure threshold must be -1 (off) or at least 1, "
                             f"got {heartbeat_rpc_failure_threshold}")
        self.heartbeat_rpc_failure_threshold = heartbeat_rpc_failure_threshold
        self.tracer = tracer
        self.task_managers: dict[str, _TaskManagerRecord] = {}
        #: Every TaskManager that registered, lost ones too: name, shuffle address, process id,
        #: Spark executor id (summary.json's `cluster.task_managers`).
        self.registrations: list[dict[str, Any]] = []
        self._registered = kernel.Event()
        self._jobs: dict[str, _JobExecution] = {}
        self._job_ids = itertools.count()
        self._nursery: Any = None

    async def run(self, *, task_status: Any = kernel.TASK_STATUS_IGNORED) -> None:
        """Accept TaskManagers until cancelled; reports the bound address via task_status."""
        async with kernel.open_nursery() as nursery:
            self._nursery = nursery
            self.address = await nursery.start(self.transport.serve, self.address, self._serve_task_manager)
            nursery.start_soon(self._request_heartbeats)
            task_status.started(self.address)

    async def _request_heartbeats(self) -> None:
        while True:
            await kernel.sleep(self.heartbeat_interval)
            for record in list(self.task_managers.values()):
                self._nursery.start_soon(self._request_heartbeat, record)

    async def _monitor_heartbeats(self, record: _TaskManagerRecord) -> None:
        """Flink's DefaultHeartbeatMonitor: each heartbeat moves the TaskManager's timeout to
        `heartbeat_timeout` after it; when the timeout comes first, the TaskManager is lost."""
        while self.task_managers.get(record.name) is record:
            deadline = record.last_heartbeat + self.heartbeat_timeout
            if kernel.current_time() >= deadline:
                self._heartbeat_timed_out(record)
                return
            await kernel.sleep_until(deadline)

    async def _request_heartbeat(self, record: _TaskManagerRecord) -> None:
        """Flink's heartbeat RPC: one that fails because the TaskManager is unreachable counts
        towards the failure threshold, one that goes through resets the count."""
        if await self._send(record.name, HeartbeatRequest(), timeout=self.heartbeat_interval):
            record.failed_heartbeat_rpcs = 0
        elif record.unreachable and self.task_managers.get(record.name) is record:
            record.failed_heartbeat_rpcs += 1
            if 0 < self.heartbeat_rpc_failure_threshold <= record.failed_heartbeat_rpcs:
                self._lose_task_manager(record, JobMasterError(
                    f"TaskManager with id {record.name} is no longer reachable."))

    def _heartbeat_timed_out(self, record: _TaskManagerRecord) -> None:
        self._lose_task_manager(record, TimeoutError(f"Heartbeat of TaskManager with id {record.name} timed out."))

    def _lose_task_manager(self, record: _TaskManagerRecord, cause: BaseException) -> None:
        """Flink's JobMaster.disconnectTaskManager: its slots are gone, its tasks fail with `cause`."""
        if self.task_managers.get(record.name) is not record:
            return
        del self.task_managers[record.name]
        log.info("JobManager: %s", cause)  # as Flink's JobMaster logs it
        for job in self._jobs.values():
            job.on_task_manager_lost(record.name, cause)
        self._nursery.start_soon(record.connection.aclose)

    def is_reachable(self, task_manager: str) -> bool:
        """Whether RPCs to the TaskManager go through (it is registered and its connection works)."""
        record = self.task_managers.get(task_manager)
        return record is not None and not record.unreachable

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
        if not isinstance(message, RegisterTaskManager):
            raise RpcError(f"a TaskManager must register first, got {message.TYPE!r}")
        record = _TaskManagerRecord(message.task_manager, message.shuffle_address, message.num_slots,
                                    connection, kernel.current_time(), message.pid, message.executor_id)
        self.task_managers[record.name] = record
        self._nursery.start_soon(self._monitor_heartbeats, record)
        self.registrations.append({"name": record.name, "address": record.shuffle_address, "pid": record.pid,
                                   "executor_id": record.executor_id})
        self._registered.set()
        self._registered = kernel.Event()
        cause: RpcError | None = None
        reports = ReportAssembler()
        try:
            while True:
                message = await connection.receive()
                if message is None:
                    break
                if isinstance(message, Heartbeat):
                    record.last_heartbeat = kernel.current_time()
                    continue
                job = self._jobs.get(getattr(message, "job_id", None))
                if job is None:
                    if isinstance(message, JobReport):
                        reports.discard(message.job_id)
                    continue
                coordinator = job.checkpoint_coordinator
                if isinstance(message, TaskExecutionState):
                    job.on_task_state(message)
                elif isinstance(message, AcknowledgeCheckpoint) and coordinator is not None:
                    coordinator.receive_acknowledge(message.execution_id, load_object(message.ack, "checkpoint ack"))
                elif isinstance(message, DeclineCheckpoint) and coordinator is not None:
                    coordinator.receive_decline(message.execution_id, message.checkpoint_id, message.reason)
                elif isinstance(message, JobReportPart):
                    reports.add(message)
                elif isinstance(message, JobReport):
                    report_bytes, metrics_bytes = reports.complete(message)
                    report = load_object(report_bytes, "job report")
                    if not isinstance(report, dict):
                        raise RpcError("job_report: the report is not a map")
                    job.on_report(record.name, report | {"metrics": load_table(metrics_bytes)})
                elif isinstance(message, AttemptCancelled):
                    job.on_attempt_cancelled(record.name, message)
                elif isinstance(message, TaskDescriptions):
                    job.on_descriptions(record.name, message)
        except RpcError as exc:
            cause = exc
            raise
        finally:
            if cause is not None:  # the JobManager lets it go
                self._lose_task_manager(record, RuntimeError(
                    f"TaskManager {record.name} is lost (the JobManager closed its connection: {cause})"))
            else:  # it went away: its heartbeats will tell
                self._mark_unreachable(record)

    def lose_task_managers(self, cause: BaseException) -> None:
        """Every registered TaskManager is gone (their host told us, e.g. a failed Spark
        stage ended them all): their slots go, their tasks fail with `cause`."""
        for record in list(self.task_managers.values()):
            self._lose_task_manager(record, cause)

    def fail_jobs(self, cause: BaseException) -> bool:
        """Fail every running job with `cause` (unless it failed already); False if none runs."""
        for job in self._jobs.values():
            job.fail(cause)
        return bool(self._jobs)

    def stop_jobs_early(self) -> None:
        """End every running job now; each drains and reports as at the end of its duration."""
        for job in self._jobs.values():
            job.stop_early()

    async def shutdown(self) -> None:
        """Tell every registered TaskManager to shut down."""
        for task_manager in list(self.task_managers):
            await self._send(task_manager, Shutdown())

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
            slots = allocate_slots(graph, offers, placement_rng(config.placement, config.seed))
        except (NoResourceAvailableError, RestoreNotSupportedError) as exc:
            return JobResult(job_id, JobStatus.FAILED, 0.0, error=exc)
        placement = {eid: slot.task_manager for eid, slot in slots.items()}
        job = _JobExecution(job_id, placement)
        self._jobs[job_id] = job
        try:
            start = kernel.current_time()
            duration = await self._execute(job, graph, config, start)
            result = await self._finish(job, graph, config, duration)
            result.vertex_end_times = _vertex_end_times(job, graph, start)
            result.task_states = {vertex.name: [job.states[execution_id(ev)].value
                                                for ev in graph.task_vertices[vertex.id]]
                                  for vertex in graph.job_graph.vertices}
            if job.failure is not None:
                result.failed_task, result.failed_task_manager = job.failure_origin(graph)
                result.failed_at = round(job.failed_at - start, 6)
            return result
        finally:
            del self._jobs[job_id]

    async def _send(self, task_manager: str, message: RpcMessage, timeout: float = math.inf) -> bool:
        """Send an RPC; False if it failed: the TaskManager is lost or unreachable (at once),
        or the send took longer than `timeout`."""
        record = self.task_managers.get(task_manager)
        if record is None or record.unreachable:
            return False
        with kernel.move_on_after(timeout):
            try:
                await record.connection.send(message)
                return True
            except (kernel.BrokenResourceError, kernel.ClosedResourceError):
                self._mark_unreachable(record)
        return False

    def _mark_unreachable(self, record: _TaskManagerRecord) -> None:
        record.unreachable = True
        for job in self._jobs.values():
            job.on_task_manager_unreachable()

    async def _execute(self, job: _JobExecution, graph: ExecutionGraph, config: JobConfig, start: float) -> float:
        """Deploy, run until the end of the job (restarting it as its strategy allows);
        returns the run's measured duration."""
        try:
            serialized = dump_object(graph.job_graph)
        except Exception as exc:  # user code that cannot travel to the TaskManagers
            job.fail(exc)
            return 0.0
        failover = Failover(self, job, graph, config, start)
        job.checkpoint_coordinator = self._checkpoint_coordinator(job, graph, config, start)
        while True:
            await self._deploy(job, graph, config, start, serialized, failover.next_restore)
            async with kernel.open_nursery() as nursery:
                coordinator = job.checkpoint_coordinator
                if coordinator is not None:
                    await nursery.start(coordinator.run)
                    job.checkpoint_deactivator = ExecutionTrackingCheckpointCoordinatorDeActivator(
                        coordinator, job.states)
                    job.checkpoint_deactivator.job_status_changes(job.running)
                with kernel.move_on_at(start + config.duration):
                    await job.wait_for(lambda: job.all_terminal or job.failure is not None or job.stopped_early)
                # no checkpoints while the job drains or restarts (what is pending when the
                # run's duration ends stays in progress)
                job.checkpoint_deactivator = None
                nursery.cancel_scope.cancel()
            if not await failover.recover():
                break
        job.ended_early = kernel.current_time() < start + config.duration  # the deadline's own float
        duration = min(config.duration, kernel.current_time() - start)
        if not job.all_terminal and job.failure is None:
            for task_manager in dict.fromkeys(job.placement.values()):
                await self._send(task_manager, StopSources(job.job_id))
            with kernel.move_on_after(config.drain_timeout):
                await job.wait_for(lambda: job.all_terminal or job.failure is not None)
            if not job.all_terminal and job.failure is None:
                await self._describe_tasks(job)
            if not job.all_terminal and job.failure is None:
                lines = [f"\n  {vertex.name}: {self._description(job, execution_id(vertex))}"
                         for vertex in graph.all_execution_vertices
                         if not job.states[execution_id(vertex)].is_terminal]
                job.fail(TimeoutError(f"the job did not drain within {config.drain_timeout} s; still running:"
                                      + "".join(lines)))
        if not job.all_terminal:
            for eid, state in job.states.items():
                if state.is_terminal:
                    continue
                # Flink: a cancel RPC that fails ends the cancelling
                sent = await self._send(job.placement[eid], CancelTask(eid))
                job.states[eid] = ExecutionState.CANCELING if sent else ExecutionState.CANCELED
            with kernel.move_on_after(config.cancel_timeout):
                await job.wait_for(lambda: job.all_terminal)
        return duration

    async def _describe_tasks(self, job: _JobExecution) -> None:
        """Ask the TaskManagers of the tasks still running what those wait for, and wait for
        their answers up to `DESCRIBE_TIMEOUT` in all (a TaskManager that cannot be reached
        is not waited for), or until the job ends meanwhile."""
        running = {tm for eid, tm in job.placement.items() if not job.states[eid].is_terminal}
        with kernel.move_on_after(DESCRIBE_TIMEOUT):
            asked = {tm for tm in sorted(running) if await self._send(tm, DescribeTasks(job.job_id))}
            await job.wait_for(lambda: asked <= job.described_by or job.all_terminal or job.failure is not None)

    def _description(self, job: _JobExecution, eid: str) -> str:
        """What a task still running waits for, as its TaskManager said."""
        task_manager = job.placement[eid]
        if eid in job.descriptions:
            return job.descriptions[eid]
        if task_manager in job.described_by:
            return f"no longer running on {task_manager} (its end not reported yet)"
        return f"no answer from {task_manager}"

    async def _deploy(self, job: _JobExecution, graph: ExecutionGraph, config: JobConfig, start: float,
                      serialized: bytes, restore: Mapping[str, Any] | None) -> None:
        """Deploy every subtask as the job's current attempt, from `restore` (None: the beginning)."""
        addresses = {eid: self.task_managers[tm].shuffle_address for eid, tm in job.placement.items()}
        attempts = new_attempt_ids(graph)
        for task_manager in dict.fromkeys(job.placement.values()):
            if task_manager not in job.deployed_to:
                job.deployed_to.add(task_manager)
                await self._send(task_manager, DeployJob(job.job_id, serialized))
        for vertex in graph.all_execution_vertices:
            eid = execution_id(vertex)
            info = JobInformation(job.job_id, config.seed, kernel.current_time() - start, config.duration,
                                  config.sample_period, asdict(config.checkpoint_costs), job.attempt,
                                  config.task_cancellation_timeout)
            descriptor = create_descriptor(vertex, info, addresses, attempts,
                                           None if restore is None else restore.get(eid))
            if not await self._send(job.placement[eid], DeployTask(descriptor.to_message())):
                job.on_deployment_failed(eid, RecipientUnreachableError("submitTask", self.address, job.placement[eid]))

    def _checkpoint_coordinator(self, job: _JobExecution, graph: ExecutionGraph, config: JobConfig,
                                start: float) -> CheckpointCoordinator | None:
        settings = graph.job_graph.checkpointing
        if settings is None or not settings.enabled:
            return None
        plan_calculator = DefaultCheckpointPlanCalculator(graph, settings.config.checkpoints_after_tasks_finish)

        async def send_trigger(eid: str, barrier: Any) -> None:
            options = barrier.options
            await self._send(job.placement[eid], TriggerCheckpoint(job.job_id, eid, barrier.id, barrier.timestamp,
                                                                   int(options.alignment),
                                                                   options.aligned_checkpoint_timeout))

        async def send_abort(checkpoint_id: int) -> None:
            for task_manager in dict.fromkeys(job.placement.values()):
                await self._send(task_manager, AbortCheckpoint(job.job_id, checkpoint_id))

        async def send_complete(checkpoint_id: int) -> None:
            for task_manager in dict.fromkeys(job.placement.values()):
                await self._send(task_manager, NotifyCheckpointComplete(job.job_id, checkpoint_id))

        rng = np.random.default_rng([config.seed & 0xFFFF_FFFF, zlib.crc32(b"checkpoint-coordinator")])
        failure_manager = CheckpointFailureManager(settings.config.tolerable_failed_checkpoints, job.fail)
        return CheckpointCoordinator(settings.config, config.checkpoint_costs, plan_calculator, job.finished_tasks,
                                     send_trigger, send_abort, send_complete, lambda: kernel.current_time() - start,
                                     rng, self.tracer, failure_manager)

    async def _finish(self, job: _JobExecution, graph: ExecutionGraph, config: JobConfig,
                      duration: float) -> JobResult:
        """Release the job everywhere, merge the TaskManagers' reports."""
        hosts = [tm for tm in dict.fromkeys(job.placement.values()) if self.is_reachable(tm)]
        for task_manager in hosts:
            await self._send(task_manager, ReleaseJob(job.job_id))
        with kernel.move_on_after(config.cancel_timeout):
            await job.wait_for(lambda: all(tm in job.reports or not self.is_reachable(tm) for tm in hosts))
        if job.failure is not None:
            status = JobStatus.FAILED
        elif job.all_finished:
            status = JobStatus.FINISHED
        else:
            status = JobStatus.CANCELED
        checkpointing = graph.job_graph.checkpointing
        at_least_once = (checkpointing is not None and checkpointing.enabled
                         and checkpointing.config.mode.value == "AT_LEAST_ONCE")
        result = merge_reports(job.job_id, job.placement, job.reports, graph, status, duration, job.failure,
                               job.stopped_early, job.ended_early, _checkpoint_stats(job.checkpoint_coordinator),
                               replayed_at_least_once=at_least_once and bool(job.restart_history))
        result.restart_history = job.restart_history
        result.recovery_suppressed_by = job.recovery_suppressed_by
        return result


def _vertex_end_times(job: _JobExecution, graph: ExecutionGraph, start: float) -> dict[str, float | None]:
    """Per job vertex, when its last subtask finished (job time, s; None if one did not):
    Flink's vertex end-time."""
    ends: dict[str, float | None] = {}
    for vertex in graph.job_graph.vertices:
        times = [job.finished_at.get(execution_id(ev)) for ev in graph.task_vertices[vertex.id]]
        ends[vertex.name] = None if None in times else round(max(times) - start, 6)
    return ends


def _checkpoint_stats(coordinator: CheckpointCoordinator | None) -> list[dict[str, Any]]:
    """Each checkpoint's figures; a completed one also with its exactly-once accounting."""
    if coordinator is None:
        return []
    entries = []
    for checkpoint in coordinator.checkpoints:
        entry = checkpoint.stats()
        if checkpoint.status == "COMPLETED":
            verified = verify_checkpoint(checkpoint.task_states().values())
            if verified is not None:
                entry["exactly_once"] = verified
        entries.append(entry)
    return entries
