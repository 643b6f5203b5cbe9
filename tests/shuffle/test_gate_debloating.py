"""Debloating through the stack (spec 4.6 triggerDebloating, 6.2): what the gate counts as
buffers in use, what it measures, and how a new size reaches the producer's buffers."""

from __future__ import annotations

import pytest

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.java_int import INT_MAX

DEBLOAT = NetworkConfig(buffer_size=4096, debloat=True, debloat_samples=1, debloat_threshold_percentages=0)


async def test_producers_start_at_the_starting_size_only_when_debloating(credit_flow):
    on = await credit_flow(config=DEBLOAT)
    off = await credit_flow(config=NetworkConfig(buffer_size=4096))
    for h, size in ((on, 1024), (off, INT_MAX)):
        assert h.partitions[0].subpartitions[0].desired_buffer_size == size
        assert h.gate(0).buffer_debloater is None or h.gate(0).buffer_debloater.last_buffer_size == 1024
    assert off.gate(0).buffer_debloater is None
    await on.emit(0, 3000, record_size=100)
    on.flush(0)
    await on.settle()
    assert [e["bytes"] for e in on.buffers_sent(0)] == [1024, 1024, 952]


@pytest.mark.parametrize("local", [False, True], ids=["remote", "local"])
async def test_an_announced_size_cuts_the_producers_next_buffer(credit_flow, local):
    h = await credit_flow(config=DEBLOAT, local=local)
    h.channel(0).announce_buffer_size(300)
    await h.settle()
    sub = h.partitions[0].subpartitions[0]
    assert sub.desired_buffer_size == 300
    await h.emit(0, 1000, record_size=100)
    await h.emit(0, 700)  # one record: a buffer never cuts the rest of the record in progress
    h.flush(0)
    await h.settle()
    assert [c.size for c in h.consume(0, 10)] == [300, 300, 300, 300, 500]
    await h.emit(0, 900, record_size=100)
    await h.emit(0, 700)  # a new buffer starting with a new record holds all of it
    h.flush(0)
    await h.settle()
    assert [c.size for c in h.consume(0, 10)] == [300, 300, 300, 700]
    events = h.trace.of("buffer_size_announced")
    assert [(e["channel"], e["size"]) for e in events] == [(h.channel(0).name, 300)]


async def test_buffers_in_use_of_a_remote_channel_are_queued_plus_floating_beyond_initial_credit(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, debloat=True))
    await h.emit_buffers(0, 6)
    await h.settle()
    receiver, sender = h.receiver(0), h.sender(0)
    assert receiver.queued > 0
    assert h.channel(0).buffers_in_use_count == receiver.queued + receiver.required - receiver.initial_credit
    assert receiver.required - receiver.initial_credit == sender.backlog


async def test_buffers_in_use_of_a_local_channel_are_the_producers_queue(credit_flow):
    h = await credit_flow(config=DEBLOAT, local=True)
    await h.emit_buffers(0, 3)
    assert h.channel(0).buffers_in_use_count == h.sender(0).queued > 0


async def test_trigger_debloating_asks_for_target_times_throughput_over_buffers_in_use(credit_flow):
    h = await credit_flow(config=DEBLOAT)
    gate = h.gate(0)
    await h.emit(0, 4096, record_size=256)  # four buffers of the starting size, 1 KiB
    h.flush(0)
    await h.settle()
    gate.throughput_calculator.calculate_throughput()  # start a fresh measurement
    [consumed] = h.consume(0, 1)
    await kernel.sleep(0.5)  # half a second with data still queued
    throughput = consumed.size * 2
    in_use = gate.buffers_in_use_count
    gate.trigger_debloating()
    expected = round(throughput / in_use)  # alpha = 1: the EMA is the instant size
    assert expected > DEBLOAT.min_segment_size
    assert gate.buffer_debloater.last_buffer_size == expected
    assert gate.buffer_debloater.last_estimated_time_to_consume_ms == expected * in_use * 1000 // throughput
    await h.settle()
    assert h.partitions[0].subpartitions[0].desired_buffer_size == expected


async def test_time_without_data_does_not_lower_the_throughput(credit_flow):
    h = await credit_flow(config=DEBLOAT)
    gate = h.gate(0)
    await h.emit(0, 2048, record_size=1024)  # two buffers of the starting size
    h.flush(0)
    await h.settle()
    gate.throughput_calculator.calculate_throughput()
    assert len(h.consume(0, 2)) == 2
    await kernel.sleep(0.1)
    assert h.consume(0, 1) == []  # empty: the measurement pauses here
    await kernel.sleep(10)
    assert gate.throughput_calculator.calculate_throughput() == 2 * 1024 * 10


async def test_a_finished_gate_does_not_debloat(credit_flow):
    h = await credit_flow(config=DEBLOAT)
    h.finish()
    await h.settle()
    h.consume(0, 5)
    assert h.gate(0).is_finished
    h.gate(0).trigger_debloating()
    assert h.trace.of("buffer_size_announced") == []


async def test_a_broadcast_buffer_takes_the_smallest_size_any_consumer_asked_for(credit_flow):
    h = await credit_flow(config=DEBLOAT, channels=2)
    h.channel(0).announce_buffer_size(500)
    h.channel(1).announce_buffer_size(300)
    await h.settle()
    await h.partitions[0].broadcast_record(bytes(1000), 100)
    h.flush()
    await h.settle()
    for channel in (0, 1):
        assert [c.size for c in h.consume(channel, 10)] == [300, 300, 300, 100]


async def test_a_new_size_goes_to_every_open_channel_of_the_gate_and_skips_released_ones(credit_flow):
    # CreditBasedPartitionRequestClientHandlerTest.testAnnounceBufferSize (one NewBufferSize per
    # channel, in channel order) and SingleInputGate.announceBufferSize's isReleased filter (a
    # released channel would refuse: "Channel released")
    h = await credit_flow(config=DEBLOAT, channels=3, one_gate=True)
    gate = h.gate(0)
    for channel in (0, 2):
        await h.emit(channel, 4096, record_size=256)
    h.flush()
    await h.settle()
    h.channel(1).release_all_resources()
    gate.throughput_calculator.calculate_throughput()
    h.consume(0, 1)
    await kernel.sleep(0.5)
    gate.trigger_debloating()
    await h.settle()
    size = gate.buffer_debloater.last_buffer_size
    assert [(e["channel"], e["size"]) for e in h.trace.of("buffer_size_announced")] == [
        (h.channel(0).name, size), (h.channel(2).name, size)]
