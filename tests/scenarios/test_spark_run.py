"""Distributed runs on a real local Spark (`local[2]`): TaskManagers in executor Python processes.

One SparkSession for the module (a session costs about 5 s to start). Levels, not exact
numbers: realtime runs depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scenarios.run import run_scenario
from scenarios.scenario_file import load_scenario
from scenarios.spark_run import SHUTDOWN_GRACE, SparkEngine, SparkSlotsError, check_slots
from scenarios.spark_session import SparkJob, spark_session

SLOW_MAP = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "slow-map.toml"
MASTER = "local[2]"
#: The killed TaskManager's fault time (s after the job started) and how soon after it the run must end.
KILL_AT = 1.0
FAIL_WITHIN = 5.0


@pytest.fixture(scope="module")
def engine() -> Any:
    spark = spark_session(MASTER)
    yield SparkEngine(spark, MASTER)
    spark.stop()


def _check_slow_map_levels(summary: dict[str, Any]) -> None:
    source, slow = summary["vertices"]
    assert source["backpressure_level"] == "high"
    assert source["metrics"]["backPressuredTimeMsPerSecond"] > 900
    assert slow["backpressure_level"] == "ok"
    assert slow["metrics"]["busyTimeMsPerSecond"] > 900
    assert 120 < slow["metrics"]["numRecordsInPerSecond"] < 220  # two maps, each at most 200 records/s
    assert summary["records"]["emitted"] == summary["records"]["received"] > 0
    assert summary["invariants"]["violations"] == []


@pytest.fixture(scope="module")
def slow_map_realtime() -> Any:
    return load_scenario(SLOW_MAP, ["mode=realtime", "duration=5s"])


def test_distributed_slow_map_shows_the_in_process_bottleneck(engine: SparkEngine, slow_map_realtime: Any,
                                                              tmp_path: Path) -> None:
    """The levels the in-process realtime run shows (tests/taskmgr/test_clock_and_modes.py),
    with the TaskManagers in two executor processes; the side-by-side run is a slow test."""
    distributed = run_scenario(slow_map_realtime, tmp_path, engine=engine).summary
    _check_slow_map_levels(distributed)
    cluster = distributed["cluster"]
    assert (cluster["engine"], cluster["master"]) == ("spark", MASTER)
    task_managers = sorted(cluster["task_managers"], key=lambda tm: tm["name"])
    assert [tm["name"] for tm in task_managers] == ["tm-0", "tm-1"]
    pids = {tm["pid"] for tm in task_managers}
    assert len(pids) == 2 and os.getpid() not in pids  # two executor Python processes, not the driver
    assert all(tm["address"].startswith("127.0.0.1:") and tm["executor_id"] == "driver" for tm in task_managers)
    # the map's subtasks ran in both TaskManagers; their metrics came back to the driver
    assert sorted(s["task_manager"] for s in distributed["vertices"][1]["subtasks"]) == ["tm-0", "tm-1"]
    for name in ("plan.json", "metrics.parquet", "summary.json", "report.html"):
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["cluster"] == cluster


@pytest.mark.slow
def test_distributed_and_in_process_runs_side_by_side(engine: SparkEngine, slow_map_realtime: Any,
                                                      tmp_path: Path) -> None:
    distributed = run_scenario(slow_map_realtime, tmp_path / "spark", engine=engine).summary
    in_process = run_scenario(slow_map_realtime, tmp_path / "local").summary
    for summary in (distributed, in_process):
        _check_slow_map_levels(summary)
    assert [(v["name"], v["backpressure_level"]) for v in distributed["vertices"]] == \
        [(v["name"], v["backpressure_level"]) for v in in_process["vertices"]]


@pytest.mark.parametrize("restart", ["", '[restart]\nstrategy = "fixed_delay"\nattempts = 30\ndelay = "1s"\n'])
def test_a_killed_task_manager_fails_the_run_with_its_cause_at_once(engine: SparkEngine, tmp_path: Path,
                                                                    restart: str) -> None:
    """Also with restarts: the failed barrier stage has ended every TaskManager, so a restart
    finds no slots (not the dead TaskManagers' slots until heartbeats find them lost)."""
    path = tmp_path / "killed.toml"
    path.write_text(SLOW_MAP.read_text() + f"""
{restart}
[[faults]]
at = "{KILL_AT:g}s"
kind = "kill_task_manager"
task_manager = "tm-1"
""")
    summary = run_scenario(load_scenario(path, ["mode=realtime", "duration=60s"]), tmp_path / "out",
                           engine=engine).summary
    assert summary["status"] == "FAILED"
    # the driver sees the executor's task fail (Flink's JobManager would notice the loss only
    # by its heartbeats, up to 20 s later)
    assert summary["error"].startswith("TaskManagerFailure: ")
    assert "Python worker exited unexpectedly" in summary["error"]  # Spark's word on the executor's process
    assert KILL_AT <= summary["duration_s"] < KILL_AT + FAIL_WITHIN  # not the 60 s of the run


def test_too_few_task_slots_is_a_clear_error_before_anything_runs(engine: SparkEngine) -> None:
    check_slots(engine.spark, MASTER, 2)
    with pytest.raises(SparkSlotsError, match=r"needs 3 TaskManagers.* runs 2 tasks at once \(local\[N\] runs N\)"):
        check_slots(engine.spark, MASTER, 3)


def test_the_watchdog_cancels_a_stage_whose_task_hangs(engine: SparkEngine) -> None:
    """What the driver does to a TaskManager that does not end (Spark never times a task out)."""
    def hang(_: Any) -> Any:  # a TaskManager stuck for good (shipped by value to the workers)
        import time

        time.sleep(600)
        yield 0

    stage = SparkJob(engine.spark, engine.spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitions(hang),
                     "hung TaskManagers")
    stage.join(1.0)
    assert stage.running
    stage.cancel()
    stage.join(SHUTDOWN_GRACE)
    assert not stage.running and "cancelled" in stage.error


@pytest.mark.slow
def test_cli_run_on_spark_end_to_end(tmp_path: Path) -> None:
    """The command as a user runs it: its own Spark session, Spark's log at one line at most."""
    shufflesim = Path(sys.executable).with_name("shufflesim")
    done = subprocess.run([str(shufflesim), "run", str(SLOW_MAP), "--out", str(tmp_path), "--engine", "spark",
                           "--master", MASTER, "--set", "mode=realtime", "--set", "duration=4s", "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 TaskManagers on Spark local[2]" in done.stdout
    assert len(done.stderr.splitlines()) <= 2, done.stderr  # "starting Spark" and one line of Spark's at most
    too_many = subprocess.run([str(shufflesim), "run", str(SLOW_MAP), "--out", str(tmp_path), "--engine", "spark",
                               "--master", "local[1]", "--set", "mode=realtime"],
                              capture_output=True, text=True, timeout=300)
    assert too_many.returncode == 2
    assert "the run needs 2 TaskManagers" in too_many.stderr and "Traceback" not in too_many.stderr
