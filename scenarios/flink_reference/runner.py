"""Run a scenario's reference job on real Flink and read its metrics the way a user would.

Flink comes from PyPI (`apache-flink-libraries`, the jars of the Flink distribution; one
329 MB download, kept in the cache folder), the job is compiled with the JDK's `javac`, and
it runs in Flink's MiniCluster (one JVM, `minicluster.number-of-taskmanagers` TaskManagers,
each with its own Netty server: channels between them are real TCP). Metrics are read from
Flink's REST API every second after a warm-up (Flink's rates are 60 s meters, so they need
a minute to settle), as per-subtask means; checkpoint statistics come from the same API.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from scenarios.flink_reference.job_args import job_arg

FLINK_VERSION = "2.3.0"
JOB_SOURCE = Path(__file__).with_name("FlinkReferenceJob.java")
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
#: `--flink-log` levels: Flink's root logger's, and its network stack's and Task's.
LOG_LEVELS = {"error": ("error", "error"), "info": ("info", "info"), "debug": ("info", "debug")}
#: Longest wait for the job to be running, and for one REST answer (seconds).
START_TIMEOUT = 120.0
REST_TIMEOUT = 10.0
#: Flink's metric names (REST) as shufflesim names them (the part after the last prefix).
PREFIXES = ("Shuffle.Netty.Input.Buffers.", "Shuffle.Netty.Output.Buffers.", "Shuffle.Netty.Input.0.")
METRICS = ("busyTimeMsPerSecond", "backPressuredTimeMsPerSecond", "softBackPressuredTimeMsPerSecond",
           "hardBackPressuredTimeMsPerSecond", "maxSoftBackPressureTimeMs", "maxHardBackPressureTimeMs",
           "isBackPressured", "idleTimeMsPerSecond", "numRecordsInPerSecond",
           "numRecordsOutPerSecond", "numBytesInPerSecond", "numBytesOutPerSecond", "numBuffersOutPerSecond",
           "numBuffersInLocalPerSecond", "numBuffersInRemotePerSecond", "outPoolUsage", "inPoolUsage",
           "inputExclusiveBuffersUsage", "inputFloatingBuffersUsage", "inputQueueLength", "outputQueueLength",
           "inputQueueSize", "outputQueueSize", "debloatedBufferSize", "estimatedTimeToConsumeBuffersMs",
           "mailboxMailsPerSecond", "mailboxLatencyMs_mean", "mailboxLatencyMs_median", "mailboxLatencyMs_max",
           "mailboxQueueSize",
           "checkpointAlignmentTime", "checkpointStartDelayNanos")
#: The sink's latency histogram (microseconds) and shufflesim's names for its statistics (ms).
LATENCY = {"latencyUs_mean": "latencyMeanMs", "latencyUs_median": "latencyP50Ms", "latencyUs_p90": "latencyP90Ms",
           "latencyUs_p99": "latencyP99Ms", "latencyUs_max": "latencyMaxMs"}


class FlinkReferenceError(RuntimeError):
    """Flink could not be installed, compiled against, started or read."""


def cache_folder() -> Path:
    """Where Flink's jars and the compiled job are kept: $SHUFFLESIM_FLINK_HOME, else ~/.cache."""
    home = os.environ.get("SHUFFLESIM_FLINK_HOME")
    return Path(home) if home else Path.home() / ".cache" / "shufflesim" / f"flink-{FLINK_VERSION}"


def install_flink(folder: Path, say: Callable[[str], None]) -> Path:
    """The folder of Flink's jars, downloaded from PyPI (apache-flink-libraries) if not there yet."""
    lib = folder / "lib"
    if (lib / f"flink-dist-{FLINK_VERSION}.jar").exists():
        return lib
    say(f"downloading Flink {FLINK_VERSION} (apache-flink-libraries from PyPI, ~330 MB) into {folder}")
    with tempfile.TemporaryDirectory() as download:
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                                 "--dest", download, f"apache-flink-libraries=={FLINK_VERSION}"],
                                capture_output=True, text=True)
        wheels = list(Path(download).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            raise FlinkReferenceError(f"pip could not download apache-flink-libraries=={FLINK_VERSION}: "
                                      f"{result.stderr.strip() or result.stdout.strip()}")
        partial = folder / "lib.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.startswith("pyflink/lib/") and name.endswith(".jar"):
                    (partial / Path(name).name).write_bytes(wheel.read(name))
        shutil.rmtree(lib, ignore_errors=True)  # a lib/ without flink-dist is not ours to keep
        partial.rename(lib)  # whole or not at all: an interrupted download leaves no lib/
    return lib


def compile_job(folder: Path, lib: Path) -> Path:
    """The reference job compiled against Flink's jars (once per version of its source)."""
    digest = hashlib.sha256(JOB_SOURCE.read_bytes()).hexdigest()[:12]
    classes = folder / f"classes-{digest}"
    if (classes / "FlinkReferenceJob.class").exists():
        return classes
    javac = shutil.which("javac")
    if javac is None:
        raise FlinkReferenceError("javac not found: the Flink reference needs a JDK (17 or newer) on the PATH")
    partial = folder / f"{classes.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    result = subprocess.run([javac, "-nowarn", "-cp", f"{lib}/*", "-d", str(partial), str(JOB_SOURCE)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise FlinkReferenceError(f"javac failed on {JOB_SOURCE.name}:\n{result.stderr.strip()}")
    partial.rename(classes)
    return classes


def free_port() -> int:
    """A loopback port free now, for Flink's REST server (which binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RestClient:
    """GETs from Flink's REST API on loopback (HTTP/1.0: one connection per request, closed by
    the server after its answer); every call gives up after `REST_TIMEOUT`."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def get(self, path: str) -> Any:
        """The JSON Flink answers; OSError if nothing listens, FlinkReferenceError on a bad answer."""
        with trio.move_on_after(REST_TIMEOUT):
            async with await trio.open_tcp_stream("127.0.0.1", self.port) as stream:
                await stream.send_all(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
                answer = bytearray()
                while chunk := await stream.receive_some(1 << 16):
                    answer += chunk
            return self._json(path, bytes(answer))
        raise FlinkReferenceError(f"Flink's REST API did not answer GET {path} within {REST_TIMEOUT:g} s")

    @staticmethod
    def _json(path: str, answer: bytes) -> Any:
        head, _, body = answer.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1:2]
        if status != [b"200"]:
            raise FlinkReferenceError(f"Flink's REST API answered {head[:80]!r} to GET {path}")
        try:
            return json.loads(body)
        except ValueError:
            raise FlinkReferenceError(f"Flink's REST API answered GET {path} with no JSON: {body[:80]!r}") from None


def short_name(flink_name: str, latency_operator: str) -> str | None:
    """shufflesim's name of a Flink metric of ours (None: not one we compare). Flink's REST
    names an operator's metrics after the operator with ' ', '.', ':' and ',' as '_'
    (MetricQueryService): "Sink: Writer" is "Sink__Writer"."""
    for prefix in PREFIXES:
        flink_name = flink_name.removeprefix(prefix)
    if flink_name in METRICS:
        return flink_name
    scope = re.sub(r"[ .:,]", "_", latency_operator)
    return LATENCY.get(flink_name.removeprefix(f"{scope}."))


async def running_job(rest: RestClient, name: str, process: trio.Process, log_path: Path) -> str:
    """The id of the job called `name` once it runs (not its JVM warm-up job's, run before it)."""
    with trio.move_on_after(START_TIMEOUT):
        while process.returncode is None:
            try:
                running = [job["jid"] for job in (await rest.get("/jobs/overview"))["jobs"]
                           if job["name"] == name and job["state"] == "RUNNING"]
            except (OSError, FlinkReferenceError):  # the REST server is not listening, or not ready, yet
                running = []
            if running:
                return running[0]
            await trio.sleep(0.5)
        raise FlinkReferenceError(f"the Flink job exited with code {process.returncode} before it ran "
                                  f"(its output: {log_path})")
    raise FlinkReferenceError(f"the Flink job was not running within {START_TIMEOUT:g} s")


async def _read_metrics(rest: RestClient, job_id: str, latency_operator: str, readings: list[list[Any]],
                        t: float) -> None:
    """One reading of every subtask's metrics of ours, appended as [t, vertex, subtask, metric, value]."""
    for vertex in (await rest.get(f"/jobs/{job_id}"))["vertices"]:
        for index in range(vertex["parallelism"]):
            path = f"/jobs/{job_id}/vertices/{vertex['id']}/subtasks/{index}/metrics"
            wanted = {m["id"]: name for m in await rest.get(path)
                      if (name := short_name(m["id"], latency_operator)) is not None}
            if not wanted:
                continue
            values = {wanted[m["id"]]: _number(m["value"]) for m in await rest.get(f"{path}?get={','.join(wanted)}")}
            # an empty histogram (records of 8 bytes carry no creation time) has no mean
            timed = math.isfinite(values.get("latencyMeanMs", math.nan))
            for name, value in values.items():
                if name in LATENCY.values():
                    if timed:
                        readings.append([round(t, 3), vertex["name"], index, name, value / 1000])
                elif math.isfinite(value) and value > -1e18:  # Flink's "no value" is Long.MIN_VALUE
                    readings.append([round(t, 3), vertex["name"], index, name, value])


def _number(value: str) -> float:
    """A REST metric value as a number; a boolean gauge (`isBackPressured`) reads "true" or "false"."""
    word = str(value).lower()
    return float(word == "true") if word in ("true", "false") else float(value)


async def _placement(rest: RestClient, job_id: str) -> dict[str, list[str]]:
    """Each vertex's subtasks' TaskManagers, named tm-0, tm-1, ... in the order they first
    appear (Flink's ids are random): the placement Flink picked, to compare with ours."""
    names: dict[str, str] = {}
    placement: dict[str, list[str]] = {}
    for vertex in (await rest.get(f"/jobs/{job_id}"))["vertices"]:
        details = await rest.get(f"/jobs/{job_id}/vertices/{vertex['id']}")
        for subtask in sorted(details["subtasks"], key=lambda subtask: subtask["subtask"]):
            where = subtask.get("taskmanager-id") or subtask.get("endpoint") or subtask.get("host")
            placement.setdefault(vertex["name"], []).append(names.setdefault(where, f"tm-{len(names)}"))
    return placement


def subtask_means(readings: list[list[Any]]) -> dict[str, dict[int, dict[str, float]]]:
    """The mean of each metric of each subtask over the readings."""
    values: dict[tuple[str, int, str], list[float]] = {}
    for _, vertex, index, metric, value in readings:
        values.setdefault((vertex, index, metric), []).append(value)
    means: dict[str, dict[int, dict[str, float]]] = {}
    for (vertex, index, metric), series in sorted(values.items()):
        means.setdefault(vertex, {}).setdefault(index, {})[metric] = statistics.fmean(series)
    return means


async def run_reference(args: list[str], latency_operator: str, warmup: float, seconds: float, log_path: Path,
                        say: Callable[[str], None], log_level: str = "info") -> dict[str, Any]:
    """Run the job on Flink for `warmup` + `seconds`, reading its metrics every second after the
    warm-up; the readings, their means per subtask and the checkpoint statistics. Flink logs
    into `log_path` at `log_level` (a key of LOG_LEVELS)."""
    folder = cache_folder()
    lib = install_flink(folder, say)
    classes = compile_job(folder, lib)
    java = shutil.which("java")
    if java is None:
        raise FlinkReferenceError("java not found: the Flink reference needs a JDK (17 or newer) on the PATH")
    port = free_port()
    options = [f"rest.port={port}", "rest.bind-address=127.0.0.1", "rest.address=127.0.0.1",
               "metrics.fetcher.update-interval=1000"]
    root_level, network_level = LOG_LEVELS[log_level]
    log_options = [f"-Dlog4j.configurationFile={LOG_CONFIG}", f"-Dshufflesim.flink.log.level={root_level}",
                   f"-Dshufflesim.flink.network.log.level={network_level}"]
    command = [java, "-Xmx2g", *log_options, "-cp", f"{lib}/*{os.pathsep}{classes}", "FlinkReferenceJob", *args,
               *options]
    rest = RestClient(port)
    readings: list[list[Any]] = []
    with open(log_path, "wb") as log:
        # the JVM ends when its stdin closes: with this process, however that ends
        process = await trio.lowlevel.open_process(command, stdin=subprocess.PIPE, stdout=log, stderr=log)
        try:
            job_id = await running_job(rest, job_arg(args, "jobName"), process, log_path)
            start = trio.current_time()
            while (t := trio.current_time() - start) < warmup + seconds:
                if process.returncode is not None:
                    raise FlinkReferenceError(f"the Flink job exited with code {process.returncode} "
                                              f"(its output: {log_path})")
                if t < warmup:
                    say(f"Flink job running, warming up: {t:.0f}/{warmup:g} s")
                else:
                    await _read_metrics(rest, job_id, latency_operator, readings, t)
                    say(f"{t:.0f}/{warmup + seconds:g} s, {len(readings)} readings")
                await trio.sleep_until(start + math.floor(t + 1))
            checkpoints = await rest.get(f"/jobs/{job_id}/checkpoints")
            placement = await _placement(rest, job_id)
        except OSError as e:
            raise FlinkReferenceError(f"lost Flink's REST API ({e}); the JVM's output: {log_path}") from None
        finally:
            process.kill()
            with trio.move_on_after(10):
                await process.wait()
                await process.stdin.aclose()
    return {"flink": FLINK_VERSION, "args": args, "warmup_s": warmup, "seconds": seconds,
            "placement": placement, "subtasks": subtask_means(readings), "readings": readings,
            "checkpoints": {key: checkpoints.get(key) for key in ("counts", "summary", "history")}}
