"""The credit loop, rule by rule (spec 3.4-3.6, 4.2-4.3), through the credit-flow harness."""

from shuffle import kernel
from shuffle.api.events import CancelCheckpointMarker
from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig

SMALL = NetworkConfig(buffer_size=4096)


def lend_all_floating_buffers(h):
    """Take the gate's floating buffers away, so the channel has only its exclusive ones."""
    pool = h.gates[0].buffer_pool
    return [pool.request_buffer() for _ in range(pool.num_buffers)]


def give_back(buffers):
    for buffer in buffers:
        buffer.recycle()


async def test_partition_request_carries_initial_credit(credit_flow):
    h = await credit_flow(config=SMALL)
    (request,) = h.trace.of("partition_request")
    assert request["initial_credit"] == 2
    assert h.sender(0).credit == 2
    assert h.receiver(0) .exclusive_free == 2 and h.receiver(0).initial_credit == 2


async def test_each_data_buffer_costs_one_credit_and_sending_stops_at_zero(credit_flow):
    h = await credit_flow(config=SMALL)
    hog = lend_all_floating_buffers(h)
    await h.emit_buffers(0, 5)
    await h.settle()
    assert len(h.buffers_sent(0)) == 2
    assert h.sender(0).credit == 0
    assert h.receiver(0).queued == 2
    assert h.sender(0).backlog == 2  # buffers 3 and 4 wait (5 is still being written)
    give_back(hog)


async def test_backlog_drives_floating_requests_and_one_add_credit(credit_flow):
    h = await credit_flow(config=SMALL)
    await h.emit_buffers(0, 8)
    await h.settle()
    sent = h.buffers_sent(0)
    # The first buffer announced a backlog of 6 (7 visible, minus itself); the receiver then
    # aimed for backlog + initial credit = 8 free buffers: 7 floating ones, one AddCredit(7).
    assert sent[0]["backlog"] == 6
    assert h.credits_announced(0)[0] == 7
    assert [e["seq"] for e in sent] == list(range(len(sent)))
    assert len(sent) == 7 and h.receiver(0).queued == 7


async def test_unannounced_credit_is_coalesced(credit_flow):
    h = await credit_flow(config=SMALL)
    hog = lend_all_floating_buffers(h)
    await h.emit_buffers(0, 4)
    await h.settle()
    assert h.sender(0).credit == 0
    # Two exclusive buffers recycled before the client's writer runs: one AddCredit(2).
    h.consume(0, 2)
    assert h.receiver(0).unannounced_credit == 2
    await h.settle()
    assert h.credits_announced(0) == [2]
    give_back(hog)


async def test_recycled_exclusive_returns_a_floating_buffer_when_above_required(credit_flow):
    h = await credit_flow(config=SMALL)
    await h.emit_buffers(0, 3)
    await h.settle()
    # Buffer 1 (exclusive, backlog 1 -> required 3, 2 floating obtained), buffer 2 (floating).
    before = h.receiver(0)
    assert (before.exclusive_free, before.floating_free, before.required) == (1, 1, 2)
    pool_free = h.floating_pool_free[0]
    h.consume(0)  # recycles the exclusive buffer: available 3 > required 2
    after = h.receiver(0)
    assert (after.exclusive_free, after.floating_free) == (2, 0)
    assert h.floating_pool_free[0] == pool_free + 1
    assert after.unannounced_credit == 0  # no credit for it


async def test_recycled_floating_buffer_goes_to_a_waiting_channel(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, floating_buffers_per_gate=1), channels=1)
    await h.emit_buffers(0, 6)
    await h.settle()
    rx = h.receiver(0)
    assert rx.required > rx.exclusive_free + rx.floating_free
    assert h.channel(0).buffer_manager.is_waiting_for_floating_buffers
    announced = sum(h.credits_announced(0))
    h.consume(0, 3)  # among them the floating buffer: handed straight back to the waiting channel
    await h.settle()
    assert sum(h.credits_announced(0)) > announced


async def test_events_cost_no_credit(credit_flow):
    h = await credit_flow(config=SMALL)
    hog = lend_all_floating_buffers(h)
    await h.emit_buffers(0, 3)
    await h.settle()
    assert h.sender(0).credit == 0
    h.broadcast_event(CancelCheckpointMarker(1))
    await h.settle()
    # Out of credit, the marker still cannot overtake the queued data buffer...
    h.consume(0, 2)
    await h.settle()
    kinds = [c.data_type for c in h.consume(0, 5)]
    assert DataType.EVENT_BUFFER in kinds
    event_sends = [e for e in h.buffers_sent(0) if e["data_type"] == "EVENT_BUFFER"]
    assert len(event_sends) == 1
    give_back(hog)


async def test_event_is_sent_with_zero_credit(credit_flow):
    h = await credit_flow(config=SMALL)
    hog = lend_all_floating_buffers(h)
    await h.emit_buffers(0, 2)
    h.flush(0)
    await h.settle()
    assert h.sender(0).credit == 0 and h.sender(0).queued == 0
    h.broadcast_event(CancelCheckpointMarker(7))
    await h.settle()
    assert h.buffers_sent(0)[-1]["data_type"] == "EVENT_BUFFER"
    assert h.sender(0).credit == 0
    give_back(hog)


async def _drive_two_producers(h, rounds: int) -> None:
    """Both upstream tasks produce while they can; only channel 1's consumer reads."""
    h.auto_consume(1)
    with kernel.fail_after(10):
        for _ in range(rounds):
            for channel in (0, 1):
                if h.producer_available(channel):
                    await h.emit_buffers(channel, 1)
            await h.settle(0.001)
        await h.settle()


async def test_a_channel_out_of_credit_does_not_stop_the_others(credit_flow):
    h = await credit_flow(config=SMALL, channels=2, separate_producers=True)
    await _drive_two_producers(h, 40)
    assert h.sender(0).credit == 0 and not h.producer_available(0)
    assert len(h.consumed[1]) >= 38  # channel 1 kept flowing on the same connection
    assert len(h.consumer.connection_manager._clients) == 1  # one shared connection


async def test_head_of_line_blocking_without_credit(credit_flow):
    cfg = NetworkConfig(buffer_size=4096, flow_control="tcp", send_window=16 * 1024)
    h = await credit_flow(config=cfg, channels=2, separate_producers=True)
    await _drive_two_producers(h, 40)
    # Channel 0 used up its receiver's buffers; the reader stopped reading the connection,
    # the socket window filled, and channel 1 stopped with it.
    stalled = len(h.consumed[1])
    assert stalled < 20
    assert not h.producer_available(1)
    h.auto_consume(0)  # the slow consumer catches up: everything flows again
    await _drive_two_producers(h, 20)
    assert len(h.consumed[1]) > stalled + 10


async def test_local_channel_uses_no_credit_and_no_receiver_buffers(credit_flow):
    h = await credit_flow(config=SMALL, local=True)
    await h.emit_buffers(0, 3)
    h.flush(0)
    await h.settle()
    assert h.sender(0).credit is None
    assert h.trace.of("credit_announced") == []
    assert len(h.consume(0, 10)) == 3
    assert h.gates[0].exclusive_buffers_usage() == (0, 0)


async def test_records_arrive_in_order_across_buffers(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=256), channels=2)
    h.auto_consume(0)
    h.auto_consume(1)
    values = [(i, "x" * (i % 50)) for i in range(300)]
    await h.emit_values(0, values)
    await h.emit_values(1, values[::-1])
    h.finish()
    await h.settle(1.0)
    assert h.received[0] == values and h.received[1] == values[::-1]


async def test_nothing_is_pulled_while_the_connection_is_unwritable_and_credit_merges(credit_flow):
    """Flink checks writability before it takes a reader off the queue or builds an AddCredit:
    while the consumer's connection is congested the reader keeps its credit and buffers stay
    queued at the producer; credit recycled meanwhile leaves as one AddCredit."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, send_window=4096))
    lent = lend_all_floating_buffers(h)  # only the two exclusive buffers take data
    await h.emit_buffers(0, 4)  # three visible: two go out, one waits for credit
    await h.settle()
    assert h.receiver(0).queued == 2 and h.sender(0).credit == 0 and h.sender(0).backlog == 1
    h.set_writable(False, side="consumer")
    h.consume(0, 2)  # two exclusive buffers come back: two credits to announce
    await h.settle()
    assert h.credits_announced(0) == []
    assert h.channel(0).unannounced_credit == 2
    h.set_writable(True, side="consumer")
    await h.settle()
    assert h.credits_announced(0) == [2]
    assert h.receiver(0).queued == 1  # the third buffer followed on the merged credit
    give_back(lent)


async def test_an_unwritable_producer_connection_keeps_readers_queued_with_their_credit(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    h.set_writable(False, side="producer")
    await h.emit_buffers(0, 3)
    await h.settle()
    assert h.receiver(0).queued == 0
    assert h.sender(0).credit == 2 and h.sender(0).queued == 3  # nothing pulled, credit kept
    h.set_writable(True, side="producer")
    await h.settle()
    assert h.receiver(0).queued == 2 and h.sender(0).queued == 1  # the visible two went out


async def test_a_new_buffer_is_trimmed_to_the_announced_size_but_holds_the_rest_of_the_record(credit_flow):
    """Flink's resizeBuffer: a debloated size applies to new buffers, but a buffer keeps
    room for the record it starts with, whole or the rest of it (no 256-byte floor)."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    partition, subpartition = h.targets[0]
    partition.subpartitions[subpartition].set_desired_buffer_size(100)
    await h.emit(0, 150)  # a new buffer for a new record: room for all 150 bytes
    await h.emit(0, 1000)  # 1000 bytes in a new buffer of 1000
    await h.emit(0, 30)  # a new buffer of 100 bytes ...
    await h.emit(0, 120)  # ... takes 70 of this record; the next one holds the other 50
    h.flush(0)
    await h.settle()
    assert [event["bytes"] for event in h.buffers_sent(0)] == [150, 1000, 100, 50]


async def test_channels_of_one_gate_share_its_floating_buffers(credit_flow):
    """Flink's gate: floating buffers go to whichever channel announces backlog first."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, floating_buffers_per_gate=4), channels=2,
                          one_gate=True)
    assert h.gate(0) is h.gate(1) and len(h.gates) == 1
    await h.emit_buffers(0, 8)  # channel 0 has a backlog: it takes every floating buffer
    await h.settle()
    assert h.receiver(0).queued == 6  # 2 exclusive + 4 floating
    await h.emit_buffers(1, 8)
    await h.settle()
    assert h.receiver(1).queued == 2  # only its exclusive buffers: the gate has no floating left
    assert h.receiver(1).required > 2 + h.receiver(1).floating_free  # it waits for floating buffers
    h.consume(1, 8)  # polls the shared gate: buffers come from both channels, filed per channel
    assert len(h.consumed[0]) + len(h.consumed[1]) == 8


async def test_a_channel_the_harness_does_not_have_is_named(credit_flow):
    """`h.sender(-1)` would read the last channel; `h.consume(3)` failed with a bare 'list index out of range'."""
    import pytest

    h = await credit_flow(channels=2)
    for call in (lambda: h.sender(-1), lambda: h.consume(2), lambda: h.consume(channel=2), lambda: h.receiver(5),
                 lambda: h.emit_buffers(2, 1)):
        with pytest.raises(IndexError, match=r"^no channel (-1|2|5): the harness has 2 channel\(s\), 0 to 1$"):
            call()
    h.flush()  # no channel: every channel
    await h.emit_buffers(1, 1)
    assert h.sender(1).queued == 1
