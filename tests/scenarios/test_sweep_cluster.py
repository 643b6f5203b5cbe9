"""A sweep on a cluster master: Spark's `local-cluster` mode runs executors in their own
JVMs, as a standalone cluster does, so the project's code must be shipped to them.

Slow: a local-cluster session takes about 30 s to start on two busy cores.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from scenarios.spark_session import run_tasks, spark_session
from scenarios.sweep import read_results, run_sweep
from scenarios.sweep_file import load_sweep


@pytest.mark.slow
def test_sweep_on_a_cluster_master_ships_the_code_and_equals_serial(
        sweep_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def package_file(_: int) -> str:  # defined here: shipped by value
        import scenarios

        return scenarios.__file__

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the "cluster's" Python has the dependencies
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    spark: Any = spark_session("local-cluster[2,1,1024]")
    try:
        assert run_tasks(spark, package_file, [0]) == ["./shufflesim.zip/scenarios/__init__.py"]
        on_cluster = run_sweep(load_sweep(sweep_path), tmp_path / "cluster", spark)
    finally:
        spark.stop()
    serial = run_sweep(load_sweep(sweep_path), tmp_path / "serial")
    assert on_cluster.results == serial.results
    assert read_results(tmp_path / "cluster").to_pylist() == read_results(tmp_path / "serial").to_pylist()
