"""Flink 1.x's floating-only receivers (`exclusive_buffers_per_channel = 0`, FLINK-16641):
a buffer whose data all left in a flushed slice and that an event then finishes (Flink's
broadcastEvent finishes the open builders) has nothing left to read, yet counts in the
backlog and goes out as an empty buffer on the channel's one credit, while the receiver
keeps the floating buffer it took for it. From then on the receiver holds a free buffer
the producer has no credit for, and the next data waits for good. This is Flink's logic
(PipelinedSubpartition.pollBuffer, CreditBasedSequenceNumberingViewReader.getNextBuffer,
RemoteInputChannel.onEmptyBuffer, BufferManager.requestFloatingBuffers), modelled as it
is; an aligned barrier, which makes the receiver give its floating buffers back, would
clear it (README, "Scenario files")."""

from shuffle.api.events import CancelCheckpointMarker
from shuffle.config import NetworkConfig

BUFFER = 4096


def sent(h) -> list[tuple[str, int]]:
    return [(b["data_type"], b["bytes"]) for b in h.buffers_sent(0)]


async def test_an_empty_finished_buffer_takes_the_only_credit_and_the_channel_stalls(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=BUFFER, exclusive_buffers_per_channel=0), channels=1)
    await h.emit(0, 2100, 21)  # 100 records, the buffer open
    h.flush(0)
    await h.settle()
    h.consume(0, 1)  # the slice of all 2,100 bytes, read and recycled
    h.broadcast_event(CancelCheckpointMarker(1))  # finishes the buffer: nothing left to read in it
    await h.settle()
    assert sent(h) == [("DATA_BUFFER", 2100), ("DATA_BUFFER", 0), ("EVENT_BUFFER", 12)]
    h.consume(0, 1)
    assert h.receiver(0).floating_free == 1  # the buffer taken for the empty one, kept
    await h.emit(0, 2100, 21)
    h.flush(0)  # backlog 1, announced: the receiver has a free buffer for it, the producer no credit
    await h.settle(1.0)
    assert sent(h)[3:] == []  # it never leaves
    assert h.sender(0).credit == 0 and h.sender(0).backlog == 1
    receiver = h.receiver(0)
    assert (receiver.floating_free, receiver.required, receiver.unannounced_credit) == (1, 1, 0)
