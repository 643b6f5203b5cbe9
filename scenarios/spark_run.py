"""`shufflesim run --engine spark`: the JobManager in the driver, TaskManagers in Spark executors.

One barrier stage of one task per TaskManager (`taskmgr.spark_executor`); the job's
program reaches the executors serialized in the JobManager's messages, its metrics come
back in the TaskManagers' job reports, over the same authenticated TCP connections that
carry the data between executors (realtime mode). Failing fast:

- fewer task slots than TaskManagers is `SparkSlotsError` before anything starts;
- a TaskManager's task that fails (its process died, it raised) fails the stage; the
  driver then fails the job with the TaskManager's root cause at once;
- a TaskManager that hangs is lost to the JobManager's heartbeats; once the job has ended
  the driver gives the stage `SHUTDOWN_GRACE` seconds to end and then cancels it (Spark
  never times out a task on its own).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from graph import ExecutionGraph
from scenarios.scenario_file import Scenario, ScenarioError
from scenarios.spark_session import SparkJob, is_local, task_slots
from shuffle import kernel
from shuffle.transport.auth import generate_secret
from taskmgr.cluster import (ClusterConfig, ProgressCallback, StopCheck, create_transport, report_end,
                             report_progress)
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobManager
from taskmgr.results import JobResult, JobStatus
from taskmgr.spark_executor import LOOPBACK, ExecutorTaskManagerSpec, run_task_manager

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Executors may take a while to start their Python workers (and on a cluster, to be granted).
REGISTRATION_TIMEOUT = 60.0
#: Seconds the TaskManagers' tasks may take to end once told to shut down, before they are cancelled.
SHUTDOWN_GRACE = 10.0
#: How often the driver looks at the stage (seconds).
POLL_INTERVAL = 0.05
#: Fault kinds a distributed run can inject (in the TaskManager's own process).
SPARK_FAULTS = ("kill_task_manager",)


class SparkSlotsError(ValueError):
    """The Spark cluster cannot run every TaskManager at once."""


class TaskManagerFailure(RuntimeError):
    """A TaskManager's Spark task failed; the message holds its root cause."""


@dataclass(frozen=True)
class SparkEngine:
    """Where `run --engine spark` runs: a SparkSession and its master URL."""

    spark: Any
    master: str


def check_runnable_on_spark(scenario: Scenario, trace: bool) -> None:
    """What a distributed run cannot do is the scenario's (or the command's) mistake."""
    where = scenario.source_path
    if scenario.mode != "realtime":
        raise ScenarioError(f"{where}: mode = {scenario.mode!r}: --engine spark runs in realtime mode (real TCP "
                            "between executors); add --set mode=realtime")
    if trace:
        raise ScenarioError("--trace needs the local engine: the TaskManagers' events stay in the executors")
    for i, fault in enumerate(scenario.faults):
        if fault.kind not in SPARK_FAULTS:
            raise ScenarioError(f"{where}: faults[{i}]: a {fault.kind!r} fault needs the local engine "
                                f"(--engine spark injects {', '.join(SPARK_FAULTS)})")


def check_slots(spark: SparkSession, master: str, task_managers: int) -> None:
    """`SparkSlotsError` unless the cluster runs `task_managers` tasks at once."""
    slots = task_slots(spark)
    if slots < task_managers:
        hint = "local[N] runs N" if is_local(master) else "add executors or executor cores"
        raise SparkSlotsError(
            f"--master {master}: the run needs {task_managers} TaskManagers, each in one task of a Spark barrier "
            f"stage, but the cluster runs {slots} task{'s' if slots != 1 else ''} at once ({hint})")


def run_on_spark(spark: SparkSession, master: str, graph: ExecutionGraph, cluster: ClusterConfig, job: JobConfig,
                 faults: tuple[Fault, ...] = (), progress: ProgressCallback | None = None,
                 should_stop: StopCheck | None = None) -> JobResult:
    """Run the job with its TaskManagers in Spark executors; its result, as a local run's."""
    check_slots(spark, master, cluster.task_managers)
    if cluster.secret is None:
        cluster = replace(cluster, secret=generate_secret())
    local = is_local(master)
    host = LOOPBACK if local else spark.sparkContext.getConf().get("spark.driver.host")
    job = replace(job, registration_timeout=max(job.registration_timeout, REGISTRATION_TIMEOUT))
    return kernel.run(_drive, spark, graph, cluster, job, host, local, faults, progress, should_stop,
                      mode="realtime")


async def _drive(spark: SparkSession, graph: ExecutionGraph, cluster: ClusterConfig, job: JobConfig, host: str,
                 local: bool, faults: tuple[Fault, ...], progress: ProgressCallback | None,
                 should_stop: StopCheck | None) -> JobResult:
    """The JobManager here, the TaskManagers' stage on Spark, the job, then the stage's end."""
    jobmanager = JobManager(create_transport(cluster), f"{host}:0", cluster.heartbeat_interval,
                            cluster.heartbeat_timeout)
    n = cluster.task_managers
    async with kernel.open_nursery() as nursery:
        address = await nursery.start(jobmanager.run)
        spec = ExecutorTaskManagerSpec(address, cluster.secret, cluster.network, cluster.slots_per_task_manager,
                                       local, faults)
        rdd = spark.sparkContext.parallelize(range(n), n).barrier().mapPartitions(
            functools.partial(run_task_manager, spec))
        stage = SparkJob(spark, rdd, f"shufflesim: {n} TaskManagers")
        try:
            result = await _run_job(jobmanager, stage, graph, job, progress, should_stop)
            await jobmanager.shutdown()
            with kernel.move_on_after(SHUTDOWN_GRACE):
                while stage.running:
                    await kernel.sleep(POLL_INTERVAL)
        finally:
            if stage.running:  # the watchdog: a hung TaskManager, or the run was interrupted
                stage.cancel()
                stage.join(SHUTDOWN_GRACE)
        nursery.cancel_scope.cancel()
    if stage.error is not None and result.status is JobStatus.FAILED and not isinstance(result.error,
                                                                                          TaskManagerFailure):
        result.error = TaskManagerFailure(f"{result.error}; Spark: {stage.error}")
    result.task_managers = list(jobmanager.registrations)
    return result


async def _run_job(jobmanager: JobManager, stage: SparkJob, graph: ExecutionGraph, job: JobConfig,
                   progress: ProgressCallback | None, should_stop: StopCheck | None) -> JobResult:
    """Submit the job; a stage that fails meanwhile fails the job (or ends the wait for its TaskManagers)."""
    with kernel.CancelScope() as waiting:
        async with kernel.open_nursery() as nursery:
            nursery.start_soon(_fail_with_stage, jobmanager, stage, waiting)
            if progress is not None or should_stop is not None:
                nursery.start_soon(report_progress, jobmanager, job, progress, should_stop, lambda: None)
            result = await jobmanager.submit_job(graph, job)
            nursery.cancel_scope.cancel()
        report_end(progress, result)
        return result
    return JobResult("job-0", JobStatus.FAILED, 0.0,
                     error=TaskManagerFailure(f"a TaskManager's Spark task failed: {stage.error}"))


async def _fail_with_stage(jobmanager: JobManager, stage: SparkJob, waiting: kernel.CancelScope) -> None:
    while stage.running:
        await kernel.sleep(POLL_INTERVAL)
    if stage.error is None:
        return  # the TaskManagers ended (shut down, or lost: the JobManager knows)
    cause = TaskManagerFailure(f"a TaskManager's Spark task failed: {stage.error}")
    # A failed barrier stage has ended every TaskManager's task: all are gone now, so a
    # restart finds no slots (the JobManager alone would find out by heartbeats, 10-20 s on).
    jobmanager.lose_task_managers(cause)
    if not jobmanager.fail_jobs(cause):
        waiting.cancel()  # no job yet: it was waiting for the TaskManagers
