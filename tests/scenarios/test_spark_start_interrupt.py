"""Ctrl-C while a Spark session starts: the start runs to its end and is stopped, then the
interrupt goes on (a real local Spark; this module starts and stops its own session)."""

from __future__ import annotations

import os
import signal

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from scenarios.spark_session import spark_session


def test_a_ctrl_c_as_spark_starts_stops_the_session_and_interrupts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SparkContext._active_spark_context is None, "another module's session is still running"
    original = SparkSession.Builder.getOrCreate

    def start_then_ctrl_c(builder: SparkSession.Builder) -> SparkSession:
        spark = original(builder)
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, as the start ends
        return spark

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", start_then_ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            spark_session("local[1]")
        # stopped, not left running (pyspark's own handler raised and left it up)
        assert SparkContext._active_spark_context is None
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # ours is gone again
    finally:
        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
