"""Ctrl-C / SIGTERM during `shufflesim run`: complete outputs that say so, or none."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"


def start_long_run(out: Path, mode: str = "sim") -> subprocess.Popen:
    """slow-map for 1,000 seconds: minutes of wall time, far longer than the test waits."""
    return subprocess.Popen([sys.executable, "-m", "scenarios.cli", "run", str(LIBRARY / "slow-map.toml"),
                             "--out", str(out), "--set", "duration=1000s", "--set", f"mode={mode}", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until_running(process: subprocess.Popen, out: Path) -> None:
    """Until the run's staging folder exists (the job is deployed and running)."""
    deadline = time.monotonic() + 60
    while not list(out.glob(f".partial-*-{process.pid}-*/plan.json")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run did not start within 60 s"
        time.sleep(0.05)
    time.sleep(1.0)


def test_one_signal_stops_the_run_early_with_complete_outputs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    process = start_long_run(out)
    wait_until_running(process, out)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "stopping the run and writing its outputs" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert 0 < summary["interrupted"]["at_s"] < 1000 and summary["duration_s"] == summary["interrupted"]["at_s"]
    assert summary["vertices"] and (out / "metrics.parquet").exists() and (out / "report.html").exists()
    assert "stopped early at t =" in stdout
    assert not list(out.glob(".partial-*"))


@pytest.mark.parametrize("mode", ["sim", pytest.param("realtime", marks=pytest.mark.tcp)])
def test_a_second_signal_aborts_and_leaves_no_outputs(tmp_path: Path, mode: str) -> None:
    """In realtime the abort once abandoned trio's run: its coroutines, collected at exit,
    printed ~400 lines of 'Exception ignored in ...' tracebacks after 'interrupted'."""
    out = tmp_path / "run"
    process = start_long_run(out, mode)
    wait_until_running(process, out)
    process.send_signal(signal.SIGINT)
    while "stopping the run" not in process.stderr.readline():  # the first one was handled
        assert process.poll() is None
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.strip() == "shufflesim: interrupted"
    assert sorted(p.name for p in out.iterdir()) == []  # nothing of this run, not even plan.json


def test_the_second_signal_marks_the_run_aborted() -> None:
    """Whatever error the unwinding then meets is reported as the abort (exit 130), since the
    KeyboardInterrupt may tear the simulation at any point."""
    from scenarios.interrupt import StopRequest

    request = StopRequest()
    request._on_signal(signal.SIGINT, None)
    assert request() and not request.aborted
    with pytest.raises(KeyboardInterrupt):
        request._on_signal(signal.SIGINT, None)
    assert request.aborted


def test_a_later_run_removes_what_a_killed_run_left_but_not_a_running_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kill -9 leaves the hidden staging folder; a later run into the same --out removes it once its
    process is gone, and says so. Another run's, still running, stays: runs may share a folder."""
    from scenarios.cli import main

    out = tmp_path / "run"
    killed, running = start_long_run(out), start_long_run(out)
    try:
        for process in (killed, running):
            wait_until_running(process, out)
        killed.kill()
        killed.wait()
        (left,) = out.glob(f".partial-*-{killed.pid}-*")
        old_format = out / ".partial-ab12cd_x"  # no process in its name: not known to be stale
        old_format.mkdir()
        assert main(["run", str(LIBRARY / "slow-map.toml"), "--out", str(out), "--set", "duration=2s",
                     "--quiet"]) == 0
        assert not left.exists() and old_format.is_dir() and list(out.glob(f".partial-*-{running.pid}-*"))
        assert f"shufflesim: removed {left}: the unfinished outputs of an earlier run that was killed" in \
            capsys.readouterr().err
    finally:
        for process in (killed, running):
            process.kill()
            process.communicate()
