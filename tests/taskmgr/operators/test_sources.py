"""Sources: they step through a costed chain as Flink's emit one record per mailbox turn
(sim mode), and `from_sequence` splits its range as Flink's NumberSequenceSource.

The chained-map job: an unthrottled source with a forward-chained map of 1 ms a record,
then a map and sink on the other TaskManager, 100 ms buffer timeout. Flink's source
hands out one record per turn, each through the map and into the record writer at once:
the 100 ms flush decides the latency (mean ~51 ms, p99 ~100 ms) and the remote map
receives ~11 buffers a second.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow.compute as pc
import pytest

from graph import CollectSink, DiscardingSink, StreamExecutionEnvironment
from taskmgr.cluster import execute
from taskmgr.operators.sources import SourceOperator, sequence_split
from taskmgr.workloads import GeneratorState


def chained_map_job(checkpoint_interval: float | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_buffer_timeout(0.1)
    if checkpoint_interval is not None:
        env.enable_checkpointing(checkpoint_interval)
    (env.from_generator(record_size=16).name("Ticks").forward().map(cost="1ms").name("Enrich")
        .rebalance().map(cost="0ms").name("Price").slot_sharing_group("other").sink_to(DiscardingSink()))
    return env


def samples(result, vertex: str, metric: str) -> list[float]:
    table = result.metrics.filter(pc.and_(pc.equal(result.metrics["vertex"], vertex),
                                          pc.equal(result.metrics["metric"], metric)))
    return table["value"].to_pylist()


def test_a_costed_chained_map_sees_records_one_step_at_a_time() -> None:
    result = execute(chained_map_job(), duration=6, task_managers=2).raise_for_status()
    latency = result.latency_summary()
    assert 45 <= latency["mean"] <= 57  # one whole buffer per step: 1,176 ms
    assert 90 <= latency["p99"] <= 105
    price = result.vertex_summary("Price")["metrics"]
    assert 9 <= price["numBuffersInRemotePerSecond"] <= 13  # 1.8 with whole buffers
    records_out = samples(result, "Source: Ticks -> Enrich", "numRecordsOutPerSecond")[1:]
    assert records_out and all(rate == pytest.approx(1000, abs=15) for rate in records_out)  # not 1,129 or 0


def test_a_checkpoint_is_taken_between_two_steps_of_the_source() -> None:
    result = execute(chained_map_job(checkpoint_interval=1.0), duration=6, task_managers=2).raise_for_status()
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert len(completed) >= 4
    # The trigger (4 ms after the barrier's timestamp) waits for the step in hand, 10 ms at
    # most, not a buffer's worth of records (1.1 s).
    assert all(c["start_delay_ms"] < 4 + 10 + 1 for c in completed)
    assert all(c["duration_ms"] < 25 for c in completed)


def test_each_record_is_created_after_the_chain_processed_the_one_before() -> None:
    stamps: list[int] = []
    env = StreamExecutionEnvironment.get_execution_environment()

    def stamp(value, ctx):
        yield ctx.timestamp()

    (env.from_sequence(1, 60).map(lambda v: v, cost="2ms").process(stamp)
        .sink_to(CollectSink("stamps")))
    result = execute(env, duration=2).raise_for_status()
    stamps = result.collected["stamps"]
    assert len(stamps) == 60
    steps = np.diff(stamps)  # ms; one batch of 512 shared one stamp
    assert (steps >= 1).all() and (steps <= 3).all() and stamps[-1] - stamps[0] == pytest.approx(118, abs=1)


def test_a_free_chain_takes_whole_batches_a_costed_one_10_ms_of_records_1_ms_with_checkpoints(monkeypatch) -> None:
    drawn: list[int] = []
    peek = GeneratorState.peek_batch

    def counting(self, n, timestamp_ns):
        drawn.append(n)
        return peek(self, n, timestamp_ns)

    monkeypatch.setattr(GeneratorState, "peek_batch", counting)

    def job(cost: str, checkpoint: bool = False) -> StreamExecutionEnvironment:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_buffer_timeout(-1)  # no flush to end a step early
        if checkpoint:
            env.enable_checkpointing(1.0)
        (env.from_generator(record_size=16, count=5000).name("Gen").forward().map(cost=cost)
            .rebalance().map().slot_sharing_group("other").sink_to(DiscardingSink()))
        return env

    execute(job("0ms"), duration=2, task_managers=2).raise_for_status()
    assert drawn[0] == 32 * 1024 // 29  # a buffer of 29-byte records
    drawn.clear()
    execute(job("1ms"), duration=7, task_managers=2).raise_for_status()
    assert set(drawn) == {9}  # 10 ms over 1 ms for the map plus the source's own 100 ns
    drawn.clear()
    # with checkpoints a trigger (a mail) waits for the step in hand, where Flink's waits for
    # one record: a source's steps are 1 ms, aligned or not
    execute(job("0.1ms", checkpoint=True), duration=2, task_managers=2).raise_for_status()
    assert set(drawn) == {9}


# -- from_sequence --------------------------------------------------------------------------------

@pytest.mark.parametrize("start, end, splits, sizes", [
    (1, 10, 3, [4, 3, 3]),  # NumberSequenceIterator.split: the remainder to the first splits
    (0, 6, 4, [2, 2, 2, 1]),
    (5, 6, 4, [1, 1, 0, 0]),
    (1, 8, 2, [4, 4]),
])
def test_sequence_split_gives_the_remainder_to_the_first_splits(start, end, splits, sizes):
    parts = [sequence_split(start, end, i, splits) for i in range(splits)]
    assert [len(p) for p in parts] == sizes
    assert [n for p in parts for n in p] == list(range(start, end + 1))  # in order, each once


def test_each_subtask_of_from_sequence_emits_its_split():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 10).set_parallelism(3).rebalance().sink_to(CollectSink("out"))
    result = execute(env, duration=10, task_managers=1, slots_per_task_manager=3).raise_for_status()
    assert sorted(result.collected["out"]) == list(range(1, 11))
    out = {}
    for row in result.metrics.to_pylist():
        if row["vertex"].startswith("Source") and row["metric"] == "numRecordsOut":
            out[row["subtask"]] = max(out.get(row["subtask"], 0), row["value"])
    assert out == {0: 4, 1: 3, 2: 3}


def test_creation_times_are_those_of_each_step_as_its_cost_changes() -> None:
    """creation_times keeps the offsets of one cost per record and reuses a prefix of them: the
    same timestamps as computed anew for each step, as the cost and the step's length change."""
    source = SourceOperator.__new__(SourceOperator)
    source._cost_offsets = None
    source.ctx = SimpleNamespace(step_cost=0.0, timestamp_ns=lambda: 1_234_567)
    rng = np.random.default_rng(5)
    for _ in range(200):
        cost = float(rng.choice([0.0, 1e-7, 3.3e-7, 1e-6, 0.0123]))
        n = int(rng.integers(1, 700))
        source.ctx.step_cost = cost
        expected = 1_234_567 if cost <= 0 or n <= 1 else 1_234_567 + (np.arange(n) * (cost * 1e9)).astype(np.int64)
        assert np.array_equal(source.creation_times(n), expected)
    assert len(source._cost_offsets[1]) < 2 * 700  # kept for the steps' lengths, not a whole batch's
