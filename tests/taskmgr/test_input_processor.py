"""A task's chunks of records show what Flink's record-at-a-time processing shows (sim mode),
and a two-input task reads its inputs in turn per record, not per buffer.

Flink's StreamOneInputProcessor takes one record per mailbox turn through the chain and
into the record writer: record i of a buffer is written (i+1)·c after processing starts,
and a flush sends every record written before it. The reference is the same job run in
steps of one record (`MAX_CHUNK_TIME` of 0.1 us).
"""

from __future__ import annotations

import pytest

import taskmgr.task
from graph import CoFlatMapFunction, CoMapFunction, DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, execute, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobStatus
from taskmgr.operators import VerifyingSink
from taskmgr.restart_strategy import RestartStrategy


def remote_sink_job() -> StreamExecutionEnvironment:
    """1,000 records/s -> a 0.5 ms map on the other TaskManager -> a sink back on the first:
    the map takes a flush's ~100 records in chunks of 20 (10 ms), and its own output flusher
    (100 ms, another phase) comes in the middle of one chunk or another."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_buffer_timeout(0.1)
    (env.from_generator(rate=1000, record_size=16).name("Ticks").rebalance()
        .map(cost="0.5ms").name("Price").slot_sharing_group("other").rebalance().sink_to(DiscardingSink()))
    return env


def latency(monkeypatch: pytest.MonkeyPatch, seed: int, per_record: bool) -> dict[str, float]:
    if per_record:
        monkeypatch.setattr(taskmgr.task, "MAX_CHUNK_TIME", 1e-7)
    return execute(remote_sink_job(), duration=6, task_managers=2, seed=seed).raise_for_status().latency_summary()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_flush_in_the_middle_of_a_chunk_sends_the_records_done_before_it(monkeypatch, seed) -> None:
    chunked = latency(monkeypatch, seed, per_record=False)
    reference = latency(monkeypatch, seed, per_record=True)
    # seed 0, when the chunk ended after the flush: mean 114.7 ms against 99.4
    assert chunked["mean"] == pytest.approx(reference["mean"], rel=0.01)
    for q in ("p50", "p90", "p99"):
        assert chunked[q] == pytest.approx(reference[q], rel=0.02)


# -- two inputs: Flink's StreamMultipleInputProcessor picks an input per record (canEmitBatchOfRecords
# is false for a two-input task), so inputs with data get equal record counts -------------------------

class Pass(CoMapFunction):
    def map1(self, value):
        return value

    def map2(self, value):
        return value


class KeepFirst(CoFlatMapFunction):
    def flat_map1(self, value):
        return [value]

    def flat_map2(self, value):
        return []


def _rates(result) -> dict[str, float]:
    return {v["name"]: v["metrics"]["numRecordsOutPerSecond"] for v in result.vertex_summaries()}


def test_inputs_of_unequal_record_sizes_get_equal_records() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    small = env.from_generator(rate=0, record_size=32).name("Small")
    large = env.from_generator(rate=0, record_size=1024).name("Large")
    small.connect(large).map(Pass(), cost="1ms").name("CoMap").sink_to(DiscardingSink())
    rates = _rates(execute(env, duration=60, task_managers=2).raise_for_status())
    # Small sends a buffer of ~900 records at a time: its per-second rate comes in steps
    assert 430 < rates["Source: Small"] < 570, rates  # per buffer it was ~956
    assert 430 < rates["Source: Large"] < 570, rates  # and ~42


def test_slow_input_does_not_wait_for_a_whole_buffer_of_the_other() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    slow = env.from_generator(rate=100, record_size=64).name("Slow")
    fast = env.from_generator(rate=0, record_size=64).name("Fast")
    slow.connect(fast).flat_map(KeepFirst(), cost="1ms").sink_to(DiscardingSink())
    result = execute(env, duration=20, task_managers=2).raise_for_status()
    # the 100 ms buffer timeout and a record's turn, not ~400 ms of the fast input's buffer
    assert result.latency_summary()["mean"] < 80, result.latency_summary()


@pytest.mark.parametrize("unaligned", [False, True])
def test_a_two_input_task_restarts_from_checkpoints_with_every_record_once(unaligned: bool) -> None:
    """Both inputs' records in hand are persisted (unaligned) and restored into their own
    input; two failures of the co-map, every record counted once at the end."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(0.5)
    if unaligned:
        env.get_checkpoint_config().enable_unaligned_checkpoints()
    a = env.from_generator(count=8000, record_size=64).name("A").set_parallelism(2).key_by(lambda r: r.key)
    b = env.from_generator(count=4000, record_size=1024).name("B").set_parallelism(2).key_by(lambda r: r.key)
    (a.connect(b).map(Pass(), cost="1ms").name("Co").set_parallelism(2)
        .rebalance().sink_to(VerifyingSink("check")).name("Check"))
    job = JobConfig(60, task_managers=3, restart=RestartStrategy("fixed_delay", attempts=3, delay=1.0))
    faults = (Fault(3.3, "fail_task", vertex="Co", subtask=0, message="x"),
              Fault(7.7, "fail_task", vertex="Co", subtask=1, message="x"))
    result = kernel.run(run_job, env, ClusterConfig(task_managers=3), job, NULL_TRACER, None, None, faults, mode="sim")
    assert result.status is JobStatus.FINISHED, result.error
    assert len(result.restart_history) == 2
    assert result.verifications["check"] == {"received": 24000, "out_of_order": 0, "duplicates": 0,
                                             "missing": 0, "ok": True}
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert completed and all(c["exactly_once"]["ok"] for c in completed)
