"""The backpressure case every Flink user knows: a fast source and a 5 ms map (sim mode).

Real Flink 2.3.0: the source back-pressured (~1000 ms/s, HIGH, output pool full), the map
busy (~1000 ms/s, OK) at ~200 records/s; a local channel leaves the map's input buffer
usages at 0, a remote one fills its exclusive and floating buffers.
"""

from __future__ import annotations

import pytest

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle.config import NetworkConfig
from shuffle.serialization.records import RECORD_OVERHEAD
from taskmgr.cluster import execute


def slow_map(rate: float = 0, map_parallelism: int = 1, remote: bool = False) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    mapped = env.from_generator(rate=rate).name("Seq").rebalance().map(cost="5ms").name("SlowMap")
    mapped = mapped.set_parallelism(map_parallelism)
    if remote:
        mapped = mapped.slot_sharing_group("slow")
    mapped.sink_to(DiscardingSink())
    return env


def run(env: StreamExecutionEnvironment, task_managers: int):
    result = execute(env, duration=10, task_managers=task_managers, seed=7).raise_for_status()
    assert result.invariant_violations() == []
    return result.vertex_summary("Source: Seq"), result.vertex_summary("SlowMap")


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_unthrottled_source_is_backpressured_by_slow_map(remote: bool) -> None:
    source, slow = run(slow_map(remote=remote), task_managers=2 if remote else 1)
    assert source["backpressure_level"] == "high"
    assert source["metrics"]["backPressuredTimeMsPerSecond"] > 990
    assert source["metrics"]["outPoolUsage"] == pytest.approx(1.0)
    assert slow["backpressure_level"] == "ok"
    assert slow["metrics"]["busyTimeMsPerSecond"] > 990
    assert slow["metrics"]["numRecordsInPerSecond"] == pytest.approx(200, rel=0.02)
    # Flink's InputChannelMetrics: everything came through one kind of channel, in full buffers
    kind, other = ("Remote", "Local") if remote else ("Local", "Remote")
    metrics = slow["metrics"]
    assert metrics[f"numBytesIn{kind}PerSecond"] == pytest.approx(metrics["numBytesInPerSecond"])
    assert metrics[f"numBuffersIn{kind}PerSecond"] * 32768 == pytest.approx(metrics["numBytesInPerSecond"], rel=0.05)
    assert metrics[f"numBytesIn{other}PerSecond"] == metrics[f"numBuffersIn{other}PerSecond"] == 0
    if remote:
        assert source["subtasks"][0]["task_manager"] != slow["subtasks"][0]["task_manager"]
        assert slow["metrics"]["inputExclusiveBuffersUsage"] == pytest.approx(1.0)
        assert slow["metrics"]["inputFloatingBuffersUsage"] == pytest.approx(1.0)
        assert slow["metrics"]["inPoolUsage"] == pytest.approx(1.0)
        # Appendix C: ~10 buffers queued at the sender, 9 at the receiver (+1 being read).
        assert source["metrics"]["outputQueueLength"] == pytest.approx(10, abs=1)
        assert slow["metrics"]["inputQueueLength"] == pytest.approx(9, abs=0.5)
    else:
        assert source["subtasks"][0]["task_manager"] == slow["subtasks"][0]["task_manager"]
        for metric in ("inPoolUsage", "inputExclusiveBuffersUsage", "inputFloatingBuffersUsage"):
            assert slow["metrics"][metric] == 0


def test_throttled_source_leaves_everyone_idle() -> None:
    source, slow = run(slow_map(rate=200, map_parallelism=2), task_managers=2)
    for vertex in (source, slow):
        assert vertex["backpressure_level"] == "ok"
        assert vertex["metrics"]["backPressuredTimeMsPerSecond"] < 1
    assert source["metrics"]["idleTimeMsPerSecond"] > 990
    assert slow["metrics"]["idleTimeMsPerSecond"] == pytest.approx(500, abs=60)
    assert slow["metrics"]["numRecordsInPerSecond"] == pytest.approx(100, rel=0.05)


def test_a_cheap_bottleneck_holds_one_buffer_at_a_time() -> None:
    """A map at 2 us per record reads ~460 records per 32 KiB buffer: its chunks of up to
    10 ms of records stay within one buffer, as Flink's deserializer holds one, so the
    rest of the channel's 10 credits queue at the receiver (Appendix C: ~9), instead of
    being taken by the task ahead of their records."""
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(record_size=32).name("Seq").rebalance().map(cost="2us").name("Cheap")
        .slot_sharing_group("m").sink_to(DiscardingSink()))
    result = execute(env, duration=2, task_managers=2, seed=7).raise_for_status()
    cheap = result.vertex_summary("Cheap -> Sink: Writer")["metrics"]
    assert cheap["busyTimeMsPerSecond"] > 990 and cheap["numRecordsInPerSecond"] == pytest.approx(500_000, rel=0.01)
    assert cheap["inputQueueLength"] == pytest.approx(9, abs=0.6)  # taking ~5 buffers a chunk: 4


@pytest.mark.parametrize("records_per_buffer", [1, 2])
def test_the_buffer_being_read_goes_back_as_its_last_record_is_read(records_per_buffer: int) -> None:
    """Flink's deserializer recycles a buffer once its last record is read, before that
    record is processed: with one 5 ms record per buffer, its credit goes back as the record
    starts, so all 10 of the channel's buffers queue (the Appendix C ~9 +1 held is for a
    buffer of many records); with two, the buffer is held for one record of each two."""
    buffer_size = 4096
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(record_size=buffer_size // records_per_buffer - RECORD_OVERHEAD).name("Seq")
        .rebalance().map(cost="5ms").name("SlowMap").slot_sharing_group("slow").sink_to(DiscardingSink()))
    result = execute(env, duration=10, task_managers=2, seed=7,
                     network=NetworkConfig(buffer_size=buffer_size)).raise_for_status()
    slow = result.vertex_summary("SlowMap -> Sink: Writer")["metrics"]
    assert slow["numRecordsInPerSecond"] == pytest.approx(200, rel=0.02)
    assert slow["inputQueueLength"] == pytest.approx(10 - (records_per_buffer - 1) / records_per_buffer, abs=0.1)


def test_a_buffer_ending_inside_a_record_goes_back_after_its_last_whole_record_is_processed() -> None:
    """Records of ~3.05 buffers: every buffer but the first of a record ends with the start
    of the next. Flink's deserializer reads the record it completes as INTERMEDIATE, holds
    the buffer while that record is processed, and gives it back as it copies the start away
    (PARTIAL_RECORD). On a local channel the held buffer still counts against the source's
    subpartition, so the source writes its next record only when it is back: the map's
    queue holds 9 and the held one the pool's 10, with no overdraft buffer in use (Flink
    2.3, slow-map with 100 kB records: local map 8.6-9, source outPoolUsage 0.92; recycled
    at the record's start instead, the queue reached 12 on overdraft buffers)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(record_size=12_500).name("Seq").rebalance().map(cost="5ms").name("SlowMap") \
        .sink_to(DiscardingSink())
    result = execute(env, duration=10, task_managers=1, seed=7,
                     network=NetworkConfig(buffer_size=4096)).raise_for_status()
    source, slow = (result.vertex_summary(name)["metrics"] for name in ("Source: Seq", "SlowMap"))
    assert slow["numRecordsInPerSecond"] == pytest.approx(200, rel=0.02)
    assert slow["inputQueueLength"] == pytest.approx(9, abs=0.2)
    assert source["outPoolUsage"] <= 1.0


def test_a_buffer_ending_inside_a_record_is_held_while_the_task_waits_for_its_output() -> None:
    """A relay back-pressured by a slow map, reading 1 KiB records (31.9 to a 32 KiB
    buffer, so every buffer ends with the start of the next record) over a remote channel.
    Flink's deserializer gives such a buffer back as it copies that start away, at the
    input's next read (PARTIAL_RECORD): a task that stops for its output after the buffer's
    last whole record still holds it, and its queue holds the channel's other 9 credits.
    Flink 2.3 (a flat_map of 2 copies behind a source of 1 KiB records): 9.03. Given back
    as that last record was processed, the queue refilled to 10 whenever the relay stopped
    there: 9.5."""
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(record_size=1024).name("Seq").rebalance().flat_map(fan_out=2, cost="50us").name("Relay")
        .slot_sharing_group("relay").rebalance().map(cost="3ms").name("Slow").slot_sharing_group("slow")
        .sink_to(DiscardingSink()))
    result = execute(env, duration=10, task_managers=3, seed=7).raise_for_status()
    relay = result.vertex_summary("Relay")["metrics"]
    assert relay["backPressuredTimeMsPerSecond"] > 950
    assert relay["inPoolUsage"] == pytest.approx(1.0)
    assert relay["inputQueueLength"] == pytest.approx(9, abs=0.1)
