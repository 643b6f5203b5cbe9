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


# -- Flink's LocalInputChannelTest, ported -------------------------------------------------


async def test_a_released_local_channel_reads_nothing_and_a_released_view_cancels(credit_flow):
    # Flink: LocalInputChannelTest.testGetNextAfterPartitionReleased
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), local=True)
    partition, index = h.targets[0]
    channel = h.gates[0].channels[0]
    assert channel.get_next_buffer() is None
    partition.subpartitions[index].release()
    with pytest.raises(CancelTaskError, match=r"^Consumed partition PipelinedSubpartitionView\(index: 0\) "
                                              r"of ResultPartition partition-0 has been released\.$"):
        channel.get_next_buffer()
    channel.release_all_resources()
    assert channel.get_next_buffer() is None
    assert channel.queue_length == 0 and channel.buffers_in_use_count == 0


@pytest.mark.parametrize("call", ["resume_consumption", "acknowledge_all_records_processed", "announce_buffer_size"])
async def test_a_released_local_channel_refuses_to_talk_to_its_producer(credit_flow, call):
    # Flink: LocalInputChannelTest.testUnblockReleasedChannel and testAnnounceBufferSize
    # (resumeConsumption, acknowledgeAllRecordsProcessed, announceBufferSize: "Channel released.")
    from shuffle.errors import IllegalStateError

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), local=True)
    channel = h.gates[0].channels[0]
    channel.announce_buffer_size(1024)  # fine while the channel is open
    channel.release_all_resources()
    args = (12,) if call == "announce_buffer_size" else ()
    with pytest.raises(IllegalStateError, match=r"^Channel released\.$"):
        getattr(channel, call)(*args)


async def test_resuming_a_blocked_local_channel_queues_it_with_its_data(credit_flow):
    # Flink: LocalInputChannelTest.testEnqueueAvailableChannelWhenResuming
    from shuffle.api.events import CheckpointBarrier, CheckpointOptions

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), local=True)
    gate, partition = h.gates[0], h.targets[0][0]
    assert gate.poll_next() is None
    partition.broadcast_event(CheckpointBarrier(1, 1, CheckpointOptions()))  # aligned: blocks the subpartition
    assert isinstance(gate.poll_next().event, CheckpointBarrier)
    await h.emit_buffers(0, 1)
    h.flush(0)
    await h.settle()
    assert gate.poll_next() is None  # blocked until resumed
    gate.channels[0].resume_consumption()
    result = gate.poll_next()
    assert result is not None and result.is_buffer
    result.buffer.recycle()


async def test_a_local_channel_notifies_its_gate_once_its_view_exists_data_or_not(credit_flow):
    # Flink's LocalInputChannel.requestSubpartitions calls notifyDataAvailable as soon as the
    # view is created: the gate queues the channel and its first poll finds nothing.
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), local=True)
    gate = h.gates[0]
    assert gate.is_available()
    assert gate.poll_next() is None and not gate.is_available()
