"""Regression tests of credit flow, as a maintainer of a Flink fork writes them with the
`credit_flow` harness: each pins one behaviour of Flink 2.3's network stack (the Flink
classes are named in each test) and fails if it changed."""

from __future__ import annotations

from shuffle.api.events import (AlignmentType, CancelCheckpointMarker, CheckpointBarrier, CheckpointOptions,
                                EndOfPartitionEvent)
from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig
from shuffle.harness.credit_flow import CreditFlowHarness

DATA = DataType.DATA_BUFFER
EVENT = DataType.EVENT_BUFFER
PRIORITY = DataType.PRIORITIZED_EVENT_BUFFER
ALIGNED = CheckpointBarrier(1, 0, CheckpointOptions())
UNALIGNED = CheckpointBarrier(1, 0, CheckpointOptions(alignment=AlignmentType.UNALIGNED))

# 2 exclusive buffers per channel (Flink's default) and one floating buffer per gate (the
# fewest the simulator takes): every credit is easy to count.
ONE_FLOATING = NetworkConfig(buffer_size=4096, floating_buffers_per_gate=1)


def credit_audit(h: CreditFlowHarness, channel: int) -> list[int]:
    """The producer's credit for a channel after each data buffer it sent, recounted from the
    trace (initial credit, AddCredits received, data buffers sent): independent of the
    reader's own counter, so a sender that skips the check shows here as a negative."""
    name = h.channel(channel).name
    credit, after_each = 0, []
    for event in h.trace.events:
        if event.get("channel") != name:
            continue
        if event["event"] == "partition_request":
            credit = event["initial_credit"]
        elif event["event"] == "credit_received":
            credit += event["credit"]
        elif event["event"] == "buffer_sent" and event["data_type"] == DATA.name:
            credit -= 1
            after_each.append(credit)
    return after_each


async def test_a_backlog_of_five_brings_floating_buffers_and_nothing_goes_without_credit(credit_flow):
    """RemoteInputChannel.onSenderBacklog: the first buffer's backlog 5 makes 5 + 2 required;
    one exclusive buffer is left, so 6 floating ones come from the gate's pool as one
    AddCredit(6); CreditBasedSequenceNumberingViewReader sends data only with credit."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    await h.emit_buffers(0, 7)  # 6 finished buffers visible, the 7th still being written
    await h.settle()
    assert [b["backlog"] for b in h.buffers_sent(0)] == [5, 4, 3, 2, 1, 0]
    assert h.credits_announced(0) == [6]
    receiver = h.receiver(0)
    assert (receiver.queued, receiver.required) == (6, 2)
    assert receiver.exclusive_free + receiver.floating_free == 2  # backlog 0 + initial credit
    assert credit_audit(h, 0) == [1, 0, 5, 4, 3, 2] and h.sender(0).credit == 2
    # the consumer reads everything: the 7th buffer goes once flushed, still within credit
    h.auto_consume(0)
    h.flush(0)
    await h.settle()
    assert min(credit_audit(h, 0)) >= 0 and len(h.buffers_sent(0)) == 7


async def test_a_slow_consumer_returns_one_credit_per_recycled_buffer_merged_while_unwritable(credit_flow):
    """BufferManager.recycle: a recycled buffer the channel still needs is one credit;
    CreditBasedPartitionRequestClientHandler builds AddCredit when it writes it, from
    getAndResetUnannouncedCredit, so credits made while the connection cannot be written go
    as one AddCredit with their sum."""
    h = await credit_flow(config=ONE_FLOATING)
    await h.emit_buffers(0, 6)
    h.flush(0)
    await h.settle()
    # 2 on the initial credit, 1 on the gate's only floating buffer; 3 wait for credit
    assert h.credits_announced(0) == [1]
    assert (h.receiver(0).queued, h.sender(0).credit, h.sender(0).backlog) == (3, 0, 3)

    h.consume(0, 1)  # the task reads one buffer: exactly one credit back
    await h.settle()
    assert h.credits_announced(0) == [1, 1]
    assert len(h.buffers_sent(0)) == 4 and h.sender(0).credit == 0

    h.set_writable(False, side="consumer")
    h.consume(0, 2)  # two recycled while the AddCredit cannot be written
    await h.settle()
    assert h.credits_announced(0) == [1, 1] and h.receiver(0).unannounced_credit == 2
    h.set_writable(True, side="consumer")
    await h.settle()
    assert h.credits_announced(0) == [1, 1, 2]
    assert len(h.buffers_sent(0)) == 6 and h.sender(0).credit == 0


async def test_the_backlog_sent_with_each_buffer_counts_the_data_buffers_queued_behind_it(credit_flow):
    """PipelinedSubpartition.getBuffersInBacklogUnsafe: finished data buffers only (an event
    in the queue is not counted), the buffer still being written only once flushed; the
    BufferResponse carries the backlog after its own buffer left the queue."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    await h.emit_buffers(0, 3)
    h.broadcast_event(CancelCheckpointMarker(1))
    await h.emit_buffers(0, 3)  # the last one is still being written
    assert h.sender(0).queue == (DATA,) * 3 + (EVENT,) + (DATA,) * 3
    assert h.sender(0).backlog == 5
    h.flush(0)
    assert h.sender(0).backlog == 6
    h.auto_consume(0)
    await h.settle()
    sent = [(b["data_type"], b["backlog"]) for b in h.buffers_sent(0)]
    assert sent == [(DATA.name, 5), (DATA.name, 4), (DATA.name, 3), (EVENT.name, 3),
                    (DATA.name, 2), (DATA.name, 1), (DATA.name, 0)]
    # the receiver requires the last backlog plus its initial credit
    assert h.receiver(0).required == 0 + 2 and h.sender(0).queue == ()


async def test_events_go_without_credit_while_data_waits_for_it(credit_flow):
    """CreditBasedSequenceNumberingViewReader: with no credit the reader is available only
    when the next buffer is an event, and only data buffers take credit; the queue stays FIFO
    (PipelinedSubpartition), so an event behind data waits for the data's credit."""
    h = await credit_flow(config=ONE_FLOATING)
    await h.emit_buffers(0, 3)
    h.flush(0)
    await h.settle()
    assert len(h.buffers_sent(0)) == 3 and h.sender(0).credit == 0

    h.broadcast_event(ALIGNED)  # at the head of the queue: goes at once, on no credit
    await h.settle()
    assert h.buffers_sent(0)[-1]["data_type"] == DataType.ALIGNED_CHECKPOINT_BARRIER.name
    assert h.sender(0).credit == 0 and h.sender(0).queue == ()
    h.resume_consumption(0)  # the aligned barrier blocked the subpartition: the task unblocks it
    await h.emit_buffers(0, 1)
    h.finish()  # EndOfPartition behind the data buffer
    await h.settle()
    assert h.sender(0).queue == (DATA, EVENT) and h.sender(0).credit == 0
    assert len(h.buffers_sent(0)) == 4

    h.consume(0, 1)  # one credit: the data buffer goes, then EndOfPartition on none
    await h.settle()
    assert [b["data_type"] for b in h.buffers_sent(0)[4:]] == [DATA.name, EVENT.name]
    assert h.sender(0).credit == 0 and h.sender(0).queue == ()
    assert credit_audit(h, 0) == [1, 0, 0, 0]
    assert isinstance(h.consume(0, 5)[-1].event, EndOfPartitionEvent)


async def test_an_unaligned_barrier_overtakes_queued_data_at_both_ends(credit_flow):
    """PipelinedSubpartition.add queues a priority event ahead of the data, and
    RemoteInputChannel.onBuffer puts it ahead of the buffers received; as an event it needs
    no credit."""
    h = await credit_flow(config=ONE_FLOATING)
    await h.emit_buffers(0, 6)
    h.flush(0)
    await h.settle()
    assert h.receiver(0).queue == (DATA,) * 3 and h.sender(0).queue == (DATA,) * 3
    assert h.sender(0).credit == 0

    h.set_writable(False, side="producer")  # hold what the producer sends, to look at its queue
    h.broadcast_event(UNALIGNED, is_priority=True)
    assert h.sender(0).queue == (PRIORITY,) + (DATA,) * 3
    h.set_writable(True, side="producer")
    await h.settle()
    assert h.sender(0).queue == (DATA,) * 3 and h.sender(0).credit == 0  # the data still waits
    assert h.receiver(0).queue == (PRIORITY,) + (DATA,) * 3
    first = h.consume(0, 1)[0]
    assert (first.data_type, first.event) == (PRIORITY, UNALIGNED)


async def test_an_announced_buffer_size_trims_the_next_buffer_builder(credit_flow):
    """PipelinedSubpartition.add returns the size the consumer announced (NewBufferSize, from
    its debloater) and BufferWritingResultPartition trims the new BufferBuilder to it, never
    below the rest of the record it starts with; the builder being written keeps its size."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    h.auto_consume(0)
    await h.emit(0, 1000, record_size=100)
    h.flush(0)
    await h.settle()
    h.announce_buffer_size(0, 1024)
    await h.settle()
    await h.emit(0, 5000, record_size=100)  # 3096 B fill the open builder, the rest goes in new ones
    h.flush(0)
    await h.settle()
    assert [b["bytes"] for b in h.buffers_sent(0)] == [1000, 3096, 1024, 880]
    await h.emit(0, 3000)  # one record: 144 B fill the open builder, 2856 B continue into the next
    h.flush(0)
    await h.settle()
    assert [b["bytes"] for b in h.buffers_sent(0)[4:]] == [144, 2856]


async def test_floating_buffers_move_to_the_channel_that_needs_them_when_a_backlog_drops(credit_flow):
    """One gate, two channels, two floating buffers. LocalBufferPool offers a recycled
    floating buffer to the channels waiting for one (BufferManager.notifyBufferAvailable);
    BufferManager.recycle gives a floating buffer back when an exclusive one returns to a
    channel that holds more than it requires (backlog + initial credit)."""
    h = await credit_flow(config=NetworkConfig(buffer_size=4096, floating_buffers_per_gate=2),
                          channels=2, one_gate=True)
    await h.emit_buffers(0, 4)
    h.flush(0)
    await h.settle()
    # backlog 3 asked for 5 free buffers: channel 0 took both floating ones and still waits
    assert h.credits_announced(0) == [2] and h.floating_pool_free == [0]
    assert [c.channel for c in h.consume(0, 2)] == [0, 0]  # its backlog is 0: it needs 2
    await h.settle()
    assert (h.receiver(0).required, h.receiver(0).exclusive_free, h.receiver(0).floating_free) == (2, 1, 1)

    await h.emit_buffers(1, 4)
    h.flush(1)
    await h.settle()
    assert h.credits_announced(1) == [] and h.receiver(1).required == 4  # waits for a floating buffer

    # channel 0's next buffer came in a floating buffer: recycled, it goes to channel 1
    assert [c.channel for c in h.consume(0, 1)] == [0]
    await h.settle()
    assert h.credits_announced(1) == [1] and h.floating_pool_free == [0]
    assert h.credits_announced(0) == [2, 2]

    assert [c.channel for c in h.consume(0, 2)] == [1, 0]
    await h.settle()
    # channel 0's last buffer was exclusive: back with it, channel 0 held 3 free buffers for 2
    # required and gave its floating one up; channel 1 (and its own exclusive one) took it
    assert (h.receiver(0).exclusive_free, h.receiver(0).floating_free) == (2, 0)
    assert h.credits_announced(0) == [2, 2] and h.credits_announced(1) == [1, 2]


async def test_a_waiting_channel_whose_backlog_dropped_passes_a_floating_buffer_on(credit_flow):
    """One gate, two channels, one floating buffer. Both wait for it (LocalBufferPool's
    listeners, first come first served); the first's backlog drops to 0 before it comes back,
    so BufferManager.notifyBufferAvailable declines it (free >= required) and the pool offers
    it to the next listener."""
    h = await credit_flow(config=ONE_FLOATING, channels=2, one_gate=True)
    await h.emit_buffers(1, 2)
    h.flush(1)
    await h.settle()
    # channel 1: backlog 1 asked for 3, it took the floating buffer and waits for another
    assert h.credits_announced(1) == [1] and h.receiver(1).queue == (DATA, DATA)
    await h.emit_buffers(0, 4)
    h.flush(0)
    await h.settle()
    # channel 0: backlog 3 asked for 5, the pool is empty: it waits too, behind channel 1
    assert h.credits_announced(0) == [] and h.receiver(0).required == 4

    # the task reads channel 1's exclusive buffer (one credit back), then channel 0's
    assert [c.channel for c in h.consume(0, 2)] == [1, 0]
    await h.settle()
    assert h.credits_announced(1) == [1, 1] and h.credits_announced(0) == [1]
    assert (h.receiver(1).required, h.receiver(1).exclusive_free, h.receiver(1).floating_free) == (2, 2, 0)

    # channel 1's floating buffer comes back: channel 1 has 2 free buffers for 2 required now
    # (backlog 0), so it declines it and channel 0 gets it
    assert [c.channel for c in h.consume(0, 1)] == [1]
    await h.settle()
    assert h.credits_announced(0) == [1, 1] and h.credits_announced(1) == [1, 1]
    assert h.receiver(1).floating_free == 0 and h.floating_pool_free == [0]


async def test_a_released_channel_gives_its_exclusive_buffers_back_to_the_global_pool(credit_flow):
    """RemoteInputChannel.releaseAllResources: BufferManager.releaseAllBuffers returns the
    exclusive segments, free or holding data, to the NetworkBufferPool, floating ones to the
    gate's pool; the producer drops the reader (CancelPartitionRequest). The other channel
    of the connection goes on."""
    h = await credit_flow(config=ONE_FLOATING, channels=2)
    await h.emit_buffers(0, 3)  # two received: one in an exclusive buffer, one in the floating one
    await h.settle()
    assert h.receiver(0).queued == 2 and h.floating_pool_free == [0, 1]
    free = h.network_buffers_free()
    h.release(0)
    await h.settle()
    assert h.network_buffers_free() == free + 2
    assert h.floating_pool_free == [1, 1] and h.sender(0).credit is None
    await h.emit_buffers(1, 3)
    await h.settle()
    assert h.receiver(1).queued == 2
