"""LocalInputChannel: what it reports (spec 4.4, 7.3)."""

import pytest

from shuffle.config import NetworkConfig
from shuffle.errors import CancelTaskError


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


async def test_a_local_channel_polled_after_its_producer_released_the_subpartition_is_cancelled(credit_flow):
    # Flink: PipelinedSubpartition.release() releases its view without notifying it, and
    # the view's isReleased() asks its parent; LocalInputChannel.getNextBuffer then throws
    # CancelTaskException instead of returning nothing.
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), local=True)
    partition, index = h.targets[0]
    subpartition = partition.subpartitions[index]
    channel = h.gates[0].channels[0]
    subpartition.release()
    assert subpartition.read_view.is_released
    with pytest.raises(CancelTaskError):
        channel.get_next_buffer()
