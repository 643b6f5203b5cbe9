"""LocalInputChannel: what it reports (spec 4.4, 7.3)."""

from shuffle.config import NetworkConfig


async def test_local_channel_reports_the_producer_queue_as_input_queue_length(credit_flow):
    # Spec 7.3 / LocalInputChannel.unsynchronizedGetNumberOfQueuedBuffers: the view's queue
    # (FLINK-12576 fixed the old 0); only the buffer *usages* stay 0 for local channels.
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), local=True)
    await h.emit_buffers(0, 3)
    await h.settle()
    assert h.sender(0).queued == 3
    assert h.gates[0].input_queue_length == 3
    assert h.gates[0].floating_buffers_usage()[0] == 0
    # ... and its queued bytes: Flink's LocalInputChannel does not override the base
    # channel's unsynchronizedGetSizeOfQueuedBuffers (0); the bytes show at the producer.
    assert h.gates[0].input_queue_size == 0
    assert h.targets[0][0].output_queue_size > 0
