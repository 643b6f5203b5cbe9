"""Flink's CheckpointedInputGateTest, the cases we model: a gate of remote channels read
through CheckpointedInputGate by an alternating barrier handler, and what its channels
persist. Not ported: testUpstreamResumedUponEndOfRecovery (recovery of in-flight data and
its EndOfChannelStateEvent are not modelled) and testPriorityBeforeClose (a race between the
task thread and a canceling thread; the sim has one thread)."""

from __future__ import annotations

import pytest

from shuffle.api.events import AlignmentType, CheckpointBarrier, CheckpointOptions
from shuffle.buffer.buffer import Buffer, MemorySegment
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.channel_state import ChannelStateWriter
from shuffle.config import NetworkConfig
from shuffle.consumer.remote_input_channel import RemoteInputChannel
from shuffle.consumer.single_input_gate import SingleInputGate
from shuffle.serialization.event_serializer import data_type_for_event, serialize_event
from taskmgr.checkpointing.checkpointed_input_gate import CheckpointedInputGate
from taskmgr.checkpointing.single_checkpoint_barrier_handler import SingleCheckpointBarrierHandler

from barrier_fakes import Clock, FakeTask

UNALIGNED = CheckpointOptions(alignment=AlignmentType.UNALIGNED)


class _Client:
    """The channels' connection: sends nothing."""

    def __getattr__(self, name):
        return lambda *args: None


class RecordingWriter(ChannelStateWriter):
    """Counts the input buffers added per checkpoint and channel (Flink's RecordingChannelStateWriter)."""

    def __init__(self) -> None:
        super().__init__()
        self.added: dict[tuple[int, object], int] = {}

    def add_input_data(self, checkpoint_id, channel, data) -> None:
        chunks = list(data)
        self.added[checkpoint_id, channel] = self.added.get((checkpoint_id, channel), 0) + len(chunks)
        super().add_input_data(checkpoint_id, channel, chunks)


class WriterTask(FakeTask):
    def __init__(self, writer: ChannelStateWriter) -> None:
        super().__init__([])
        self.writer = writer

    def init_inputs_checkpoint(self, barrier) -> None:
        self.writer.start(barrier.id)


class Harness:
    """`channels` remote channels of one gate, fed by hand as Flink's test feeds onBuffer."""

    async def setup(self, channels: int) -> None:
        pool = NetworkBufferPool(channels * 3, 64)
        self.gate = SingleInputGate(0, "consumer", NetworkConfig(buffer_size=64), pool)
        self.channels = [RemoteInputChannel(self.gate, i, "partition", i, "producer", 2, i) for i in range(channels)]
        for channel in self.channels:
            self.gate.add_channel(channel)
        self.gate.buffer_pool = pool.create_buffer_pool(channels, channels)
        self.writer = RecordingWriter()
        self.gate.set_channel_state_writer(self.writer)
        for channel in self.channels:
            await channel.setup()
            channel.client = _Client()
        self.task = WriterTask(self.writer)
        clock = Clock()
        handler = SingleCheckpointBarrierHandler.alternating(self.task, [self.gate], channels, clock, clock.register)
        self.input = CheckpointedInputGate([self.gate], input_index=0, handler=handler)
        self._sequence = [0] * channels

    def enqueue(self, channel: int, buffer: Buffer) -> None:
        self.channels[channel].on_buffer(buffer, self._sequence[channel], 0)
        self._sequence[channel] += 1

    def data(self, channel: int) -> None:
        buffer = Buffer.of_segment(MemorySegment(64), lambda segment: None, 1)
        buffer.ref.segment.adopt(b"x")
        self.enqueue(channel, buffer)

    def barrier(self, channel: int, checkpoint_id: int) -> None:
        """An unaligned barrier, which the producer sent as a priority event."""
        barrier = CheckpointBarrier(checkpoint_id, checkpoint_id, UNALIGNED)
        self.enqueue(channel, Buffer.of_event(serialize_event(barrier), data_type_for_event(barrier, True)))

    def poll(self) -> bool:
        """CheckpointedInputGate.pollNext: the next buffer or event, events to the handler."""
        result = self.input.poll_next()
        if result is None:
            return False
        if result.event is not None:
            self.input.handle_event(result)
        else:
            result.buffer.recycle()
        return True

    def persisted(self, checkpoint_id: int) -> list[int]:
        return [self.writer.added.get((checkpoint_id, c.channel_state_key), 0) for c in self.channels]


@pytest.mark.parametrize("drain_gate", [False, True], ids=["testPersisting", "testPersistingWithDrainingTheGate"])
async def test_persisting_ignores_an_obsolete_barrier_received_after_a_newer_one(sim_kernel, drain_gate):
    # testPersisting (FLINK-21104): checkpoint 2's barrier comes before the obsolete barrier
    # of checkpoint 1, which must neither trigger, nor cancel, nor stop any persisting
    h = Harness()
    await h.setup(3)
    h.data(0), h.barrier(0, 2), h.data(0)
    h.data(1), h.barrier(1, 1), h.data(1)
    h.data(2)
    assert h.task.triggered() == []
    h.poll()
    assert h.task.triggered() == [2]
    assert h.persisted(2) == [1, 2, 1]

    def drain() -> None:
        while drain_gate and h.poll():
            pass

    h.data(0), h.data(1), h.data(2)
    drain()
    assert h.persisted(2) == [1, 3, 2]
    h.barrier(1, 2), h.data(1)
    h.barrier(2, 1), h.data(2)  # another obsolete barrier: ignored
    drain()
    assert h.persisted(2) == [1, 3, 3]
    h.barrier(2, 2), h.data(2)
    drain()
    assert h.persisted(2) == [1, 3, 3]
    assert h.task.triggered() == [2] and h.task.aborted() == []
