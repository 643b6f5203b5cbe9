"""Checkpoints end to end (sim mode): exactly-once accounting per checkpoint over random
topologies, and the two results real Flink 2.3 shows on the slow-map job (issue 8)."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph import CheckpointingMode, DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.cluster import ClusterConfig, execute, run_job
from taskmgr.jobmanager import JobConfig
from taskmgr.operators import VerifyingSink


def checkpointed_job(mode: str, source_p: int, map_p: int, sink_p: int, keyed: bool, map_cost: str,
                     timeout: float = 0.0) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(0.5, CheckpointingMode.AT_LEAST_ONCE if mode == "at_least_once" else None)
    if mode in ("unaligned", "aligned_timeout"):
        env.get_checkpoint_config().enable_unaligned_checkpoints().set_aligned_checkpoint_timeout(timeout)
    stream = env.from_generator(record_size=16).set_parallelism(source_p)
    stream = stream.key_by(lambda r: r.key) if keyed else stream.rebalance()
    (stream.map(cost=map_cost).set_parallelism(map_p).slot_sharing_group("work")
        .rebalance().sink_to(VerifyingSink("check")).set_parallelism(sink_p).slot_sharing_group("sink"))
    return env


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(mode=st.sampled_from(["aligned", "unaligned", "aligned_timeout"]), source_p=st.integers(1, 2),
       map_p=st.integers(1, 3), sink_p=st.integers(1, 2), keyed=st.booleans(),
       map_cost=st.sampled_from(["200us", "1ms"]), timeout=st.sampled_from([0.005, 0.02, 0.1]))
def test_every_completed_checkpoint_accounts_for_every_record_exactly_once(mode, source_p, map_p, sink_p, keyed,
                                                                           map_cost, timeout):
    env = checkpointed_job(mode, source_p, map_p, sink_p, keyed, map_cost,
                           timeout if mode == "aligned_timeout" else 0.0)
    # aligned barriers queue behind ~20 buffers of back-pressured data (up to ~25 s at 1 ms a record)
    duration = 40 if mode == "aligned" else 4
    result = execute(env, duration=duration, task_managers=3, slots_per_task_manager=3).raise_for_status()
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert len(completed) >= (1 if mode == "aligned" else 4)  # aligned ones queue behind the backlog
    for checkpoint in completed:
        accounting = checkpoint["exactly_once"]
        assert accounting["ok"], (checkpoint, mode)
        assert accounting["expected"] > 0
        assert accounting["persisted"] == 0 or checkpoint["type"] == "UNALIGNED_CHECKPOINT"
    if mode != "aligned":  # back-pressured: every barrier overtakes data (after the timeout, if any)
        assert all(c["type"] == "UNALIGNED_CHECKPOINT" for c in completed)
        assert sum(c["exactly_once"]["persisted"] for c in completed) > 0
    assert result.verifications["check"]["ok"]


def test_alignment_timeout_switches_back_pressured_checkpoints_to_unaligned():
    env = slow_map("unaligned")
    env.get_checkpoint_config().set_aligned_checkpoint_timeout(0.05)
    result = execute(env, duration=20, task_managers=2).raise_for_status()
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert len(completed) >= 5
    # the aligned barrier waits 50 ms behind the backlog, then overtakes it as an unaligned one
    assert all(c["type"] == "UNALIGNED_CHECKPOINT" and c["start_delay_ms"] >= 50 for c in completed)
    assert all(c["persisted_bytes"] > 100_000 for c in completed)


def test_at_least_once_never_blocks_and_completes():
    env = checkpointed_job("at_least_once", 2, 2, 1, False, "1ms")
    result = execute(env, duration=40, task_managers=3, slots_per_task_manager=3).raise_for_status()
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    # its barriers queue behind the backlog as aligned ones do, but no channel is blocked
    assert len(completed) >= 1 and all(c["persisted_bytes"] == 0 for c in completed)
    assert all(c["exactly_once"]["missing"] == 0 for c in completed)  # at least once


def slow_map(mode: str | None) -> StreamExecutionEnvironment:
    """Issue 8's job: unthrottled Longs -> rebalance -> 5 ms map on the other TaskManager -> sink
    (mode None: without checkpoints)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    if mode is not None:
        env.enable_checkpointing(3)
    if mode == "unaligned":
        env.get_checkpoint_config().enable_unaligned_checkpoints()
    (env.from_generator(record_size=8).name("Seq").rebalance()
        .map(cost="5ms").name("Slow").slot_sharing_group("slow").sink_to(DiscardingSink()))
    return env


def test_aligned_checkpoints_of_the_slow_map_wait_behind_the_queued_buffers():
    """Flink: ~151 s = 19 buffers x 1,560 records / 196 records/s, all of it start delay."""
    result = execute(slow_map("aligned"), duration=200, task_managers=2).raise_for_status()
    first = result.checkpoints[0]
    assert first["status"] == "COMPLETED" and first["type"] == "CHECKPOINT"
    # the map takes 5 ms a record here (200/s): as in Flink (151 s x 196/s = 18.97 buffers),
    # ~19 buffers of 1,560 records queue ahead, 10 at the sender and 9 at the receiver
    assert 18.5 * 1560 / 200 * 1000 <= first["duration_ms"] <= 19.5 * 1560 / 200 * 1000
    assert first["alignment_ms"] == 0 and first["start_delay_ms"] == pytest.approx(first["duration_ms"], rel=0.01)
    assert first["persisted_bytes"] == 0


def test_unaligned_checkpoints_of_the_slow_map_take_milliseconds():
    """Flink: 15-16 complete in 40 s, p50 12-14 ms (start delay 8-9 ms), ~485-500 KB persisted."""
    result = execute(slow_map("unaligned"), duration=40, task_managers=2).raise_for_status()
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert len(completed) >= 13 and all(c["type"] == "UNALIGNED_CHECKPOINT" for c in completed)
    assert 10 <= statistics.median(c["duration_ms"] for c in completed) <= 14
    assert 3 <= statistics.median(c["start_delay_ms"] for c in completed) <= 12
    # the barrier waits for the record in hand (5 ms) and no longer: the snapshot it starts
    # runs in the same priority mail, not after another record (which would add 5 ms); both
    # figures are whole milliseconds of the clock, as Flink's, so ~5.2 ms reads as 5 or 6
    assert all(c["duration_ms"] - c["start_delay_ms"] <= 6 for c in completed)
    # the map's input (~9 buffers) and the source's output queue, overtaken by the barrier
    assert all(400_000 <= c["persisted_bytes"] <= 700_000 for c in completed)


def test_the_state_size_of_an_unaligned_checkpoint_counts_its_persisted_in_flight_data():
    """Flink's OperatorSubtaskState.getStateSize() sums the keyed and operator state and the
    input channel and result subpartition state: the in-flight data is state too."""
    job = JobConfig(10, task_managers=2, checkpoint_costs=CheckpointCosts(state_size=4096))
    result = kernel.run(run_job, slow_map("unaligned"), ClusterConfig(task_managers=2), job, mode="sim")
    completed = [c for c in result.raise_for_status().checkpoints if c["status"] == "COMPLETED"]
    assert completed and all(c["persisted_bytes"] > 100_000 for c in completed)
    # two subtasks (the source, the map chained with the sink) of 4 KiB each
    assert all(c["state_bytes"] == c["persisted_bytes"] + 2 * 4096 for c in completed)


def test_source_tasks_report_their_checkpoint_start_delay():
    """Flink's SourceOperatorStreamTask registers `checkpointStartDelayNanos` on its last
    RPC-triggered checkpoint (StreamTask.latestAsyncCheckpointStartDelayNanos); a task with
    inputs reports its barrier handler's, with `checkpointAlignmentTime`."""
    result = execute(slow_map("unaligned"), duration=8, task_managers=2).raise_for_status()
    rows = [r for r in result.metrics.to_pylist() if r["metric"].startswith("checkpoint")]
    source = {r["metric"] for r in rows if r["vertex"] == "Source: Seq"}
    assert source == {"checkpointStartDelayNanos"}
    delays = {r["value"] for r in rows if r["vertex"] == "Source: Seq" and r["t"] > 4}
    # the trigger reaches the source `trigger_delay` (4 ms) after the barrier's timestamp
    assert delays and all(3_000_000 <= d <= 5_000_000 for d in delays)
    assert {"checkpointStartDelayNanos", "checkpointAlignmentTime"} <= {r["metric"] for r in rows
                                                                        if r["vertex"] != "Source: Seq"}


def test_tasks_report_their_checkpoint_gauges_without_checkpoints_too():
    """Flink registers them whether or not the job checkpoints (InputProcessorUtil.
    registerCheckpointMetrics, SourceOperatorStreamTask.init; Flink 2.3's REST lists them
    for slow-map with 4 maps without checkpoints, at 0)."""
    result = execute(slow_map(None), duration=3, task_managers=2).raise_for_status()
    rows = [r for r in result.metrics.to_pylist() if r["metric"].startswith("checkpoint")]
    by_vertex = {}
    for r in rows:
        by_vertex.setdefault(r["vertex"], set()).add(r["metric"])
    assert by_vertex == {"Source: Seq": {"checkpointStartDelayNanos"},
                         "Slow -> Sink: Writer": {"checkpointStartDelayNanos", "checkpointAlignmentTime"}}
    assert {r["value"] for r in rows} == {0.0}
