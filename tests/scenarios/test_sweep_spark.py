"""Sweeps on a real local Spark (`local[2]`): the same numbers as the points run one by one.

One SparkSession for the module: a session costs about 5 s to start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from scenarios.spark_session import SparkJobError, project_code_zip, run_tasks, spark_session
from scenarios.sweep import SweepOutcome, read_results, run_sweep
from scenarios.sweep_file import load_sweep


@pytest.fixture(scope="module")
def spark() -> Any:
    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def on_spark(spark: Any, sweep_path: Path, tmp_path_factory: pytest.TempPathFactory) -> SweepOutcome:
    progress: list[tuple[int, int]] = []
    outcome = run_sweep(load_sweep(sweep_path), tmp_path_factory.mktemp("spark"), spark,
                        lambda done, total: progress.append((done, total)))
    outcome.progress = progress
    return outcome


def test_points_on_spark_equal_the_points_run_one_by_one(on_spark: SweepOutcome, one_by_one: dict[str, Any],
                                                         finished_points: list[str]) -> None:
    results = {result.point: result for result in on_spark.results}
    for point in finished_points:
        expected = one_by_one[point]
        assert results[point].status == "FINISHED" and results[point].error is None
        assert [(v.name, v.backpressure_level, v.metrics) for v in results[point].vertices] == \
            [(v["name"], v["backpressure_level"], v["metrics"]) for v in expected["vertices"]]
        written = json.loads((on_spark.out_dir / "points" / point / "summary.json").read_text())
        assert written["vertices"] == json.loads(json.dumps(expected["vertices"]))


def test_a_failing_and_an_invalid_point_are_reported_and_the_others_complete(
        on_spark: SweepOutcome, one_by_one: dict[str, Any]) -> None:
    assert [(r.point, r.status) for r in on_spark.failed] == [("p04", "FAILED"), ("p05", "INVALID")]
    assert on_spark.failed[0].error == one_by_one["p04"]["error"]
    assert "'10 parsecs' is not a duration" in on_spark.failed[1].error
    assert [r.status for r in on_spark.results[:4]] == ["FINISHED"] * 4
    assert on_spark.progress[-1] == (6, 6)
    assert [done for done, _ in on_spark.progress] == sorted(done for done, _ in on_spark.progress)


def test_serial_gives_the_same_results_as_spark(on_spark: SweepOutcome, sweep_path: Path, tmp_path: Path) -> None:
    serial = run_sweep(load_sweep(sweep_path), tmp_path)
    assert read_results(tmp_path).to_pylist() == read_results(on_spark.out_dir).to_pylist()
    for point in ("p00", "p01", "p02", "p03", "p04"):
        serial_summary, spark_summary = (json.loads((out / "points" / point / "summary.json").read_text())
                                         for out in (tmp_path, on_spark.out_dir))
        for summary in (serial_summary, spark_summary):  # the process ids of where the points ran differ
            for task_manager in summary["cluster"]["task_managers"]:
                task_manager.pop("pid")
        assert serial_summary == spark_summary
    assert serial.results == on_spark.results


def test_results_as_a_spark_dataframe(on_spark: SweepOutcome, spark: Any) -> None:
    frame = on_spark.dataframe(spark)
    assert frame.columns == read_results(on_spark.out_dir).column_names
    assert [row.asDict() for row in frame.collect()] == read_results(on_spark.out_dir).to_pylist()


def test_run_tasks_keeps_order_and_a_failing_task_gives_its_root_cause(
        spark: Any, capfd: pytest.CaptureFixture[str]) -> None:
    def task(item: int) -> int:  # defined here: shipped by value to the workers
        if item == 2:
            raise ValueError("point 2 cannot run")
        return item * 10

    assert run_tasks(spark, task, [0, 1, 3]) == [0, 10, 30]
    with pytest.raises(SparkJobError, match=r"^ValueError: point 2 cannot run$"):
        run_tasks(spark, task, [0, 1, 2, 3])
    assert "Traceback" not in capfd.readouterr().err  # Spark's log stays quiet


def test_ctrl_c_cancels_the_tasks_without_tracebacks(spark: Any, capfd: pytest.CaptureFixture[str],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Ctrl-C while the driver is in a call to the JVM (here: a progress poll): pyspark's own
    SIGINT handler called the JVM again from inside the signal handler, and py4j logged
    pages of 'reentrant call' tracebacks."""
    import signal
    import threading
    import time

    def slow(item: int) -> int:
        time.sleep(120)
        return item

    def poll_while_signalled(_done: int, _total: int) -> None:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        spark.sparkContext._jvm.java.lang.Thread.sleep(1000)  # in the JVM when the signal comes

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_tasks(spark, slow, [0, 1], poll_while_signalled, poll_seconds=0.2)
    assert time.monotonic() - start < 60  # cancelled, not waited for
    err = capfd.readouterr().err + caplog.text  # py4j logs its failures (to stderr, outside pytest)
    assert "Traceback" not in err and "Exception while sending command" not in err, err
    assert spark.sparkContext.parallelize([1, 2]).count() == 2  # the session still works


def test_local_workers_are_forked_with_the_project_imported(spark: Any) -> None:
    def preloaded(_: int) -> tuple[Any, ...]:  # defined here: shipped by value, imports nothing of ours
        import gc
        import os
        import sys

        import pyspark

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
            forked_by = cmdline.read().replace(b"\0", b" ").decode()
        return ("scenarios.sweep" in sys.modules and "scenarios.spark_run" in sys.modules,
                gc.get_freeze_count() > 0, pyspark.__file__, forked_by, sys.argv[1:], os.getcwd(),
                "SHUFFLESIM_SPARK_ZYGOTE" in os.environ, os.environ.get("OPENBLAS_NUM_THREADS"))

    first, second = run_tasks(spark, preloaded, [0, 1])
    imported, frozen, pyspark_file, forked_by, argv, cwd, daemon_environment, openblas = first
    assert imported and frozen and second == first
    # the installed pyspark, with its bytecode caches, not the source-only pyspark.zip Spark puts first
    assert ".zip" not in pyspark_file
    # the daemon was the zygote started with the session, which imported all that beside the JVM,
    # and took the launched daemon's arguments (the worker module), directory and environment
    assert "-m scenarios.spark_zygote " in forked_by
    assert argv == ["pyspark.worker"] and cwd == os.getcwd() and daemon_environment and openblas == "1"


def test_project_code_zip_holds_the_packages(tmp_path: Path) -> None:
    names = zipfile.ZipFile(project_code_zip(tmp_path / "code.zip")).namelist()
    for module in ("graph/__init__.py", "shuffle/config.py", "taskmgr/cluster.py", "scenarios/sweep.py",
                   "scenarios/spark-log4j2.properties"):
        assert module in names
    assert not [name for name in names if "__pycache__" in name]


@pytest.mark.slow
def test_cli_on_spark_end_to_end(sweep_path: Path, tmp_path: Path) -> None:
    """The command as a user runs it: its own Spark session, a quiet log, exit code 1 for failed points."""
    shufflesim = Path(sys.executable).with_name("shufflesim")
    done = subprocess.run([str(shufflesim), "sweep", str(sweep_path), "--out", str(tmp_path), "--master", "local[2]"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "6/6 points done" in done.stdout and "starting Spark (local[2])" in done.stdout
    spark_lines = [line for line in done.stderr.splitlines()
                   if not line.startswith(("shufflesim: 2 of 6 points failed", "  p04: ", "  p05: "))]
    assert len(spark_lines) <= 1, done.stderr  # Spark's log: one line at most
    assert len(read_results(tmp_path)) == 11


CRASHING_PROGRAM = '''
import os
from graph import DiscardingSink, StreamExecutionEnvironment


def build(env: StreamExecutionEnvironment) -> None:
    seen = [0]

    def crash_after_3000(record):  # as a native crash or the kernel's OOM killer would
        seen[0] += 1
        if seen[0] > 3000:
            os._exit(137)
        return record

    env.set_parallelism(1)
    env.from_generator(rate=1000, record_size=32).map(crash_after_3000).sink_to(DiscardingSink())
'''


def test_a_point_whose_python_worker_dies_is_an_error_row_and_the_others_run(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One Spark job per point: a crashed worker failed the sweep's only job, and with it
    every point's result (no results.parquet, no table)."""
    module = tmp_path / "sweep_crash_program.py"
    module.write_text(CRASHING_PROGRAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    spark.sparkContext.addPyFile(str(module))
    (tmp_path / "crash.toml").write_text('duration = "1s"\n[job]\nprogram = "sweep_crash_program:build"\n')
    (tmp_path / "sweep.toml").write_text('scenario = "crash.toml"\n[grid]\nduration = ["1s", "10s", "2s"]\n')
    outcome = run_sweep(load_sweep(tmp_path / "sweep.toml"), tmp_path / "out", spark)
    assert [(r.point, r.status) for r in outcome.results] == [("p00", "FINISHED"), ("p01", "ERROR"),
                                                               ("p02", "FINISHED")]
    assert outcome.results[1].error.startswith("its Spark task failed: ")
    assert "Python worker exited unexpectedly" in outcome.results[1].error
    assert {(row["point"], row["status"]) for row in read_results(tmp_path / "out").to_pylist()} == \
        {("p00", "FINISHED"), ("p01", "ERROR"), ("p02", "FINISHED")}
    assert sorted(path.name for path in (tmp_path / "out" / "points").iterdir()) == ["p00", "p02"]


def test_the_readme_notebook_example_runs_as_written(spark: Any, sweep_path: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The README's Python example of a sweep, on this module's session: it shows progress (a
    notebook's long sweep showed nothing until it ended) and lists the failed points."""
    import re

    import scenarios.spark_session

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Sweeps\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.setattr(scenarios.spark_session, "spark_session", lambda master: spark)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-sweep.toml").write_text(sweep_path.read_text())
    exec(block.replace('"`job.stages[Seq].rate`"', '"`network.buffer_timeout`"'), {})
    out = capsys.readouterr().out
    assert "6/6 points done" in out
    assert "[('p04', 'FAILED', " in out and "('p05', 'INVALID', " in out
    assert (tmp_path / "out" / "x" / "results.parquet").exists()
