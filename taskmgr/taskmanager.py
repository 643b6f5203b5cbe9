"""TaskManager: slots, a shuffle environment, and the tasks the JobManager deploys.

A TaskManager needs only the JobManager's address: it starts its shuffle environment
(NetworkBufferPool sized from its network memory, partition manager, connection
manager serving its partitions), connects to the JobManager, registers its slots and
shuffle address, then follows the JobManager's messages: deploy and cancel tasks, stop
sources (drain), release a job (send its report), shut down. It samples its tasks'
metrics for the job and reports them at release.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from graph import JobGraph
from shuffle import kernel
from shuffle.api.events import AlignmentType, CheckpointBarrier, CheckpointOptions
from shuffle.config import NetworkConfig
from shuffle.environment import NettyShuffleEnvironment
from shuffle.errors import CreditViolationError
from shuffle.netty.connection_manager import Transport
from shuffle.trace import NULL_TRACER, Tracer
from taskmgr.deployment import TaskDeploymentDescriptor
from taskmgr.execution_state import ExecutionState
from taskmgr.metrics.sampler import MetricSampler
from taskmgr.metrics.table import MetricTable
from taskmgr.operators.base import RunControl
from taskmgr.payloads import dump_exception, dump_object, dump_table, load_object
from taskmgr.rpc import (AbortCheckpoint, AcknowledgeCheckpoint, AttemptCancelled, CancelAttempt, CancelTask,
                         DeclineCheckpoint, DeployJob, DeployTask, DescribeTasks, Heartbeat, HeartbeatRequest,
                         NotifyCheckpointComplete, RegisterTaskManager, ReleaseJob, RpcConnection, RpcError,
                         RpcMessage, Shutdown, StopSources, TaskDescriptions, TaskExecutionState, TriggerCheckpoint,
                         job_report_messages)
from taskmgr.task import Task
from taskmgr.task_services import TaskServices

log = logging.getLogger(__name__)
#: Shortest time (in sample periods) the last sample of a run may cover.
MIN_LAST_SAMPLE = 0.1


def _caused_by(exc: BaseException | None, error_type: type[BaseException]) -> bool:
    """Whether `exc` is, or was raised from, an `error_type`."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, error_type):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _describe(task: Task) -> str:
    """`Task.describe_wait`, or what kept it from saying (a diagnostic must not end the
    TaskManager: the failed drain it explains goes on to cancel the job)."""
    try:
        return task.describe_wait()
    except Exception as exc:  # noqa: BLE001 - reported in the job's failure instead
        return f"cannot say ({type(exc).__name__}: {exc})"


def _credit_violations(tasks: Iterable[Task]) -> int:
    return sum(_caused_by(task.failure_cause, CreditViolationError) for task in tasks)


class _CheckpointResponder:
    """A job's checkpoint acknowledgements and declines on their way to the JobManager."""

    def __init__(self, job_id: str, outbox: kernel.Queue) -> None:
        self.job_id = job_id
        self.outbox = outbox

    async def acknowledge(self, task: Task, ack: Any) -> None:
        await kernel.sleep(task.checkpoint_costs.ack_latency)
        self.outbox.put_nowait(AcknowledgeCheckpoint(self.job_id, task.execution_id, dump_object(ack)))

    async def decline(self, task: Task, checkpoint_id: int, reason: str) -> None:
        await kernel.sleep(task.checkpoint_costs.ack_latency)
        self.outbox.put_nowait(DeclineCheckpoint(self.job_id, task.execution_id, checkpoint_id, reason))


class _JobSession:
    """One job's tasks, clock, sampling and shared services in this TaskManager."""

    def __init__(self, name: str, job_graph: JobGraph, start_offset: float,
                 duration: float, sample_period: float, seed: int) -> None:
        now = kernel.current_time()
        self.job_graph = job_graph
        self.run_control = RunControl(now - start_offset, duration=duration)
        self.end = self.run_control.t0 + duration
        sampler = MetricSampler(sample_period, rng=random.Random(f"{seed}/metric-readings/{name}"))
        sampler.t0 = self.run_control.t0
        self.services = TaskServices(name, sampler)
        self.tasks: dict[str, Task] = {}
        self.sampling = kernel.CancelScope()
        self.sampling_stopped = False
        self.attempt = 0
        #: Credit violations of the attempts that were cancelled for a restart.
        self.earlier_credit_violations = 0
        self._running: set[Task] = set()
        self._task_ended = kernel.Event()

    async def run_task(self, task: Task) -> None:
        """Run `task` to its end, its resources released (a cancelled attempt waits for this)."""
        self._running.add(task)
        try:
            await task.run()
        finally:
            self._running.discard(task)
            self._task_ended.set()
            self._task_ended = kernel.Event()

    async def cancel_attempt(self, cancel: Callable[[Task], None]) -> int:
        """End the current attempt (taskmgr.failover): `cancel` its tasks, wait until they have
        ended, release what they produced, drop what the attempt counted. Returns the records
        its sources had emitted (since the job began: a restored position included)."""
        for task in self.tasks.values():
            cancel(task)
        while self._running:
            await self._task_ended.wait()
        contexts = [task.context for task in self.tasks.values() if task.context is not None]
        self.earlier_credit_violations += _credit_violations(self.tasks.values())
        for task in self.tasks.values():
            task.release_partitions()
        for channel in self.services.iteration_channels.values():
            channel.queue.close()
        self.tasks.clear()
        # What an attempt counts starts anew (its sinks see every record again); latency and
        # metrics go on over the whole run (its tasks register their metrics anew).
        self.services.sampler.unregister_all()
        fresh = TaskServices(self.services.task_manager, self.services.sampler)
        self.services = dataclasses.replace(
            self.services, collected=fresh.collected, verifications=fresh.verifications,
            emitted_per_origin=fresh.emitted_per_origin, iteration_channels=fresh.iteration_channels)
        return sum(context.records_emitted for context in contexts)

    def start_attempt(self, attempt: int) -> None:
        """The job's next attempt is being deployed: its sources pace themselves from now."""
        self.attempt = attempt
        self.run_control.attempt_start = kernel.current_time()

    async def run_sampler(self) -> None:
        """Sample every period until the end of the run (then once at the end)."""
        with self.sampling:
            await self.services.sampler.run(until=self.end)
            await kernel.sleep_until(self.end)
            self.stop_sampling()

    def stop_sampling(self) -> None:
        """Take the last sample now (unless one was taken less than a tenth of a period
        ago: rates over a sliver of time are noise) and stop sampling."""
        if self.sampling_stopped:
            return
        self.sampling.cancel()
        sampler = self.services.sampler
        if kernel.current_time() - sampler.last_sample_at >= MIN_LAST_SAMPLE * sampler.period:
            sampler.sample()
        self.sampling_stopped = True


def task_manager_name(index: int) -> str:
    """The name of a cluster's `index`-th TaskManager (tm-0, tm-1, ...): in-process and on Spark
    (barrier task `index`) alike, so placement and faults name the same ones everywhere."""
    return f"tm-{index}"


class TaskManagerFatalError(RuntimeError):
    """Flink's TaskExecutor fatal error: the TaskManager's process ends."""


class TaskManager:
    def __init__(self, name: str, jobmanager_address: Hashable, transport: Transport, config: NetworkConfig,
                 num_slots: int = 1, tracer: Tracer = NULL_TRACER, shuffle_address: Hashable | None = None,
                 executor_id: str | None = None) -> None:
        self.name = name
        #: The Spark executor hosting this TaskManager (None outside Spark).
        self.executor_id = executor_id
        self.jobmanager_address = jobmanager_address
        self.transport = transport
        self.config = config
        self.num_slots = num_slots
        self.shuffle_address = name if shuffle_address is None else shuffle_address
        self.env = NettyShuffleEnvironment(config, transport, tracer.for_task_manager(name))
        self._jobs: dict[str, _JobSession] = {}
        #: Job id -> its JobGraph (or why it did not load), from `DeployJob` to `ReleaseJob`.
        self._graphs: dict[str, JobGraph | RpcError] = {}
        #: False: it stops answering the JobManager's heartbeats (a hung process, in tests).
        self.responsive = True
        self._connection: RpcConnection | None = None
        self._nursery: Any | None = None
        # Task state updates go out in the order they happen, through one sender. What the
        # JobManager's messages put in it is bounded: at most one heartbeat waits in it.
        self._outbox: kernel.Queue[RpcMessage] = kernel.Queue()
        self._heartbeat_queued = False

    async def run(self, *, task_status: Any = kernel.TASK_STATUS_IGNORED) -> None:
        """Serve partitions, register at the JobManager, follow it until shutdown or disconnect."""
        try:
            async with kernel.open_nursery() as nursery:
                self._nursery = nursery
                address = await self.env.start(nursery, self.shuffle_address)
                self._connection = RpcConnection(await self.transport.connect(self.jobmanager_address))
                await self._connection.send(RegisterTaskManager(self.name, address, self.num_slots, os.getpid(),
                                                                self.executor_id))
                nursery.start_soon(self._send_outbox)
                task_status.started()
                await self._follow_jobmanager()
                nursery.cancel_scope.cancel()
        finally:
            with kernel.CancelScope(shield=True):
                await self.env.close()
                if self._connection is not None:
                    await self._connection.aclose()

    def find_task(self, vertex: str, subtask: int) -> Task | None:
        """The running subtask `subtask` of the vertex `vertex` names (`JobVertex.is_named`)."""
        for job in self._jobs.values():
            for task in job.tasks.values():
                if task.vertex.is_named(vertex) and task.descriptor.subtask_index == subtask:
                    return task
        return None

    def job_start_time(self) -> float | None:
        """When (kernel clock) the job whose tasks run here started; None before its first task."""
        return next((job.run_control.t0 for job in self._jobs.values()), None)

    def records_emitted(self) -> int:
        """Records the sources of this TaskManager emitted so far, over its running jobs."""
        return sum(task.context.records_emitted for job in self._jobs.values() for task in job.tasks.values()
                   if task.context is not None)

    async def _follow_jobmanager(self) -> None:
        """Follow the JobManager until it says shut down, disconnects or breaks the protocol."""
        while True:
            try:
                if not await self._handle_next_message():
                    return
            except RpcError as exc:
                log.error("%s: disconnecting from the JobManager, which broke the protocol: %s", self.name, exc)
                return

    async def _handle_next_message(self) -> bool:
        """Receive and handle the JobManager's next message; False when it says stop. (A
        frame of its own, so that a message is not kept while the next one is awaited: a
        task's deployment descriptor holds a dict per input channel.)"""
        message = await self._connection.receive()
        if message is None or isinstance(message, Shutdown):
            return False
        handler = self._handlers.get(type(message))
        if handler is None:
            raise RpcError(f"unexpected message {message.TYPE!r} from the JobManager")
        await handler(self, message)
        return True

    async def _on_deploy_job(self, message: DeployJob) -> None:
        try:
            self._graphs[message.job_id] = load_object(message.job_graph, "job graph")
        except RpcError as exc:  # e.g. user code this process cannot import: its tasks fail with it
            self._graphs[message.job_id] = exc

    async def _on_deploy_task(self, message: DeployTask) -> None:
        try:
            descriptor = TaskDeploymentDescriptor.from_message(message.descriptor)
        except (TypeError, KeyError) as exc:
            raise RpcError(f"deploy_task: malformed descriptor ({exc})") from None
        info = descriptor.job
        graph = self._graphs.get(info.job_id)
        if graph is None:
            raise RpcError(f"deploy_task: job {info.job_id!r} was not deployed first")
        if isinstance(graph, BaseException):
            self._outbox.put_nowait(TaskExecutionState(info.job_id, descriptor.execution_id,
                                                       ExecutionState.FAILED.value, str(graph)))
            return
        job = self._jobs.get(info.job_id)
        if job is None:
            job = _JobSession(self.name, graph, info.start_offset, info.duration, info.sample_period, info.seed)
            job.services.checkpoint_responder = _CheckpointResponder(info.job_id, self._outbox)
            self._jobs[info.job_id] = job
            self._nursery.start_soon(job.run_sampler)
        if info.attempt != job.attempt:
            job.start_attempt(info.attempt)
        task = Task(descriptor, job.job_graph, self.env, job.services, job.run_control, self._report_state)
        job.tasks[task.execution_id] = task
        self._nursery.start_soon(job.run_task, task)

    def _report_state(self, task: Task) -> None:
        cause = task.failure_cause
        error = None if cause is None else f"{type(cause).__name__}: {cause}"
        self._outbox.put_nowait(TaskExecutionState(
            task.descriptor.job.job_id, task.execution_id, task.state.value, error,
            None if cause is None else dump_exception(cause), task.descriptor.job.attempt))

    async def _send_outbox(self) -> None:
        async for message in self._outbox:
            if isinstance(message, Heartbeat):
                self._heartbeat_queued = False
            try:
                await self._connection.send(message)
            except (kernel.BrokenResourceError, kernel.ClosedResourceError):
                return  # the JobManager is gone; the connection loop ends on its own

    async def _on_heartbeat_request(self, message: HeartbeatRequest) -> None:
        if self.responsive and not self._heartbeat_queued:
            self._heartbeat_queued = True
            self._outbox.put_nowait(Heartbeat())

    async def _on_cancel_task(self, message: CancelTask) -> None:
        for job in self._jobs.values():
            task = job.tasks.get(message.execution_id)
            if task is not None:
                self._cancel_task(task)

    def _cancel_task(self, task: Task) -> None:
        """Cancel `task`; if it has not ended `task.cancellation.timeout` later (user code
        that ignores the interrupts), this TaskManager dies, as Flink's TaskCancelerWatchDog
        makes it (a fatal error ends the process)."""
        watched = task.cancel_requested
        task.cancel()
        timeout = task.descriptor.job.task_cancellation_timeout
        if not watched and timeout > 0 and not task.ended.is_set():
            self._nursery.start_soon(self._cancellation_watchdog, task, timeout)

    async def _cancellation_watchdog(self, task: Task, timeout: float) -> None:
        with kernel.move_on_after(timeout):
            await task.ended.wait()
            return
        message = f"Task did not exit gracefully within {timeout:g} + seconds."
        log.error("%s: %s (%s); the TaskManager terminates", self.name, message, task.name)
        raise TaskManagerFatalError(message)

    async def _on_cancel_attempt(self, message: CancelAttempt) -> None:
        self._nursery.start_soon(self._cancel_attempt, message)

    async def _cancel_attempt(self, message: CancelAttempt) -> None:
        job = self._jobs.get(message.job_id)
        records_emitted = 0 if job is None else await job.cancel_attempt(self._cancel_task)
        self._outbox.put_nowait(AttemptCancelled(message.job_id, message.attempt, records_emitted))

    async def _on_trigger_checkpoint(self, message: TriggerCheckpoint) -> None:
        """The coordinator triggers a checkpoint at a task (a source, or a task whose
        predecessors have finished)."""
        job = self._jobs.get(message.job_id)
        task = job.tasks.get(message.execution_id) if job is not None else None
        if task is None:
            return
        try:
            alignment = AlignmentType(message.alignment)
        except ValueError:
            raise RpcError(f"trigger_checkpoint: unknown alignment {message.alignment}") from None
        options = CheckpointOptions("CHECKPOINT", alignment, message.aligned_timeout)
        barrier = CheckpointBarrier(message.checkpoint_id, message.timestamp, options)
        declined = task.trigger_checkpoint(barrier)
        if declined is not None:
            await job.services.checkpoint_responder.decline(task, barrier.id, declined)

    async def _on_abort_checkpoint(self, message: AbortCheckpoint) -> None:
        job = self._jobs.get(message.job_id)
        if job is not None:
            for task in job.tasks.values():
                task.notify_checkpoint_aborted(message.checkpoint_id)

    async def _on_notify_checkpoint_complete(self, message: NotifyCheckpointComplete) -> None:
        job = self._jobs.get(message.job_id)
        if job is not None:
            for task in job.tasks.values():
                task.notify_checkpoint_complete(message.checkpoint_id)

    async def _on_stop_sources(self, message: StopSources) -> None:
        """The run's duration is over: stop sampling, stop sources, drain without costs."""
        job = self._jobs.get(message.job_id)
        if job is None:
            return
        job.stop_sampling()
        job.run_control.costs_enabled = False
        for task in job.tasks.values():
            task.stop_source()

    async def _on_describe_tasks(self, message: DescribeTasks) -> None:
        job = self._jobs.get(message.job_id)
        tasks = {} if job is None else job.tasks
        descriptions = {eid: _describe(task) for eid, task in tasks.items() if not task.state.is_terminal}
        self._outbox.put_nowait(TaskDescriptions(message.job_id, descriptions))

    async def _on_release_job(self, message: ReleaseJob) -> None:
        self._graphs.pop(message.job_id, None)
        job = self._jobs.pop(message.job_id, None)
        report: dict[str, Any] = {}
        if job is not None:
            job.stop_sampling()
            for task in job.tasks.values():
                self._cancel_task(task)
                task.release_partitions()
            for channel in job.services.iteration_channels.values():
                channel.queue.close()
            await kernel.checkpoint()
            report = self._job_report(job)
        pool = self.env.network_pool
        report.update(task_manager=self.name, available_segments=pool.num_available_segments,
                      total_segments=pool.total_segments)
        metrics = report.pop("metrics", None)
        for part in job_report_messages(message.job_id, dump_object(report),
                                        dump_table(metrics if metrics is not None else MetricTable().to_arrow())):
            self._outbox.put_nowait(part)

    def _job_report(self, job: _JobSession) -> dict[str, Any]:
        contexts = [task.context for task in job.tasks.values() if task.context is not None]
        return {
            "metrics": job.services.sampler.table.to_arrow(),
            "collected": dict(job.services.collected),
            "verifications": {name: v.compacted() for name, v in job.services.verifications.items()},
            "latency": {vertex: histogram.to_message() for vertex, histogram in job.services.latency.items()},
            "latency_periods": dict(job.services.latency_periods),
            "emitted_per_origin": dict(job.services.emitted_per_origin),
            "records_emitted": sum(c.records_emitted for c in contexts),
            "records_received": sum(c.records_received for c in contexts),
            "credit_violations": job.earlier_credit_violations + _credit_violations(job.tasks.values()),
            "task_states": {t.execution_id: t.state.value for t in job.tasks.values()},
        }

    _handlers = {DeployJob: _on_deploy_job, DeployTask: _on_deploy_task, CancelTask: _on_cancel_task,
                 TriggerCheckpoint: _on_trigger_checkpoint, AbortCheckpoint: _on_abort_checkpoint,
                 NotifyCheckpointComplete: _on_notify_checkpoint_complete,
                 StopSources: _on_stop_sources, DescribeTasks: _on_describe_tasks, ReleaseJob: _on_release_job,
                 HeartbeatRequest: _on_heartbeat_request,
                 CancelAttempt: _on_cancel_attempt}
