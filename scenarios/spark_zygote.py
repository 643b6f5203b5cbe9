"""A Python process that imports the project while a local Spark JVM starts, then becomes
that JVM's Python daemon (a "zygote", as Android starts its apps from one).

Spark starts the daemon of a local master (scenarios/spark_daemon.py) only when the first
Python task needs a worker, and that daemon then spends ~0.9 s importing pyspark and the
run path before it forks one: the first job waits for it. `start_zygote` runs those imports
in a process of their own as the session starts, beside the JVM's own start-up. When the
JVM launches the daemon, the daemon hands its standard streams, environment and working
directory to the zygote (`hand_over`), which takes them and runs pyspark's daemon loop with
everything imported; the launched process stays as the JVM's handle on the daemon: it lives
as long as the zygote and passes a SIGTERM on.

Anything that goes wrong before the zygote took the streams (no zygote, it died, it took
too long) leaves the launched daemon to do its work itself, as without a zygote. An unused
zygote ends when its driver process ends, or after `IDLE_TIMEOUT`.
"""

from __future__ import annotations

import gc
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from scenarios.spark_daemon import prefer_installed_pyspark, preload

#: The daemon's environment variable naming the zygote, "<pid>:<socket path>" (set through
#: `spark.executorEnv`, so a session's daemon finds its own session's zygote).
ZYGOTE_VARIABLE = "SHUFFLESIM_SPARK_ZYGOTE"

#: Seconds an unused zygote waits for its daemon before it ends.
IDLE_TIMEOUT = 300.0

#: Longest a daemon waits for the zygote to take over (its imports take ~1 s).
HAND_OVER_TIMEOUT = 60.0
#: Longest a daemon waits for the zygote to listen (it does ~0.1 s after it started).
CONNECT_TIMEOUT = 10.0

_HEADER = struct.Struct("!I")
_started: list[subprocess.Popen[bytes]] = []


def start_zygote(verbose: bool = False) -> str | None:
    """Start a zygote for the next local session's daemon; the value for `ZYGOTE_VARIABLE`,
    or None if it could not be started. Zygotes of earlier sessions that ended are reaped."""
    _started[:] = [process for process in _started if process.poll() is None]
    folder = tempfile.mkdtemp(prefix="shufflesim-zygote-")
    path = os.path.join(folder, "zygote.sock")
    # pyspark gives the daemon PYTHONHASHSEED=0 unless the driver has a value: so does this.
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    try:
        process = subprocess.Popen([sys.executable, "-m", "scenarios.spark_zygote", path], env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=None if verbose else subprocess.DEVNULL)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    _started.append(process)
    return f"{process.pid}:{path}"


def hand_over(zygote: str, timeout: float = HAND_OVER_TIMEOUT) -> int | None:
    """In the daemon Spark launched: give this process's standard streams, environment and
    working directory to `zygote`; its pid once it has taken them over, else None (then
    nothing was taken and this process does the daemon's work itself)."""
    pid_text, _, path = zygote.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return None
    start = time.monotonic()
    deadline = start + timeout
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(5.0)
    while True:  # a zygote that has only just started may not listen yet
        try:
            connection.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if _ends_within(pid, 0.05) or time.monotonic() > min(deadline, start + CONNECT_TIMEOUT):
                return None
        except OSError:
            return None
    try:
        payload = json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(connection, [_HEADER.pack(len(payload)) + payload], [0, 1, 2])
    except OSError:
        return None
    connection.settimeout(0.2)
    while True:
        try:
            ack = connection.recv(_HEADER.size)
            break
        except TimeoutError:
            if not _alive(pid):
                return None
            if time.monotonic() > deadline:  # stop it before it could take the streams
                _kill(pid, signal.SIGKILL)
                return None
        except OSError:
            return None
    if len(ack) != _HEADER.size or _HEADER.unpack(ack)[0] != pid:
        return None
    _handle_for_zygote(connection, pid)
    return pid


def _handle_for_zygote(connection: socket.socket, pid: int) -> None:
    """Stay the JVM's handle on the daemon: live until the zygote ends (its end of the
    connection closes) and pass the JVM's SIGTERM on to it."""
    def forward(signum: int, _frame: object) -> None:
        _kill(pid, signum)
        os._exit(0)

    signal.signal(signal.SIGTERM, forward)
    connection.settimeout(None)
    try:
        while connection.recv(1):
            pass
    except OSError:
        pass


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether process `pid` has ended, or ends within `seconds` (waiting that long if not)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):  # no pidfd (not Linux): look again after the wait
        time.sleep(seconds)
        return not _alive(pid)
    try:
        return bool(select.select([pidfd], [], [], seconds)[0])
    finally:
        os.close(pidfd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


# -- the zygote process ----------------------------------------------------------------------

def _serve(path: str, idle_timeout: float) -> socket.socket | None:
    """Import what the workers run, then wait for the daemon (or the end); the connection
    from it, with its streams in place, or None."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as Spark's JVM, and so its daemon, do
    parent = os.getppid()
    preload()
    gc.freeze()
    deadline = time.monotonic() + idle_timeout
    try:
        while time.monotonic() < deadline and os.getppid() == parent:
            if select.select([listener], [], [], 1.0)[0]:
                connection, _ = listener.accept()
                if _take_over(connection):
                    return connection
                connection.close()
        return None
    finally:
        listener.close()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _take_over(connection: socket.socket) -> bool:
    """Become the daemon that sent the connection: its streams, environment, directory."""
    connection.settimeout(10.0)
    try:
        data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
        if len(fds) != 3 or len(data) < _HEADER.size:
            for fd in fds:
                os.close(fd)
            return False
        size = _HEADER.unpack_from(data)[0]
        data = data[_HEADER.size:]
        while len(data) < size:
            more = connection.recv(size - len(data))
            if not more:
                raise ConnectionError("the daemon closed the connection")
            data += more
        request = json.loads(data)
    except (OSError, ValueError):
        return False
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in sys.path]
    sys.path[:] = prefer_installed_pyspark(sys.path + extra)
    # the workers forked from here must not keep the launched daemon's handle alive
    os.register_at_fork(after_in_child=connection.close)
    connection.settimeout(None)
    connection.sendall(_HEADER.pack(os.getpid()))
    return True


def main(path: str, idle_timeout: float = IDLE_TIMEOUT) -> None:
    """The zygote: serve one daemon, then run pyspark's daemon loop as that daemon."""
    connection = _serve(path, idle_timeout)
    if connection is None:
        return
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else IDLE_TIMEOUT)
