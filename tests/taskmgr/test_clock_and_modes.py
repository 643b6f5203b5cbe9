"""Sim runs are deterministic for a seed; realtime mode (TCP on loopback) shows the same
bottleneck and levels as sim mode."""

from __future__ import annotations

import pytest

from graph import KeyDistribution, DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import Tracer
from taskmgr.cluster import execute


def keyed_pipeline() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(rate=3000, keys=KeyDistribution("zipf", num_keys=100)).set_parallelism(2)
        .key_by(lambda r: r.key).map(cost="0.5ms").set_parallelism(3)
        .rebalance().sink_to(DiscardingSink()).set_parallelism(2))
    return env


def test_same_seed_gives_same_metrics() -> None:
    runs = [execute(keyed_pipeline(), duration=5, task_managers=2, slots_per_task_manager=2, seed=3)
            for _ in range(2)]
    first, second = (run.metrics.sort_by([("vertex", "ascending"), ("subtask", "ascending"),
                                          ("metric", "ascending"), ("t", "ascending")]) for run in runs)
    assert first.num_rows > 0
    assert first.equals(second)
    assert runs[0].records_received == runs[1].records_received


def test_sim_clock_is_virtual() -> None:
    async def sleep_an_hour() -> float:
        await kernel.sleep(3600)
        return kernel.current_time()

    assert kernel.run(sleep_an_hour, mode="sim") >= 3600


@pytest.mark.parametrize("duration", [0, -1.0, float("nan"), float("inf"), "10s", True])
def test_a_duration_that_is_not_a_positive_number_of_seconds_is_refused(duration: object) -> None:
    # 0 and -1 ran an empty job that read FINISHED, NaN raised an empty TooSlowError,
    # infinity never ended, "10s" failed with a TypeError from inside the run
    with pytest.raises(ValueError, match=f"duration must be a finite number of seconds > 0, got {duration!r}"):
        execute(keyed_pipeline(), duration=duration, task_managers=2)  # type: ignore[arg-type]


def slow_map() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator().name("Seq").rebalance().map(cost="5ms").name("SlowMap")
        .slot_sharing_group("slow").sink_to(DiscardingSink()))
    return env


@pytest.mark.tcp
def test_realtime_shows_the_same_bottleneck_as_sim() -> None:
    levels = {}
    for mode in ("sim", "realtime"):
        result = execute(slow_map(), duration=3, task_managers=2, mode=mode, seed=7).raise_for_status()
        assert result.invariant_violations() == []
        source, slow = result.vertex_summary("Source: Seq"), result.vertex_summary("SlowMap")
        levels[mode] = (source["backpressure_level"], slow["backpressure_level"])
        if mode == "sim":  # realtime rates depend on the machine's load: only its levels are asserted
            assert slow["metrics"]["busyTimeMsPerSecond"] > 800
            assert slow["metrics"]["numRecordsInPerSecond"] == pytest.approx(200, rel=0.1)
        assert slow["metrics"]["inPoolUsage"] > 0.9
    assert levels["sim"] == levels["realtime"] == ("high", "ok")


def test_realtime_clock_counts_from_the_start_of_the_run() -> None:
    """trio's own clock adds a random 10,000-200,000 s: a realtime trace.jsonl read t =
    118528.55 where the metrics read 1.0, and its Perfetto trace spanned 33 hours."""
    async def now() -> float:
        return kernel.current_time()

    assert 0 <= kernel.run(now, mode="realtime") < 60


@pytest.mark.tcp
def test_realtime_trace_and_metrics_share_a_time_scale() -> None:
    tracer = Tracer()
    result = execute(slow_map(), duration=1, task_managers=2, mode="realtime", tracer=tracer).raise_for_status()
    times = [event["t"] for event in tracer.events]
    assert times and 0 <= min(times) and max(times) < max(result.metrics.column("t").to_pylist()) + 60
