"""A Python process that imports the project while a local Spark JVM starts, then becomes
that JVM's Python daemon (a "zygote", as Android starts its apps from one).

Spark starts the daemon of a local master (scenarios/spark_daemon.py) only when the first
Python task needs a worker, and that daemon then spends ~0.9 s importing pyspark and the
run path before it forks one: the first job waits for it. `start_zygote` runs those imports
in a process of their own as the session starts, beside the JVM's own start-up. When the
JVM launches the daemon, the daemon hands its standard streams, arguments, environment and
working directory to the zygote (`hand_over`), which takes them and runs pyspark's daemon
loop with everything imported; the launched process stays as the JVM's handle on the
daemon: it lives as long as the zygote and passes a SIGTERM on.

The driver binds the zygote's socket and passes it on, so a daemon can connect as soon as
the zygote exists (it accepts once its imports are done), and a zygote that ended, or was
used already, refuses at once. Anything that goes wrong before the zygote took the streams
leaves the launched daemon to do its work itself, as without a zygote. A zygote that was
not used ends when the next one starts, when its driver process ends, or after
`IDLE_TIMEOUT`.
"""

from __future__ import annotations

import atexit
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
from collections.abc import Callable

from scenarios.spark_daemon import keep_native_libraries_single_threaded, prefer_installed_pyspark, preload

#: The daemon's environment variable naming the zygote, "<pid>:<socket path>" (set through
#: `spark.executorEnv`, so a session's daemon finds its own session's zygote).
ZYGOTE_VARIABLE = "SHUFFLESIM_SPARK_ZYGOTE"

#: Seconds an unused zygote waits for its daemon before it ends.
IDLE_TIMEOUT = 300.0

#: Longest a daemon waits for the zygote to take over (its imports take ~1 s).
HAND_OVER_TIMEOUT = 60.0

#: The zygote's acknowledgement: its pid.
_HEADER = struct.Struct("!I")
#: Zygotes this driver started, with their sockets' folders.
_started: list[tuple[subprocess.Popen[bytes], str]] = []


def start_zygote(verbose: bool = False) -> str | None:
    """Start a zygote for the next local session's daemon; the value for `ZYGOTE_VARIABLE`,
    or None if it could not be started. Call it while no session runs: zygotes started
    earlier are stopped (an unused one would wait for a daemon that will not come)."""
    stop_zygotes()
    folder = tempfile.mkdtemp(prefix="shufflesim-zygote-")
    path = os.path.join(folder, "zygote.sock")
    # pyspark gives the daemon PYTHONHASHSEED=0 unless the driver has a value: so does this.
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen(1)
            process = subprocess.Popen(
                [sys.executable, "-m", "scenarios.spark_zygote", str(listener.fileno())],
                env=env, pass_fds=[listener.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=None if verbose else subprocess.DEVNULL,
                process_group=0)  # out of the terminal's group, as Spark's daemon goes: no Ctrl-C, Ctrl-\
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    _started.append((process, folder))
    return f"{process.pid}:{path}"


def stop_zygotes() -> None:
    """End the zygotes this driver started (used or not) and remove their sockets."""
    while _started:
        process, folder = _started.pop()
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(stop_zygotes)


def hand_over(zygote: str, timeout: float = HAND_OVER_TIMEOUT) -> int | None:
    """In the daemon Spark launched: give this process's standard streams, arguments,
    environment and working directory to `zygote`; its pid once it has taken them over,
    else None (then nothing was taken and this process does the daemon's work itself)."""
    pid_text, _, path = zygote.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return None
    try:
        os.setpgid(0, 0)  # out of the driver's process group, as pyspark's daemon goes
    except OSError:  # a session leader: it stays where it is
        pass
    request = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "executable": sys.executable}
    # Forward the JVM's SIGTERM from before the zygote may write to the streams: Spark may
    # stop its daemon as soon as it has read the daemon's port.
    default = signal.signal(signal.SIGTERM, _forwarding_to(pid))
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
        connection.shutdown(socket.SHUT_WR)  # the request ends here
        connection.settimeout(timeout)
        ack = connection.recv(_HEADER.size, socket.MSG_WAITALL)
    except TimeoutError:  # it may still take the streams: stop it first
        _kill(pid, signal.SIGKILL)
        connection.settimeout(None)
        ack = _read_to_end(connection)
    except OSError:  # no zygote (ended, or used already), or it ended before taking over
        ack = b""
    if not ack:  # it ended without taking the streams (it acknowledges before it writes)
        signal.signal(signal.SIGTERM, default)
        return None
    if ack != _HEADER.pack(pid):
        raise SystemExit("the shufflesim zygote took the Spark daemon's streams, then failed")
    connection.settimeout(None)
    _read_to_end(connection)  # the JVM's handle on the daemon: live until the zygote ends
    return pid


def _read_to_end(connection: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := connection.recv(4096):
            data += chunk
    except OSError:
        pass
    return data


def _forwarding_to(pid: int) -> Callable[[int, object], None]:
    """A SIGTERM handler that passes the signal on to the zygote and ends this process."""
    def forward(signum: int, _frame: object) -> None:
        _kill(pid, signum)
        os._exit(0)
    return forward


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


# -- the zygote process ----------------------------------------------------------------------

def _serve(listener: socket.socket, idle_timeout: float) -> socket.socket | None:
    """Import what the workers run, then wait for the daemon (or the end); the connection
    from it, with its streams in place, or None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as Spark's JVM, and so its daemon, do
    parent = os.getppid()
    hash_seed = os.environ.get("PYTHONHASHSEED")
    preload()
    gc.freeze()
    deadline = time.monotonic() + idle_timeout
    path = listener.getsockname()
    try:
        while time.monotonic() < deadline and os.getppid() == parent:
            if select.select([listener], [], [], 1.0)[0]:
                connection, _ = listener.accept()
                if _take_over(connection, hash_seed):
                    return connection
                connection.close()
        return None
    finally:
        listener.close()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _take_over(connection: socket.socket, hash_seed: str | None) -> bool:
    """Become the daemon that sent the connection: its streams, arguments, environment and
    directory. False (nothing taken) for a daemon of another interpreter or hash seed,
    whose workers this process could not stand in for."""
    connection.settimeout(10.0)
    try:
        data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    except OSError:
        return False
    try:
        request = json.loads(data + _read_to_end(connection))
    except ValueError:
        request = None
    if (not isinstance(request, dict) or len(fds) != 3 or request.get("executable") != sys.executable
            or request.get("env", {}).get("PYTHONHASHSEED") != hash_seed):
        for fd in fds:
            os.close(fd)
        return False
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.argv[1:] = request["argv"]  # pyspark's daemon reads its worker module there
    os.environ.clear()
    os.environ.update(request["env"])
    keep_native_libraries_single_threaded()
    os.chdir(request["cwd"])
    # the daemon's PYTHONPATH entries come before site-packages, as in a daemon started with them
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in sys.path]
    sys.path[1:1] = extra
    sys.path[:] = prefer_installed_pyspark(sys.path)
    # the workers forked from here must not keep the launched daemon's handle alive
    os.register_at_fork(after_in_child=connection.close)
    connection.settimeout(None)
    try:
        connection.sendall(_HEADER.pack(os.getpid()))
    except OSError:  # the launched daemon is gone, and Spark with it: so is this daemon
        os._exit(1)
    return True


def main(listener_fd: int, idle_timeout: float = IDLE_TIMEOUT) -> None:
    """The zygote: serve one daemon, then run pyspark's daemon loop as that daemon."""
    connection = _serve(socket.socket(fileno=listener_fd), idle_timeout)
    if connection is None:
        return
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else IDLE_TIMEOUT)
