"""The zygote a local Spark session's Python daemon takes over (scenarios/spark_zygote.py):
it takes the daemon's streams and runs pyspark's daemon loop; anything less leaves the
daemon to do its work itself; it never outlives its use. (A real session's workers are
checked in test_sweep_spark.py.)"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scenarios.spark_zygote import ZYGOTE_VARIABLE, hand_over, start_zygote, stop_zygotes

#: A daemon as Spark launches it, reduced to the hand-over: what it says on stdout is the
#: zygote's (pyspark's daemon loop writes its port there first).
DAEMON = """
import os, sys
from scenarios.spark_zygote import ZYGOTE_VARIABLE, hand_over
pid = hand_over(os.environ[ZYGOTE_VARIABLE])
sys.stderr.write(f"handed over to {pid}\\n" if pid else "kept\\n")
"""


def _gone(pid: int, within: float = 30.0) -> bool:
    """Whether process `pid` (a child of this one, or not) ends within `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:  # not ours, or reaped already
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _daemon(zygote: str, hash_seed: str = os.environ.get("PYTHONHASHSEED", "0"),
            **kwargs: object) -> subprocess.Popen[bytes]:
    """A daemon launched as Spark does (pyspark gives it PYTHONHASHSEED, "0" by default)."""
    env = {**os.environ, ZYGOTE_VARIABLE: zygote, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen([sys.executable, "-c", DAEMON], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kwargs)


@pytest.fixture
def zygote() -> str:
    started = start_zygote()
    assert started is not None
    yield started
    stop_zygotes()


def _pid(zygote: str) -> int:
    return int(zygote.split(":")[0])


def _port(daemon: subprocess.Popen[bytes]) -> int:
    """What pyspark's daemon loop writes first: the port its workers are asked for on."""
    return struct.unpack("!i", daemon.stdout.read(4))[0]


def test_the_zygote_takes_over_the_daemons_streams_and_ends_with_them(zygote: str, tmp_path: Path) -> None:
    daemon = _daemon(zygote, cwd=tmp_path)
    try:
        assert 0 < _port(daemon) < 65536  # pyspark's daemon loop, in the zygote
        assert daemon.poll() is None  # the launched daemon stays, as Spark's handle on the zygote
        if Path(f"/proc/{_pid(zygote)}/cwd").exists():
            assert Path(f"/proc/{_pid(zygote)}/cwd").resolve() == tmp_path.resolve()  # the daemon's directory
        daemon.stdin.close()  # what Spark does to stop its daemon
        assert _gone(_pid(zygote)), "the zygote did not end when its daemon's stdin closed"
        assert daemon.wait(timeout=30) == 0
        assert daemon.stderr.read().decode() == f"handed over to {_pid(zygote)}\n"
        assert not Path(zygote.split(":", 1)[1]).parent.exists()  # its socket's folder is removed
    finally:
        daemon.kill()


def test_a_sigterm_to_the_launched_daemon_reaches_the_zygote(zygote: str) -> None:
    daemon = _daemon(zygote)
    try:
        _port(daemon)
        daemon.terminate()  # Spark's `destroy` of its daemon process
        assert daemon.wait(timeout=30) == 0
        assert _gone(_pid(zygote)), "the zygote outlived the daemon Spark stopped"
    finally:
        daemon.kill()


def test_a_second_daemon_of_the_session_does_its_work_itself(zygote: str) -> None:
    first = _daemon(zygote)
    try:
        _port(first)
        second = _daemon(zygote)  # Spark started another daemon: the zygote is taken
        assert second.wait(timeout=30) == 0
        assert second.stderr.read() == b"kept\n"
        assert first.poll() is None  # the first one's zygote still serves
    finally:
        first.kill()
        second.kill()


def test_a_daemon_with_another_hash_seed_keeps_its_work(zygote: str) -> None:
    other = _daemon(zygote, hash_seed="12345")  # its workers would hash strings unlike the zygote's
    try:
        assert other.wait(timeout=30) == 0
        assert other.stderr.read() == b"kept\n"
        assert not _gone(_pid(zygote), 0)  # still there for the right daemon
    finally:
        other.kill()


@pytest.mark.parametrize("value", ["not-a-pid", "123", "1:/nonexistent/zygote.sock"])
def test_without_a_zygote_the_daemon_keeps_its_work(value: str) -> None:
    assert hand_over(value) is None


def test_a_zygote_that_ended_before_its_daemon_came_leaves_the_work_to_it(zygote: str) -> None:
    os.kill(_pid(zygote), 9)
    assert _gone(_pid(zygote))
    assert hand_over(zygote) is None  # nobody listens: refused at once


def test_a_zygote_that_never_takes_over_is_stopped_and_the_work_kept(tmp_path: Path) -> None:
    path = str(tmp_path / "z.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], pass_fds=[listener.fileno()])
    try:
        assert hand_over(f"{stuck.pid}:{path}", timeout=1.0) is None
        assert stuck.wait(timeout=30) == -9  # stopped before it could take the streams
    finally:
        stuck.kill()


def test_starting_a_zygote_stops_the_earlier_ones() -> None:
    first = start_zygote()
    second = start_zygote()
    try:
        assert _gone(_pid(first), 0)  # stopped and reaped already
        assert not Path(first.split(":", 1)[1]).parent.exists()
        assert not _gone(_pid(second), 0)
    finally:
        stop_zygotes()
    assert _gone(_pid(second), 0)
    assert not Path(second.split(":", 1)[1]).parent.exists()


def test_an_unused_zygote_ends_by_itself_and_removes_its_socket(tmp_path: Path) -> None:
    folder = tmp_path / "zygote"
    folder.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(folder / "zygote.sock"))
        listener.listen(1)
        unused = subprocess.Popen([sys.executable, "-m", "scenarios.spark_zygote", str(listener.fileno()), "1"],
                                  pass_fds=[listener.fileno()])
    assert unused.wait(timeout=60) == 0
    assert not folder.exists()
