"""The class-data archive of local Spark sessions: Spark's classes as the driver JVM loaded
them, written once and mapped by every later driver JVM (Java's dynamic CDS, JDK 13+).

A local session's start-up is mostly its JVM loading and verifying Spark's classes:
7-8 s on our 2-core machines, 2.2-3.6 s with the archive (and a first job's tasks start
~0.6 s sooner). The archive fits one Java build, one Spark release and one set of JVM
options, so `archive_path` names it by all three: another Java or Spark looks for another
file (and a JVM given an archive that does not fit ignores it without a word). Recording
one takes a session of its own (~40 s: the JVM loads classes more slowly while it records,
and writes the archive as it exits); `python -m scenarios.spark_class_archive` makes it,
scripts/test.sh runs that. Without an archive, sessions start as before; cluster masters
never use one (their JVMs run elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Where the archive is kept (else $XDG_CACHE_HOME/shufflesim, else ~/.cache/shufflesim).
CACHE_VARIABLE = "SHUFFLESIM_CACHE_DIR"

#: How long recording may take (the session, then the JVM writing the archive as it exits).
RECORD_TIMEOUT = 300.0

#: How the recording child names its JVM on its stdout.
_PID_LINE = "recording JVM:"

#: Names of archives being recorded, beside the archive.
RECORDING_PREFIX = ".recording-"


class ClassArchiveError(RuntimeError):
    """The archive could not be made; the message says why."""


def cache_dir() -> Path:
    """The folder shufflesim keeps machine-local caches in."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "shufflesim"


def java_executable() -> Path | None:
    """The `java` Spark starts: $JAVA_HOME's, else the one on PATH (None if neither)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _pyspark_release() -> str:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:  # pyspark from $SPARK_HOME/python
        import pyspark

        return pyspark.__version__


def archive_path(jvm_options: str) -> Path | None:
    """The archive for this machine's Java, Spark (pyspark's or $SPARK_HOME's) and
    `jvm_options` (None without Java)."""
    java = java_executable()
    if java is None:
        return None
    fits = "|".join([str(java), str(java.stat().st_mtime_ns), _pyspark_release(), os.environ.get("SPARK_HOME", ""),
                     jvm_options.strip()])
    return cache_dir() / f"spark-classes-{hashlib.sha256(fits.encode()).hexdigest()[:16]}.jsa"


def archive_options(jvm_options: str) -> str:
    """The JVM option that maps the archive, if one was made and can be read ("" otherwise:
    a JVM given a missing archive would also drop the JDK's own). Never fails: a session
    starts without the archive rather than not at all."""
    try:
        path = archive_path(jvm_options)
        return f" -XX:SharedArchiveFile={path}" if path is not None and path.is_file() else ""
    except (OSError, RuntimeError):  # an unreadable cache, no home folder
        return ""


def record_options(path: Path) -> str:
    """The JVM option that records the classes it loads into `path` as it exits."""
    return f" -XX:ArchiveClassesAtExit={path}"


def make_archive(jvm_options: str, timeout: float = RECORD_TIMEOUT) -> Path:
    """Record the archive: a child process runs a local session through the kinds of jobs
    shufflesim runs, and its JVM writes the classes as it exits; then the archive is moved
    into place (two makers at once each record one; the last replaces the other's whole).
    `ClassArchiveError` if it fails, with the JVM's own words when it gave any."""
    final = archive_path(jvm_options)
    if final is None:
        raise ClassArchiveError("no Java found ($JAVA_HOME or java on PATH)")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_recordings(final.parent, timeout)
        recording = Path(tempfile.mkstemp(dir=final.parent, prefix=RECORDING_PREFIX, suffix=".jsa")[1])
    except OSError as e:
        raise ClassArchiveError(f"cannot write to {final.parent}: {e.strerror}") from None
    recording.unlink()  # the JVM creates it
    deadline = time.monotonic() + timeout
    jvm = None
    try:
        child = subprocess.run([sys.executable, "-m", "scenarios.spark_class_archive", "--record-into", str(recording)],
                               capture_output=True, text=True, timeout=timeout)
        jvm_says = [line.strip() for line in child.stdout.splitlines() if "[cds]" in line and "error" in line.lower()]
        if child.returncode != 0:
            raise ClassArchiveError(f"the recording session failed: {_last_line(child.stderr)}")
        jvm = next((int(line.split()[-1]) for line in child.stdout.splitlines() if line.startswith(_PID_LINE)), None)
        if jvm is None:
            raise ClassArchiveError("the recording session did not say which JVM it ran")
        if not _wait_for_exit(jvm, deadline - time.monotonic()):  # it writes the archive as it exits
            raise ClassArchiveError(f"the JVM (pid {jvm}) did not write the archive within {timeout:.0f} s")
        jvm = None
        if not recording.is_file() or recording.stat().st_size == 0:
            raise ClassArchiveError("the JVM wrote no archive: " + ("; ".join(jvm_says[-2:]) or
                                    "it said nothing (does this Java support -XX:ArchiveClassesAtExit?)"))
        os.replace(recording, final)
    except subprocess.TimeoutExpired:
        raise ClassArchiveError(f"the recording session took longer than {timeout:.0f} s") from None
    finally:
        if jvm is not None:  # still writing after the deadline: it must not leave a recording behind
            with contextlib.suppress(OSError):
                os.kill(jvm, signal.SIGKILL)
        recording.unlink(missing_ok=True)
    return final


def _remove_abandoned_recordings(folder: Path, timeout: float) -> None:
    """Remove recordings older than a recording may take (a maker that was killed)."""
    for stale in folder.glob(f"{RECORDING_PREFIX}*"):
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > timeout:
                stale.unlink()


def _wait_for_exit(pid: int, timeout: float) -> bool:
    """Whether process `pid` (not our child) ended within `timeout` seconds. Where Linux's
    pidfd is missing this trusts the pipes: the JVM shares the recording child's stdout, so
    the child's output ended when the JVM exited."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # it ended already; or not Linux, or a kernel before 5.3
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(max(0.0, timeout) * 1000))
    finally:
        os.close(fd)


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def _record(path: Path) -> int:
    """In the child: a local session that records into `path`, through a Python job, a
    barrier stage and a DataFrame (the classes sweeps, distributed runs and results use).
    Prints the JVM's pid."""
    from scenarios.spark_session import run_tasks, spark_session

    spark = spark_session("local[2]", record_classes_to=path)
    run_tasks(spark, abs, [-1, -2, -3, -4])
    spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitions(lambda rows: rows).collect()
    spark.createDataFrame([(1, "a")], ["n", "s"]).count()
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    spark.stop()
    print(_PID_LINE, pid, flush=True)  # the JVM, which shares this stdout, may print after it
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m scenarios.spark_class_archive [--if-missing]`: 0 once the archive exists."""
    from scenarios.spark_session import LOCAL_JVM_OPTIONS

    parser = argparse.ArgumentParser(
        prog="python -m scenarios.spark_class_archive",
        description="Make the class-data archive that local Spark sessions start from "
                    "(~3 s instead of 7-8 s on our machines); kept in $SHUFFLESIM_CACHE_DIR, "
                    "else $XDG_CACHE_HOME/shufflesim, else ~/.cache/shufflesim.")
    parser.add_argument("--if-missing", action="store_true",
                        help="do nothing if the archive exists, or if making it failed before (says why)")
    parser.add_argument("--record-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record_into is not None:
        return _record(args.record_into)
    path = archive_path(LOCAL_JVM_OPTIONS)
    if path is None:
        print("Spark class archive not made: no Java found ($JAVA_HOME or java on PATH)", file=sys.stderr)
        return 1
    failed = path.with_suffix(".failed")
    if args.if_missing and path.is_file():
        print(f"Spark class archive: {path} (exists)")
        return 0
    if args.if_missing and failed.is_file():
        print(f"Spark class archive not made before: {failed.read_text().strip()} "
              f"(python -m scenarios.spark_class_archive tries again)", file=sys.stderr)
        return 1
    print("Making the Spark class archive (once per Java and Spark, ~40 s) ...", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        path = make_archive(LOCAL_JVM_OPTIONS)
    except ClassArchiveError as e:
        print(f"Spark class archive not made: {e}; local Spark sessions start without it", file=sys.stderr)
        with contextlib.suppress(OSError):
            failed.write_text(f"{e}\n")
        return 1
    failed.unlink(missing_ok=True)
    print(f"Spark class archive: {path} ({path.stat().st_size / 2**20:.0f} MiB, made in {time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
