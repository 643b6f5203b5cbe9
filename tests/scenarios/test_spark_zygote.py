"""The zygote a local Spark session's Python daemon takes over (scenarios/spark_zygote.py):
it takes the daemon's streams and runs pyspark's daemon loop; anything less leaves the
daemon to do its work itself; it never outlives its use."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scenarios.spark_zygote import ZYGOTE_VARIABLE, hand_over, start_zygote

#: A daemon as Spark launches it, reduced to the hand-over: what it says on stdout is the
#: zygote's (pyspark's daemon loop writes its port there first).
DAEMON = """
import os, sys
from scenarios.spark_zygote import ZYGOTE_VARIABLE, hand_over
pid = hand_over(os.environ[ZYGOTE_VARIABLE])
sys.stderr.write(f"handed over to {pid}\\n" if pid else "kept\\n")
"""


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        done, _ = os.waitpid(pid, os.WNOHANG) if _is_child(pid) else (0, 0)
        if done:
            return True
        time.sleep(0.05)
    return False


def _is_child(pid: int) -> bool:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _daemon(zygote: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", DAEMON], env={**os.environ, ZYGOTE_VARIABLE: zygote},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_the_zygote_takes_over_the_daemons_streams_and_ends_with_them() -> None:
    zygote = start_zygote()
    assert zygote is not None
    pid = int(zygote.split(":")[0])
    daemon = _daemon(zygote)
    try:
        port = struct.unpack("!i", daemon.stdout.read(4))[0]  # pyspark's daemon loop, in the zygote
        assert 0 < port < 65536
        assert daemon.poll() is None  # the launched daemon stays, as Spark's handle on the zygote
        daemon.stdin.close()  # what Spark does to stop its daemon
        assert _gone(pid, 30), "the zygote did not end when its daemon's stdin closed"
        assert daemon.wait(timeout=30) == 0
        assert daemon.stderr.read().decode() == f"handed over to {pid}\n"
        assert not Path(zygote.split(":", 1)[1]).parent.exists()  # its socket's folder is removed
    finally:
        daemon.kill()
        _kill(pid)


def test_a_sigterm_to_the_launched_daemon_reaches_the_zygote() -> None:
    zygote = start_zygote()
    pid = int(zygote.split(":")[0])
    daemon = _daemon(zygote)
    try:
        daemon.stdout.read(4)
        daemon.terminate()  # Spark's `destroy` of its daemon process
        assert daemon.wait(timeout=30) == 0
        assert _gone(pid, 30), "the zygote outlived the daemon Spark stopped"
    finally:
        daemon.kill()
        _kill(pid)


def _ended_process() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize("zygote", ["ENDED:/nonexistent/zygote.sock", "not-a-pid", "123"])
def test_without_a_usable_zygote_the_daemon_keeps_its_work(zygote: str) -> None:
    start = time.monotonic()
    assert hand_over(zygote.replace("ENDED", str(_ended_process()))) is None
    assert time.monotonic() - start < 5


def test_a_process_that_never_listens_is_given_up_on_after_the_timeout() -> None:
    start = time.monotonic()
    assert hand_over(f"{os.getpid()}:/nonexistent/zygote.sock", timeout=1.0) is None
    assert 1.0 <= time.monotonic() - start < 10


def test_a_zygote_that_dies_before_taking_over_leaves_the_work_to_the_daemon(tmp_path: Path) -> None:
    import socket

    path = str(tmp_path / "z.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = time.monotonic()
        sleeper.kill()
        sleeper.wait()
        # it listens (the socket is ours) but its process is gone: no ack will come
        assert hand_over(f"{sleeper.pid}:{path}") is None
        assert time.monotonic() - start < 5
    finally:
        listener.close()


def test_an_unused_zygote_ends_by_itself_and_removes_its_socket(tmp_path: Path) -> None:
    folder = tmp_path / "zygote"
    folder.mkdir()
    zygote = subprocess.Popen([sys.executable, "-m", "scenarios.spark_zygote", str(folder / "zygote.sock"), "1"])
    assert zygote.wait(timeout=60) == 0
    assert not folder.exists()
