"""Output-side in-flight data of unaligned and timeoutable barriers in a subpartition
(Flink's `PipelinedSubpartition` priority barrier and `alignedBarrierTimeout`, and the
`ChannelStateWriter` output futures that keep a checkpoint open until they resolve)."""

from shuffle import kernel
from shuffle.api.events import AlignmentType, CheckpointBarrier, CheckpointOptions
from shuffle.buffer.buffer import MemorySegment
from shuffle.buffer.buffer_builder import BufferBuilder, BufferConsumer
from shuffle.buffer.data_type import DataType
from shuffle.channel_state import ChannelStateWriter
from shuffle.partition.subpartition_view import PipelinedSubpartitionView
from shuffle.serialization.event_serializer import serialize_event
from lone_subpartition import lone_subpartition

KEY = ("p", 0)


class Listener:
    def notify_data_available(self):
        pass

    def notify_priority_event(self, seq):
        pass


def subpartition_with(payloads: list[bytes], writer: ChannelStateWriter):
    """A subpartition holding one finished buffer per payload."""
    sub = lone_subpartition()
    sub.parent.set_channel_state_writer(writer)
    view = PipelinedSubpartitionView(sub, Listener())
    for payload in payloads:
        builder = BufferBuilder(MemorySegment.wrap(bytearray(32)), lambda s: None)
        sub.add(builder.create_buffer_consumer_from(0))
        builder.append(memoryview(payload))
        builder.finish()
    return sub, view


def add_barrier(sub, checkpoint_id, alignment, timeout=None):
    options = (CheckpointOptions("CHECKPOINT", alignment) if timeout is None
               else CheckpointOptions("CHECKPOINT", alignment, timeout))
    barrier = CheckpointBarrier(checkpoint_id, 0, options)
    data_type = {AlignmentType.UNALIGNED: DataType.PRIORITIZED_EVENT_BUFFER,
                 AlignmentType.ALIGNED: DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER}[alignment]
    sub.add(BufferConsumer.for_event(serialize_event(barrier), data_type))


def test_an_unaligned_barrier_persists_exactly_the_data_buffers_it_overtakes():
    writer = ChannelStateWriter()
    writer.start(1)
    sub, view = subpartition_with([b"a" * 32, b"b" * 32], writer)
    assert view.get_next_buffer().buffer.size == 32  # "a" is sent before the barrier comes
    add_barrier(sub, 1, AlignmentType.UNALIGNED)
    assert writer.take(1).outputs == {KEY: [b"b" * 32]}
    assert view.get_next_buffer().buffer.data_type is DataType.PRIORITIZED_EVENT_BUFFER


def test_a_timeoutable_barrier_sent_in_time_resolves_its_output_to_nothing():
    writer = ChannelStateWriter()
    writer.start(1)
    sub, view = subpartition_with([b"a" * 32], writer)
    add_barrier(sub, 1, AlignmentType.ALIGNED, timeout=0.05)
    assert view.get_next_buffer().buffer.size == 32
    assert view.get_next_buffer().buffer.data_type is DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER
    sub.aligned_barrier_timeout(1)  # too late: nothing is queued ahead of a barrier any more
    assert writer.take(1).outputs == {}


def test_a_timed_out_barrier_persists_the_data_ahead_of_it_and_overtakes_it():
    writer = ChannelStateWriter()
    writer.start(1)
    sub, view = subpartition_with([b"a" * 32, b"b" * 32], writer)
    add_barrier(sub, 1, AlignmentType.ALIGNED, timeout=0.05)
    sub.aligned_barrier_timeout(1)
    assert writer.take(1).outputs == {KEY: [b"a" * 32, b"b" * 32]}
    first = view.get_next_buffer().buffer
    assert first.data_type is DataType.PRIORITIZED_EVENT_BUFFER  # now an unaligned barrier
    assert view.get_next_buffer().buffer.size == 32  # the data flows on after it


async def test_a_checkpoint_with_a_queued_timeoutable_barrier_waits_until_it_resolves(sim_kernel):
    writer = ChannelStateWriter()
    writer.start(1)
    sub, _ = subpartition_with([b"a" * 32], writer)
    add_barrier(sub, 1, AlignmentType.ALIGNED, timeout=0.05)
    done = []

    async def wait():
        await writer.wait_outputs(1)
        done.append(kernel.current_time())

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(wait)
        await kernel.sleep(0.05)
        assert not done  # the data this checkpoint persists is not known yet
        sub.aligned_barrier_timeout(1)
    assert done == [0.05]
    assert writer.take(1).outputs == {KEY: [b"a" * 32]}


async def test_release_and_abort_resolve_pending_outputs(sim_kernel):
    writer = ChannelStateWriter()
    for checkpoint_id in (1, 2):
        writer.start(checkpoint_id)
    released, _ = subpartition_with([b"a" * 32], writer)
    add_barrier(released, 1, AlignmentType.ALIGNED, timeout=0.05)
    released.release()
    await writer.wait_outputs(1)  # returns: a released subpartition sends no data for it
    aborted, _ = subpartition_with([b"a" * 32], writer)
    add_barrier(aborted, 2, AlignmentType.ALIGNED, timeout=0.05)
    writer.abort(2)
    await writer.wait_outputs(2)
    assert writer.take(2).outputs == {}
