"""Unaligned checkpoints over edges that cannot take them (sim mode).

Flink marks pointwise (forward, rescale), broadcast and custom edges, and every input of a
node with one, as not supporting unaligned checkpoints. Its `RecordWriterOutput` sends the
barrier on such an output as a plain event with forced-aligned options: the barrier queues
behind the data, the consumer aligns on it, and nothing of that edge is persisted. The
consumer then takes the checkpoint as it was (`withUnalignedSupported`), so its own outputs
that do support unaligned checkpoints get an unaligned barrier again.
"""

from __future__ import annotations

import pytest

from graph import DiscardingSink, StreamExecutionEnvironment
from taskmgr.cluster import execute
from taskmgr.operators import VerifyingSink


def _env(unaligned: bool) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(1)
    if unaligned:
        env.get_checkpoint_config().enable_unaligned_checkpoints()
    return env


def slow_consumer(exchange: str, unaligned: bool) -> StreamExecutionEnvironment:
    """2 sources -> `exchange` -> 2 maps of 1 ms a record on the other TaskManager -> sink:
    ~20 buffers of 32 records queue ahead of an aligned barrier (~0.6 s). A broadcast
    delivers every record twice, so its sink only discards."""
    env = _env(unaligned)
    if exchange == "custom":  # Flink refuses unaligned checkpoints with a custom partitioner unless forced
        env.get_checkpoint_config().set_force_unaligned_checkpoints()
    source = env.from_generator(record_size=1024).name("Seq").set_parallelism(2)
    stream = {"rescale": source.rescale(), "forward": source.forward(), "broadcast": source.broadcast(),
              "keyed": source.key_by(lambda r: r.key),
              "custom": source.partition_custom(lambda key, n: key % n, lambda r: r.key)}[exchange]
    slow = stream.map(cost="1ms").name("Slow").set_parallelism(2).slot_sharing_group("slow")
    if exchange == "forward":
        slow = slow.disable_chaining()
    slow.sink_to(DiscardingSink() if exchange == "broadcast" else VerifyingSink("check")).set_parallelism(2)
    return env


def completed(env: StreamExecutionEnvironment) -> list[dict]:
    result = execute(env, duration=6, task_managers=2, slots_per_task_manager=2).raise_for_status()
    checkpoints = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert len(checkpoints) >= 4
    if result.verifications:
        assert result.verifications["check"]["ok"]
        assert all(c["exactly_once"]["ok"] for c in checkpoints)
    return checkpoints


def timing(checkpoints: list[dict]) -> list[float]:
    return [c[figure] for c in checkpoints for figure in ("duration_ms", "start_delay_ms", "alignment_ms")]


@pytest.mark.parametrize("exchange", ["rescale", "forward", "broadcast", "custom"])
def test_a_barrier_on_an_edge_without_unaligned_support_is_forced_to_align(exchange):
    forced = completed(slow_consumer(exchange, unaligned=True))
    aligned = completed(slow_consumer(exchange, unaligned=False))
    # it queues behind the backlog as an aligned barrier does, the consumer aligns on it as
    # on an aligned one, and it overtakes (so persists) nothing
    assert timing(forced) == pytest.approx(timing(aligned), rel=0.05)
    assert all(c["duration_ms"] >= 300 for c in forced)
    assert all(c["persisted_bytes"] == 0 for c in forced)


def test_a_keyed_edge_keeps_its_unaligned_barrier():
    checkpoints = completed(slow_consumer("keyed", unaligned=True))
    assert all(c["type"] == "UNALIGNED_CHECKPOINT" for c in checkpoints)
    assert all(c["duration_ms"] <= 50 and c["persisted_bytes"] > 100_000 for c in checkpoints)


def test_a_task_aligned_by_its_inputs_sends_unaligned_barriers_on_its_keyed_outputs():
    """Source -> forward -> map -> keyBy -> a slow map: the first map aligns on its forward
    input, then its barrier overtakes the backlog of its keyed output, which is persisted."""
    env = _env(unaligned=True)
    (env.from_generator(record_size=1024).name("Seq").forward().map().name("Fast").disable_chaining()
        .key_by(lambda r: r.key).map(cost="1ms").name("Slow").slot_sharing_group("slow")
        .sink_to(VerifyingSink("check")))
    checkpoints = completed(env)
    assert all(c["type"] == "UNALIGNED_CHECKPOINT" and c["persisted_bytes"] > 100_000 for c in checkpoints)


def test_a_forced_aligned_barrier_does_not_time_out():
    """A timeoutable barrier is forced to align too (Flink's FORCED_ALIGNED is never
    timeoutable): no side switches it to unaligned after the alignment timeout."""
    env = slow_consumer("rescale", unaligned=True)
    env.get_checkpoint_config().set_aligned_checkpoint_timeout(0.05)
    checkpoints = completed(env)
    assert all(c["type"] == "CHECKPOINT" and c["persisted_bytes"] == 0 for c in checkpoints)
    assert all(c["duration_ms"] >= 300 for c in checkpoints)
