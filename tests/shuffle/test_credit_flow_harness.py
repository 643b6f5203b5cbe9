"""The credit-flow harness as its users drive it: the scenarios of Flink's credit-loop tests
it must express, determinism, and clear errors for misuse."""

from __future__ import annotations

import inspect
import json

import pytest

from shuffle import kernel
from shuffle.api.events import AlignmentType, CheckpointBarrier, CheckpointOptions, EndOfPartitionEvent
from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig
from shuffle.errors import RemoteError
from shuffle.harness.credit_flow import CreditFlowHarness

SMALL = NetworkConfig(buffer_size=4096)


async def _block_behind_a_barrier(h: CreditFlowHarness) -> None:
    """A buffer, an aligned barrier, two flushed buffers behind it; the consumer reads up to
    the barrier (PartitionRequestQueueTest.testEnqueueReaderByResumingConsumption)."""
    await h.emit_buffers(0, 1)
    h.broadcast_event(CheckpointBarrier(1, 0, CheckpointOptions()))
    await h.emit_buffers(0, 2)
    h.flush(0)
    await h.settle()
    assert [c.data_type for c in h.consume(0, 5)] == [DataType.DATA_BUFFER, DataType.ALIGNED_CHECKPOINT_BARRIER]
    await h.settle()


async def test_a_channel_blocked_by_an_aligned_barrier_sends_again_once_consumption_resumes(credit_flow):
    h = await credit_flow(config=SMALL)
    await _block_behind_a_barrier(h)
    # Blocked since the barrier left: the two buffers wait, reported as no backlog, and the
    # reader keeps its credit (initial credit 2: Flink resets it only without exclusive buffers).
    sender = h.sender(0)
    assert (sender.blocked, sender.queued, sender.backlog) == (True, 2, 0)
    assert h.receiver(0).queued == 0 and sender.credit > 0
    h.resume_consumption(0)
    await h.settle()
    assert not h.sender(0).blocked and h.receiver(0).queued == 2


async def test_without_exclusive_buffers_resuming_resets_credit_and_the_backlog_is_announced(credit_flow):
    """Flink: with no exclusive buffers the reader drops its credit on resumeConsumption, then
    announces its backlog (BacklogAnnouncement) for the consumer to grant floating buffers."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, exclusive_buffers_per_channel=0))
    assert h.sender(0).credit == 0 and h.trace.of("partition_request")[0]["initial_credit"] == 0
    await _block_behind_a_barrier(h)
    announced = len(h.credits_announced(0))
    backlogs = len(h.trace.of("backlog_announced"))
    h.resume_consumption(0)
    await h.settle()
    assert [(e["channel"], e["backlog"]) for e in h.trace.of("backlog_announced")[backlogs:]] == [
        (h.channel(0).name, 2)]
    assert h.credits_announced(0)[announced:] == [2]  # two floating buffers for it
    assert h.receiver(0).queued == 2 and h.sender(0).credit == 0


async def test_a_backlog_announcement_is_traced_with_the_backlog_flink_announces(credit_flow):
    """PartitionRequestQueueTest.testAnnounceBacklog: a reader without credit whose data
    becomes available announces the backlog; the consumer grants floating buffers for it."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, exclusive_buffers_per_channel=0))
    await h.emit_buffers(0, 3)  # two visible when the second is added: backlog 1 then
    await h.settle()
    assert [e["backlog"] for e in h.trace.of("backlog_announced")] == [1]
    # one floating buffer for it; the first buffer then tells of the second: one more
    assert h.credits_announced(0) == [1, 1] and h.receiver(0).queued == 2


async def test_resume_is_for_stalled_auto_consumption_and_says_what_unblocks_a_barrier(credit_flow):
    h = await credit_flow(config=SMALL)
    with pytest.raises(ValueError, match=r"channel 0 is not stalled.*resume_consumption\(0\)"):
        h.resume(0)


async def test_an_announced_buffer_size_reaches_the_producer_over_the_connection(credit_flow):
    h = await credit_flow(config=SMALL)
    h.announce_buffer_size(0, 1000)
    await h.settle()
    assert [e["size"] for e in h.trace.of("buffer_size_announced")] == [1000]
    await h.emit(0, 3000, record_size=100)
    h.flush(0)
    await h.settle()
    assert [e["bytes"] for e in h.buffers_sent(0)] == [1000, 1000, 1000]


async def test_sender_credit_is_none_where_no_credit_applies(credit_flow):
    """It read 0, as if out of credit, while buffers flowed without credit (flow_control="tcp")
    and after the consumer released the channel (no reader at the producer)."""
    tcp = await credit_flow(config=NetworkConfig(buffer_size=4096, flow_control="tcp"))
    await tcp.emit_buffers(0, 5)
    await tcp.settle()
    assert tcp.receiver(0).queued == 4 and tcp.sender(0).credit is None
    h = await credit_flow(config=SMALL)
    assert h.sender(0).credit == 2
    h.gate(0).close()
    await h.settle()
    assert h.sender(0).credit is None


@pytest.mark.parametrize("drive", [
    lambda h: h.settle(), lambda h: h.emit_buffers(0, 1), lambda h: h.consume(0), lambda h: h.flush(),
    lambda h: h.finish(), lambda h: h.set_writable(False), lambda h: h.resume_consumption(0),
])
async def test_driving_a_closed_harness_says_so(credit_flow, drive):
    """`settle` on a closed harness passed having run nothing; `emit` failed with 'Buffer pool
    has already been destroyed'."""
    h = await credit_flow(config=SMALL)
    await h.close()
    with pytest.raises(RuntimeError, match=r"^\w+\(\) on a closed harness"):
        drive(h)
    assert h.sender(0).queued == 0  # its state can still be read
    await h.close()  # closing again does nothing


@pytest.mark.parametrize("size", [0, -1, 1.5])
async def test_announcing_a_buffer_size_that_is_not_positive_is_refused_at_the_call(credit_flow, size):
    """It was sent, and the message's own check then failed the whole run from inside the
    client's writer at the next settle."""
    h = await credit_flow(config=SMALL)
    with pytest.raises(ValueError, match=f"announce_buffer_size: the size must be a positive number of bytes, "
                                         f"got {size}"):
        h.announce_buffer_size(0, size)
    await h.settle()


@pytest.mark.parametrize("drive, message", [
    (lambda h: h.settle(-1), "settle: seconds must be a number >= 0, got -1"),
    (lambda h: h.emit_buffers(0, -3), "emit_buffers: n must be a number >= 0, got -3"),
    (lambda h: h.emit(0, -10), "emit: nbytes must be a number >= 0, got -10"),
    (lambda h: h.consume(0, -1), "consume: n must be a number >= 0, got -1"),
])
async def test_a_negative_count_is_refused(credit_flow, drive, message):
    """settle(-1), emit_buffers(0, -3) and consume(0, -1) did nothing and said nothing: a
    test asserting on what followed passed for the wrong reason."""
    h = await credit_flow(config=SMALL)
    with pytest.raises(ValueError, match=f"^{message}$"):
        outcome = drive(h)  # consume refuses at the call, the async ones when awaited
        if inspect.isawaitable(outcome):
            await outcome


async def test_making_local_channels_unwritable_is_refused(credit_flow):
    """It did nothing: local channels have no connection."""
    h = await credit_flow(config=SMALL, local=True)
    with pytest.raises(ValueError, match="no connection to make unwritable"):
        h.set_writable(False)


def test_a_transport_on_the_wrong_kernel_says_which_kernel_it_needs():
    """Opened under trio, the simulated link failed with "'NoneType' object has no attribute
    'now'"; tcp in the sim kernel (credit_flow(transport="tcp")) with trio's "must be called
    from async context"."""
    async def open_it(transport: str) -> None:
        async with CreditFlowHarness.open(transport=transport):
            pass

    with pytest.raises(RuntimeError, match=r"transport='sim' runs on the sim kernel.*mode='sim'"):
        kernel.run(open_it, "sim", mode="realtime")
    with pytest.raises(RuntimeError, match=r"transport='tcp' .* realtime kernel.*mode='realtime'"):
        kernel.run(open_it, "tcp", mode="sim")


def test_the_same_script_gives_the_same_trace():
    async def script() -> str:
        async with CreditFlowHarness.open(config=NetworkConfig(buffer_size=1024, floating_buffers_per_gate=3),
                                          channels=3, one_gate=True) as h:
            h.auto_consume(0, 0.0003)
            h.auto_consume(2)
            for step in range(30):
                for channel in range(3):
                    if h.producer_available(channel):
                        await h.emit(channel, 700 + 13 * step, record_size=100)
                if step == 10:
                    h.broadcast_event(CheckpointBarrier(1, 0, CheckpointOptions()))
                if step % 7 == 0:
                    h.consume(1, 2)
                await h.settle(0.0005)
            h.stall(2)
            await h.settle(0.01)
            h.resume(2)
            h.flush()
            await h.settle(0.1)
            return json.dumps(h.trace.events)

    first = kernel.run(script, mode="sim")
    assert len(json.loads(first)) > 100
    assert kernel.run(script, mode="sim") == first


async def test_consume_tells_the_event_its_data_type_and_the_channel_it_came_from(credit_flow):
    """An unaligned barrier read back as a plain EVENT_BUFFER, with no way to tell it from
    EndOfPartition, nor which channel of a shared gate it came from."""
    h = await credit_flow(config=SMALL, channels=2, one_gate=True)
    barrier = CheckpointBarrier(1, 0, CheckpointOptions(alignment=AlignmentType.UNALIGNED))
    await h.emit_buffers(1, 2)
    h.flush(1)
    await h.settle()
    h.broadcast_event(barrier, is_priority=True)
    await h.settle()
    read = h.consume(0, 2)
    assert [(c.data_type, c.channel, c.event) for c in read] == [
        (DataType.PRIORITIZED_EVENT_BUFFER, 0, barrier), (DataType.PRIORITIZED_EVENT_BUFFER, 1, barrier)]
    assert [(c.data_type, c.channel, c.event) for c in h.consume(0, 5)] == [
        (DataType.DATA_BUFFER, 1, None), (DataType.DATA_BUFFER, 1, None)]
    assert [c.channel for c in h.consumed[1]] == [1, 1, 1]
    h.finish()
    await h.settle()
    assert {type(c.event) for c in h.consume(0, 2)} == {EndOfPartitionEvent}


async def test_the_states_show_what_is_queued_head_first(credit_flow):
    """Only counts were shown: a test could not see a priority event ahead of queued data."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, floating_buffers_per_gate=1))
    await h.emit_buffers(0, 4)
    h.flush(0)
    await h.settle()
    data, priority = DataType.DATA_BUFFER, DataType.PRIORITIZED_EVENT_BUFFER
    assert h.sender(0).queue == (data,) and h.receiver(0).queue == (data,) * 3
    h.set_writable(False, side="producer")
    h.broadcast_event(CheckpointBarrier(1, 0, CheckpointOptions(alignment=AlignmentType.UNALIGNED)),
                      is_priority=True)
    assert h.sender(0).queue == (priority, data)
    h.set_writable(True, side="producer")
    await h.settle()
    assert h.sender(0).queue == (data,) and h.receiver(0).queue == (priority,) + (data,) * 3
    assert h.receiver(0).queued == len(h.receiver(0).queue)


async def test_a_released_channel_returns_its_buffers_where_they_came_from(credit_flow):
    """Releasing a channel and reading the global pool took the stack's own objects
    (`h.channel(0).release_all_resources()`, `h.consumer.network_pool`): not in the docs."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, floating_buffers_per_gate=1), channels=2)
    await h.emit_buffers(0, 4)  # three received: in both exclusive buffers and the floating one
    h.flush(0)
    await h.settle()
    assert h.receiver(0).queued == 3 and h.floating_pool_free == [0, 1]
    free = h.network_buffers_free()
    h.release(0)
    await h.settle()
    assert h.network_buffers_free() == free + 2  # both exclusive buffers, free or holding data
    assert h.floating_pool_free == [1, 1] and h.sender(0).credit is None
    assert h.network_buffers_free("producer") == h.producer.network_pool.num_available_segments
    with pytest.raises(ValueError, match="side must be 'consumer' or 'producer', not 'gate'"):
        h.network_buffers_free("gate")


def test_every_public_operation_of_the_harness_says_what_it_does():
    """`help(CreditFlowHarness)` showed bare signatures for broadcast_event, finish, sender,
    receiver and buffers_sent (a list of dicts: which keys?)."""
    public = [name for name in vars(CreditFlowHarness) if not name.startswith("_")]
    assert [name for name in public if not inspect.getdoc(getattr(CreditFlowHarness, name))] == []


async def test_resuming_a_channel_no_barrier_blocked_fails_it_as_flink_does(credit_flow):
    """It was accepted and did nothing: a test resuming the wrong channel passed."""
    h = await credit_flow(config=SMALL)
    h.resume_consumption(0)
    await h.settle()
    with pytest.raises(RemoteError, match="IllegalStateError: Should be blocked by checkpoint"):
        h.consume(0)
