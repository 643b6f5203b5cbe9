"""The SparkSession shufflesim runs on, Spark jobs watched from a thread, and running one
Python task per item with progress.

Local masters (`local`, `local[N]`, `local[*]`) are set up as measured on our machines:
the workers run this interpreter (`PYSPARK_PYTHON`), which has the project installed,
and are forked from a daemon that imported it once (scenarios/spark_daemon.py), in a
process started beside the JVM so that those imports overlap its start-up
(scenarios/spark_zygote.py); driver and
block manager bind to 127.0.0.1; the JVM compiles with its quick JIT only and maps the
class archive of Spark's classes if one was made (scenarios/spark_class_archive.py).
Always: no UI, no console progress bars; Spark logs errors only (unless asked: `verbose`,
$SHUFFLESIM_SPARK_VERBOSE); a failing task fails its job at once (no retries: a sim run
that failed once fails again), and so does a barrier stage with more tasks than the
cluster has slots (instead of waiting for slots). On a cluster master (`spark://`, `yarn`, `k8s://`) the workers need
Python 3.11 with shufflesim's dependencies (README, "Running on a Spark cluster"); the
project's own packages are zipped and shipped with `addPyFile`.

pyspark (about a second to import) is imported when a session is made, not with this module.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Spark's log: errors only (the root stays at WARN so Spark does not announce a shell log level).
LOG_CONFIG = Path(__file__).with_name("spark-log4j2.properties")

#: The local JVM only passes a few small objects between the driver and the Python
#: workers: the quick JIT alone and the serial collector halve the CPU time it takes
#: (measured: ~19 s -> ~10 s of CPU for a session and one job), which the sim runs
#: need on a machine with few cores.
LOCAL_JVM_OPTIONS = " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: Forks the Python workers of a local master with the project already imported
#: (scenarios/spark_daemon.py); other masters keep pyspark's daemon.
LOCAL_DAEMON_MODULE = "scenarios.spark_daemon"
DAEMON_MODULE = "pyspark.daemon"

#: Set (to anything but "" or "0") to see Spark's own log.
VERBOSE_VARIABLE = "SHUFFLESIM_SPARK_VERBOSE"

#: The project's packages, shipped to cluster workers.
PACKAGES = ("graph", "shuffle", "taskmgr", "scenarios")

T = TypeVar("T")
R = TypeVar("R")


class SparkJobError(RuntimeError):
    """A Spark job failed; the message is the root cause (a task's Python error, if any)."""


def is_local(master: str) -> bool:
    """Whether `master` runs everything in this machine's driver JVM (`local`, `local[4]`, ...)."""
    return master == "local" or master.startswith("local[")


def verbose_from_environment() -> bool:
    """Whether $SHUFFLESIM_SPARK_VERBOSE asks for Spark's own log (any value but "", "0")."""
    return os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")


def spark_session(master: str = "local[*]", app_name: str = "shufflesim", verbose: bool = False,
                  record_classes_to: Path | None = None) -> SparkSession:
    """A SparkSession on `master`, configured for shufflesim's tasks (see the module docstring);
    `verbose` (or $SHUFFLESIM_SPARK_VERBOSE) keeps Spark's own log at its default level.
    A local master's JVM starts from the class archive if one was made, or records one into
    `record_classes_to` (scenarios/spark_class_archive.py)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from scenarios.spark_class_archive import archive_options, record_options
    from scenarios.spark_zygote import ZYGOTE_VARIABLE, start_zygote, stop_zygotes

    if record_classes_to is not None and not is_local(master):
        raise ValueError(f"only a local master's JVM records a class archive, not {master!r}'s")
    verbose = verbose or verbose_from_environment()
    java_options = "" if verbose else f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}"
    if is_local(master):
        java_options += LOCAL_JVM_OPTIONS + (archive_options(LOCAL_JVM_OPTIONS) if record_classes_to is None
                                             else record_options(record_classes_to))
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.stage.maxConsecutiveAttempts", "1")
               .config("spark.task.maxFailures", "1")
               # a barrier stage with more tasks than slots fails at once instead of retrying
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
               .config("spark.driver.extraJavaOptions", java_options)
               # always set: a session inherits the settings of an earlier one in this process
               .config("spark.python.daemon.module", LOCAL_DAEMON_MODULE if is_local(master) else DAEMON_MODULE))
    zygote = None
    if is_local(master):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        # a new session's daemon takes over a zygote (an existing session keeps its daemon)
        zygote = start_zygote(verbose) if SparkContext._active_spark_context is None else None
        builder = builder.config(f"spark.executorEnv.{ZYGOTE_VARIABLE}", zygote or "")
    try:
        spark, interrupted = _start_uninterrupted(builder.getOrCreate)
    except BaseException:
        if zygote:
            stop_zygotes()
        raise
    if interrupted:  # Ctrl-C while Spark started: stop what started, then give way to it
        spark.stop()
        if zygote:
            stop_zygotes()
        raise KeyboardInterrupt
    if not verbose:
        spark.sparkContext.setLogLevel("ERROR")
    if not is_local(master):
        ship_project_code(spark)
    return spark


def project_code_zip(path: Path) -> Path:
    """A zip of the project's packages (sources and package data) at `path`, for `addPyFile`."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in PACKAGES:
            root = Path(importlib.import_module(name).__file__).parent
            for file in sorted(root.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts:
                    archive.write(file, Path(name) / file.relative_to(root))
    return path


def ship_project_code(spark: SparkSession) -> None:
    """Make the project's packages importable on the workers (they still need its dependencies)."""
    path = project_code_zip(Path(tempfile.mkdtemp(prefix="shufflesim-")) / "shufflesim.zip")
    spark.sparkContext.addPyFile(str(path))


def _tasks_done(spark: SparkSession, group: str) -> int:
    tracker = spark.sparkContext.statusTracker()
    done = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else ():
            stage = tracker.getStageInfo(stage_id)
            done += stage.numCompletedTasks if stage else 0
    return done


_STAGE_FAILURE = "Most recent failure reason: "


def root_cause(error: BaseException) -> str:
    """The root cause of a failed Spark job: a task's Python exception line, else Spark's message."""
    java = getattr(error, "java_exception", None)
    message = str(java.toString()) if java is not None else str(error)
    if "Traceback (most recent call last)" in message:
        traceback = message.split("Traceback (most recent call last)", 1)[1].split("\n\tat ", 1)[0]
        lines = [line for line in traceback.splitlines() if line.strip() and not line.startswith(" ")]
        if lines:
            return lines[-1].strip()
    if not message:
        return type(error).__name__
    lines = message.splitlines()
    reason = lines[0].split(_STAGE_FAILURE, 1)[-1]
    # A failed barrier stage names its task; the exception that failed it follows.
    detail = next((line for line in lines[1:] if line.strip() and not line.startswith(("\t", " ", "Caused by"))),
                  None)
    if _STAGE_FAILURE in lines[0] and detail is not None:
        reason = f"{reason.rstrip('.')}: {detail.split(': ', 1)[-1].split('. ', 1)[0]}"
    return reason


def task_slots(spark: SparkSession) -> int:
    """How many tasks the cluster runs at once now (what a barrier stage may use)."""
    sc = spark.sparkContext
    try:  # what Spark's own barrier check counts (a JVM method, private to Spark's Scala API)
        scala = sc._jsc.sc()
        return int(scala.maxNumConcurrentTasks(scala.resourceProfileManager().defaultResourceProfile()))
    except Exception:
        return sc.defaultParallelism


class SparkJob:
    """`rdd.collect()` run in a thread of its own, in a job group of its own, so that the
    caller can watch it (`running`, `tasks_done`), cancel it and take its outcome."""

    def __init__(self, spark: SparkSession, rdd: Any, description: str) -> None:
        from pyspark import InheritableThread

        self.spark = spark
        self.group = f"shufflesim-{uuid.uuid4().hex}"
        self._outcome: dict[str, Any] = {}
        self._thread: threading.Thread = InheritableThread(target=self._collect, args=(rdd, description),
                                                           daemon=True)
        self._thread.start()

    def _collect(self, rdd: Any, description: str) -> None:
        sc = self.spark.sparkContext
        sc.setJobGroup(self.group, description, interruptOnCancel=True)
        sc.setLocalProperty("callSite.short", description)  # what Spark's messages call the job
        try:
            self._outcome["results"] = rdd.collect()
        except Exception as e:  # handed to the caller by `results`
            self._outcome["error"] = e

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def cancel(self) -> None:
        """Cancel the job's running tasks (Spark kills their Python workers)."""
        self.spark.sparkContext.cancelJobGroup(self.group)

    def tasks_done(self) -> int:
        return _tasks_done(self.spark, self.group)

    @property
    def error(self) -> str | None:
        """The root cause of the job's failure (None while it runs or if it succeeded)."""
        error = self._outcome.get("error")
        return None if error is None else root_cause(error)

    def results(self) -> list[Any]:
        """The collected results of the finished job; `SparkJobError` if it failed."""
        if self.error is not None:
            raise SparkJobError(self.error)
        return self._outcome["results"]


@contextmanager
def _sigint_flag() -> Iterator[threading.Event]:
    """Within the block (in the main thread), SIGINT only sets the event. pyspark's own
    handler calls the JVM from inside the signal handler: if the signal comes while the
    main thread is in a call to the JVM, py4j fails re-entered and logs pages of tracebacks."""
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: flag.set())
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def _start_uninterrupted(start: Callable[[], T]) -> tuple[T, bool]:
    """`start()` run to its end in a thread of its own while SIGINT only sets a flag; its
    result and whether SIGINT came. Interrupted midway, pyspark leaves its JVM running; and
    in the main thread it installs a SIGINT handler of its own, which calls the JVM from the
    signal handler (py4j fails re-entered) or loses the signal."""
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, start()))
        except BaseException as e:  # handed to the caller
            outcome.append((False, e))

    thread = threading.Thread(target=target, name="shufflesim-spark-start", daemon=True)
    with _sigint_flag() as interrupted:
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
    started, value = outcome[0]
    if not started:
        raise value
    return value, interrupted.is_set()


def run_tasks(spark: SparkSession, fn: Callable[[T], R], items: Sequence[T],
              on_progress: Callable[[int, int], None] | None = None, poll_seconds: float = 0.5) -> list[R]:
    """`[fn(item) for item in items]`, one Spark task per item, in order.

    `on_progress(done, total)` is called about every `poll_seconds` while the job runs and
    once at the end. Ctrl-C cancels the job, then raises KeyboardInterrupt. A failed task
    fails the job: `SparkJobError`.
    """
    rdd = spark.sparkContext.parallelize(list(items), max(1, len(items))).map(fn)
    job = SparkJob(spark, rdd, f"shufflesim: {len(items)} tasks")
    with _sigint_flag() as interrupted:
        while job.running and not interrupted.is_set():
            job.join(poll_seconds)
            if on_progress is not None and job.running and not interrupted.is_set():
                on_progress(job.tasks_done(), len(items))
    if interrupted.is_set():
        job.cancel()
        job.join()
        raise KeyboardInterrupt
    results = job.results()
    if on_progress is not None:
        on_progress(len(items), len(items))
    return results


@dataclass(frozen=True)
class TaskFailed:
    """An item of `run_isolated` whose task failed (e.g. its Python worker died): the root cause."""

    cause: str


def run_isolated(spark: SparkSession, fn: Callable[[T], R], items: Sequence[T],
                 on_progress: Callable[[int, int], None] | None = None,
                 poll_seconds: float = 0.5) -> list[R | TaskFailed]:
    """`[fn(item) for item in items]` as `run_tasks`, but each item a Spark job of its own, so
    that a task that fails (its Python worker crashed, was killed for memory) is only that
    item's `TaskFailed` and the others run. Twice as many jobs as the cluster has slots are
    submitted at once, so that a freed slot takes the next one without waiting for the driver.
    Ctrl-C cancels the jobs running, then raises KeyboardInterrupt.
    """
    sc = spark.sparkContext
    total = len(items)
    width = 2 * max(1, task_slots(spark))
    waiting = list(enumerate(items))
    running: dict[int, SparkJob] = {}
    results: list[Any] = [None] * total
    done, shown_at = 0, -float("inf")
    with _sigint_flag() as interrupted:
        while (waiting or running) and not interrupted.is_set():
            while waiting and len(running) < width:
                i, item = waiting.pop(0)
                running[i] = SparkJob(spark, sc.parallelize([item], 1).map(fn),
                                      f"shufflesim: task {i + 1} of {total}")
            interrupted.wait(0.05)
            for i, job in list(running.items()):
                if not job.running:
                    del running[i]
                    results[i] = TaskFailed(job.error) if job.error is not None else job.results()[0]
                    done += 1
            if on_progress is not None and not interrupted.is_set() \
                    and (not (waiting or running) or time.monotonic() - shown_at >= poll_seconds):
                shown_at = time.monotonic()
                on_progress(done, total)
    if interrupted.is_set():
        for job in running.values():
            job.cancel()
        for job in running.values():
            job.join()
        raise KeyboardInterrupt
    return results
