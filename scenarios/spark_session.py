"""The SparkSession shufflesim runs on, and running one Python task per item with progress.

Local masters (`local`, `local[N]`, `local[*]`) are set up as measured on our machines:
the workers run this interpreter (`PYSPARK_PYTHON`), which has the project installed;
driver and block manager bind to 127.0.0.1; the JVM compiles with its quick JIT only.
Always: no UI, no console progress bars; Spark logs errors only; a failing task fails
its job at once (no retries: a sim run that failed once fails again). On a cluster master (`spark://`, `yarn`, `k8s://`) the workers need
Python 3.11 with shufflesim's dependencies (README, "Running on a Spark cluster"); the
project's own packages are zipped and shipped with `addPyFile`.

pyspark (about a second to import) is imported when a session is made, not with this module.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Callable, Sequence
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

#: The project's packages, shipped to cluster workers.
PACKAGES = ("graph", "shuffle", "taskmgr", "scenarios")

T = TypeVar("T")
R = TypeVar("R")


class SparkJobError(RuntimeError):
    """A Spark job failed; the message is the root cause (a task's Python error, if any)."""


def is_local(master: str) -> bool:
    """Whether `master` runs everything in this machine's driver JVM (`local`, `local[4]`, ...)."""
    return master == "local" or master.startswith("local[")


def spark_session(master: str = "local[*]", app_name: str = "shufflesim") -> SparkSession:
    """A SparkSession on `master`, configured for shufflesim's tasks (see the module docstring)."""
    from pyspark.sql import SparkSession

    java_options = f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}"
    if is_local(master):
        java_options += LOCAL_JVM_OPTIONS
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.stage.maxConsecutiveAttempts", "1")
               .config("spark.task.maxFailures", "1")
               .config("spark.driver.extraJavaOptions", java_options))
    if is_local(master):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    spark = builder.getOrCreate()
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


def root_cause(error: BaseException) -> str:
    """The root cause of a failed Spark job: a task's Python exception line, else Spark's message."""
    java = getattr(error, "java_exception", None)
    message = str(java.toString()) if java is not None else str(error)
    if "Traceback (most recent call last)" in message:
        traceback = message.split("Traceback (most recent call last)", 1)[1].split("\n\tat ", 1)[0]
        lines = [line for line in traceback.splitlines() if line.strip() and not line.startswith(" ")]
        if lines:
            return lines[-1].strip()
    return message.splitlines()[0] if message else type(error).__name__


def run_tasks(spark: SparkSession, fn: Callable[[T], R], items: Sequence[T],
              on_progress: Callable[[int, int], None] | None = None, poll_seconds: float = 0.5) -> list[R]:
    """`[fn(item) for item in items]`, one Spark task per item, in order.

    `on_progress(done, total)` is called about every `poll_seconds` while the job runs and
    once at the end. Ctrl-C cancels the job. A failed task fails the job: `SparkJobError`.
    """
    from pyspark import InheritableThread

    sc = spark.sparkContext
    group = f"shufflesim-{uuid.uuid4().hex}"
    rdd = sc.parallelize(list(items), max(1, len(items))).map(fn)
    outcome: dict[str, Any] = {}

    def collect() -> None:
        sc.setJobGroup(group, f"shufflesim: {len(items)} tasks", interruptOnCancel=True)
        try:
            outcome["results"] = rdd.collect()
        except Exception as e:  # handed to the caller's thread below
            outcome["error"] = e

    thread: threading.Thread = InheritableThread(target=collect, daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(poll_seconds)
            if on_progress is not None and thread.is_alive():
                on_progress(_tasks_done(spark, group), len(items))
    except KeyboardInterrupt:
        sc.cancelJobGroup(group)
        thread.join()
        raise
    if "error" in outcome:
        raise SparkJobError(root_cause(outcome["error"]))
    if on_progress is not None:
        on_progress(len(items), len(items))
    return outcome["results"]
