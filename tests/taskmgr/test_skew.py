"""A keyed pipeline with a hot key: the subtask owning it is the bottleneck (sim mode)."""

from __future__ import annotations

from graph import DiscardingSink, KeyDistribution, StreamExecutionEnvironment
from shuffle.partitioner.key_groups import assign_key_to_parallel_operator
from taskmgr.cluster import execute


def test_hot_key_subtask_is_the_bottleneck() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    keys = KeyDistribution("hot_key", num_keys=1000, hot_key_fraction=0.5)
    (env.from_generator(rate=1000, record_size=64, keys=keys).set_parallelism(2).name("Events")
        .key_by(lambda r: r.key).map(cost="1ms").set_parallelism(4).name("PerKey")
        .sink_to(DiscardingSink()))
    result = execute(env, duration=20, task_managers=2, slots_per_task_manager=2, seed=11).raise_for_status()
    assert result.invariant_violations() == []
    per_key = result.vertex_summary("PerKey")
    hot = assign_key_to_parallel_operator(0, 128, 4)
    busy = [s["metrics"]["busyTimeMsPerSecond"] for s in per_key["subtasks"]]
    assert busy[hot] > 990
    assert all(b < 500 for i, b in enumerate(busy) if i != hot)
    hot_metrics = per_key["subtasks"][hot]["metrics"]
    rates = [s["metrics"]["numRecordsInPerSecond"] for s in per_key["subtasks"]]
    assert hot_metrics["numRecordsInPerSecond"] == max(rates)
    assert hot_metrics["inPoolUsage"] > 0.9
    assert all(s["metrics"]["inPoolUsage"] < 0.5 for i, s in enumerate(per_key["subtasks"]) if i != hot)
    assert per_key["backpressure_level"] == "ok"
