"""RemoteInputChannel's credit decisions, as released Flink's own unit tests assert them.

Each test ports the single-threaded behaviour of one case of Flink's
`RemoteInputChannelTest` (flink-runtime, release 1.20; the figures are the same in 2.x):
the channel, its BufferManager and the gate's floating LocalBufferPool are driven by hand,
exactly as Flink's test drives them, and the same numbers are asserted (free buffers,
required buffers, unannounced credit, floating buffers given back, listener order).
"""

from __future__ import annotations

import itertools

import pytest

from shuffle.api.events import AlignmentType, CheckpointBarrier, CheckpointOptions
from shuffle.buffer.buffer import Buffer, MemorySegment
from shuffle.buffer.data_type import DataType
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.channel_state import ChannelStateWriter
from shuffle.config import NetworkConfig
from shuffle.consumer.remote_input_channel import RemoteInputChannel
from shuffle.consumer.single_input_gate import SingleInputGate
from shuffle.errors import CancelTaskError, IllegalStateError, PartitionNotFoundError
from shuffle.java_int import INT_MAX, INT_MIN
from shuffle.serialization.event_serializer import data_type_for_event, serialize_event

UNALIGNED = CheckpointOptions("CHECKPOINT", AlignmentType.UNALIGNED)
ALIGNED_WITH_TIMEOUT = CheckpointOptions("CHECKPOINT", AlignmentType.ALIGNED, 0.01)
ALIGNED = CheckpointOptions("CHECKPOINT", AlignmentType.ALIGNED)


class _Client:
    """The channel's connection: records credit notifications, sends nothing."""

    def __init__(self) -> None:
        self.credit_notifications: list[RemoteInputChannel] = []

    def request_subpartition(self, channel: RemoteInputChannel) -> None:
        pass

    def notify_credit_available(self, channel: RemoteInputChannel) -> None:
        self.credit_notifications.append(channel)

    def resume_consumption(self, channel: RemoteInputChannel) -> None:
        pass

    def acknowledge_all_records_processed(self, channel: RemoteInputChannel) -> None:
        pass

    def notify_new_buffer_size(self, channel: RemoteInputChannel, size: int) -> None:
        pass

    def close_channel(self, channel: RemoteInputChannel) -> None:
        pass


class _Counting:
    """Counts the gate pool's `request_buffer` / `add_buffer_listener` calls (Flink's spy)."""

    def __init__(self, pool) -> None:
        self.requests = self.listeners = 0
        request, listen = pool.request_buffer, pool.add_buffer_listener

        def request_buffer():
            self.requests += 1
            return request()

        def add_buffer_listener(listener):
            self.listeners += 1
            return listen(listener)

        pool.request_buffer, pool.add_buffer_listener = request_buffer, add_buffer_listener


async def _channels(total_segments: int, floating: int, exclusive: list[int], requested: bool = True,
                    config: NetworkConfig | None = None,
                    ) -> tuple[NetworkBufferPool, SingleInputGate, list[RemoteInputChannel]]:
    """A gate with a `floating`-buffer pool and one remote channel per `exclusive` entry."""
    network_pool = NetworkBufferPool(total_segments, 64)
    gate = SingleInputGate(0, "consumer", config or NetworkConfig(buffer_size=64), network_pool)
    channels = [RemoteInputChannel(gate, i, "partition", i, "producer", credit, i)
                for i, credit in enumerate(exclusive)]
    for channel in channels:
        gate.add_channel(channel)
    gate.buffer_pool = network_pool.create_buffer_pool(floating, floating)
    for channel in channels:
        await channel.setup()
        if requested:
            channel.client = _Client()
    return network_pool, gate, channels


def _state(channel: RemoteInputChannel) -> tuple[int, int, int, bool]:
    """(free buffers, required buffers, free segments of the gate's pool, waiting for floating)."""
    manager = channel.buffer_manager
    return (manager.available, manager.num_required_buffers, channel.gate.buffer_pool.num_available,
            manager.is_waiting_for_floating_buffers)


def _release(*channels: RemoteInputChannel) -> None:
    for channel in channels:
        channel.release_all_resources()


async def test_available_buffers_less_than_required_buffers(sim_kernel):
    # testAvailableBuffersLessThanRequiredBuffers
    _, gate, [channel] = await _channels(16, 14, [2])
    spy = _Counting(gate.buffer_pool)
    exclusive = channel.request_buffer()
    floating = [gate.buffer_pool.request_buffer() for _ in range(2)]
    assert exclusive is not None and None not in floating and spy.requests == 2

    channel.on_sender_backlog(14)  # wants 16, gets the pool's 12 other buffers and waits
    assert (spy.requests, spy.listeners) == (15, 1) and _state(channel) == (13, 16, 0, True)
    channel.on_sender_backlog(16)  # already waiting: asks for nothing
    assert (spy.requests, spy.listeners) == (15, 1) and _state(channel) == (13, 18, 0, True)
    exclusive.recycle()  # straight back to the channel
    assert (spy.requests, spy.listeners) == (15, 1) and _state(channel) == (14, 18, 0, True)
    floating.pop(0).recycle()  # handed to the waiting channel, which asks again and waits again
    assert (spy.requests, spy.listeners) == (16, 2) and _state(channel) == (15, 18, 0, True)
    channel.on_sender_backlog(13)  # only the required number changes
    assert (spy.requests, spy.listeners) == (16, 2) and _state(channel) == (15, 15, 0, True)
    floating.pop(0).recycle()  # declined: the channel has its 15; the pool keeps it
    assert (spy.requests, spy.listeners) == (16, 2) and _state(channel) == (15, 15, 1, False)
    channel.on_sender_backlog(15)  # takes that one, waits for the next
    assert (spy.requests, spy.listeners) == (18, 3) and _state(channel) == (16, 17, 0, True)
    _release(channel)


@pytest.mark.parametrize("backlog_after", [12, 10], ids=["equal", "more"])
async def test_available_buffers_equal_to_or_more_than_required(sim_kernel, backlog_after):
    # testAvailableBuffersEqualToRequiredBuffers (12) / testAvailableBuffersMoreThanRequiredBuffers (10)
    _, gate, [channel] = await _channels(16, 14, [2])
    spy = _Counting(gate.buffer_pool)
    exclusive = channel.request_buffer()
    floating = gate.buffer_pool.request_buffer()
    channel.on_sender_backlog(12)
    assert (spy.requests, spy.listeners) == (14, 0) and _state(channel) == (14, 14, 0, False)
    channel.on_sender_backlog(backlog_after)
    required = backlog_after + 2
    assert _state(channel) == (14, required, 0, False)
    exclusive.recycle()  # one floating buffer of the channel goes back to the pool
    assert _state(channel) == (14, required, 1, False)
    floating.recycle()  # nobody waits: the pool keeps it
    assert (spy.requests, spy.listeners) == (14, 0) and _state(channel) == (14, required, 2, False)
    _release(channel)


async def test_fair_distribution_of_floating_buffers(sim_kernel):
    # testFairDistributionFloatingBuffers: recycled buffers go round the waiting channels
    _, gate, channels = await _channels(12, 3, [2, 2, 2])
    taken = [gate.buffer_pool.request_buffer() for _ in range(3)]
    for channel in channels:
        channel.on_sender_backlog(8)
        assert channel.buffer_manager.available == 2 and channel.buffer_manager.is_waiting_for_floating_buffers
    for buffer in taken:
        buffer.recycle()
    assert [(c.buffer_manager.available, c.unannounced_credit) for c in channels] == [(3, 1)] * 3
    assert [c.client.credit_notifications for c in channels] == [[c] for c in channels]
    _release(*channels)


async def test_a_buffer_kept_by_a_channel_goes_to_the_next_waiting_one_when_it_is_released(sim_kernel):
    # testFailureInNotifyBufferAvailable, its single-threaded part: the floating buffer the first
    # waiting channel took is not seen by the second until the first is released, then at once.
    _, gate, [first, second] = await _channels(2, 1, [0, 1])
    buffer = gate.buffer_pool.request_buffer()
    first.on_sender_backlog(1)
    second.on_sender_backlog(2)
    buffer.recycle()
    assert gate.buffer_pool.num_available == 0 and first.buffer_manager.available == 1
    second.request_buffer().recycle()  # its exclusive buffer, back at once
    assert not second.buffer_manager.floating
    first.release_all_resources()
    assert gate.buffer_pool.num_available == 0 and len(second.buffer_manager.floating) == 1
    _release(second)


async def test_required_buffers_count_down_with_each_requested_buffer(sim_kernel):
    # testRequestBuffer
    _, _, [with_credit, without_credit] = await _channels(16, 8, [2, 0])
    with_credit.on_sender_backlog(2)
    without_credit.on_sender_backlog(2)
    for channel, required in ((with_credit, 4), (without_credit, 2)):
        held = []
        for expected in range(required, -1, -1):
            assert channel.buffer_manager.num_required_buffers == expected
            held.append(channel.request_buffer())
        for buffer in filter(None, held):
            buffer.recycle()
    _release(with_credit, without_credit)


def _barrier(checkpoint_id: int, options: CheckpointOptions) -> Buffer:
    barrier = CheckpointBarrier(checkpoint_id, 123, options)
    return Buffer.of_event(serialize_event(barrier), data_type_for_event(barrier, options.is_unaligned))


def _data(size: int) -> Buffer:
    return Buffer.of_segment(MemorySegment(64), lambda segment: None, size)


def _filled(payload: bytes) -> Buffer:
    """A data buffer holding `payload` (what persisted in-flight data copies)."""
    buffer = _data(len(payload))
    buffer.ref.segment.adopt(payload)
    return buffer


async def test_a_blocked_channel_without_exclusive_buffers_gives_its_floating_ones_back(sim_kernel):
    # testOnUpstreamBlockedAndResumed. Flink's test gives the channels no exclusive segments (a
    # stub provider), so all 4 buffers of the channel with initial credit 2 are floating and
    # unannounced; here its 2 exclusive ones are real and their credit went with the request.
    _, _, [with_credit, without_credit] = await _channels(16, 8, [2, 0])
    for channel in (with_credit, without_credit):
        channel.on_sender_backlog(2)
    assert [c.buffer_manager.available for c in (with_credit, without_credit)] == [4, 2]
    for channel in (with_credit, without_credit):
        channel.on_buffer(_barrier(1, ALIGNED), 0, 0)
    assert [c.buffer_manager.available for c in (with_credit, without_credit)] == [4, 0]
    for channel in (with_credit, without_credit):
        channel.resume_consumption()
    assert [c.unannounced_credit for c in (with_credit, without_credit)] == [2, 0]  # Flink: [4, 0]
    for channel in (with_credit, without_credit):
        channel.on_sender_backlog(4)
    assert [c.buffer_manager.available for c in (with_credit, without_credit)] == [6, 4]
    assert [c.unannounced_credit for c in (with_credit, without_credit)] == [4, 4]  # Flink: [6, 4]
    _release(with_credit, without_credit)


async def test_buffers_in_use_count_queued_plus_backlog(sim_kernel):
    # testBuffersInUseCount
    _, _, [channel] = await _channels(4, 1, [2])
    channel.on_buffer(_data(64), 0, 1)
    assert channel.buffers_in_use_count == 2
    channel.on_buffer(_data(64), 1, 3)
    assert channel.buffers_in_use_count == 5
    counts = []
    for _ in range(3):
        channel.get_next_buffer()
        counts.append(channel.buffers_in_use_count)
    assert counts == [4, 3, 3]
    _release(channel)


def _send_around_barrier(channel: RemoteInputChannel, first: int, options: CheckpointOptions) -> None:
    """Buffers of 1 and 2 bytes, the barrier, buffers of 3 and 4 bytes, from sequence number `first`."""
    channel.expected_sequence_number = first
    for size in (1, 2, None, 3, 4):
        channel.on_buffer(_data(size) if size else _barrier(1, options), channel.expected_sequence_number, 0)
        channel.check_error()


def _polled_sequence_numbers(channel: RemoteInputChannel, n: int) -> list[int]:
    return [channel.get_next_buffer().sequence_number for _ in range(n)]


async def test_an_unaligned_barrier_overtakes_the_queued_buffers(sim_kernel):
    # testPrioritySequenceNumbers
    _, _, [channel] = await _channels(4, 1, [2])
    _send_around_barrier(channel, 0, UNALIGNED)
    assert _polled_sequence_numbers(channel, 5) == [2, 0, 1, 3, 4]
    _release(channel)


async def test_a_timeoutable_barrier_is_announced_first_and_kept_in_place(sim_kernel):
    # testRequiresAnnouncement
    _, _, [channel] = await _channels(4, 1, [2])
    _send_around_barrier(channel, 0, ALIGNED_WITH_TIMEOUT)
    announcement = channel.get_next_buffer()
    assert announcement.sequence_number == 2 and announcement.buffer.data_type is DataType.PRIORITIZED_EVENT_BUFFER
    assert announcement.more_available and not announcement.more_priority_events
    assert _polled_sequence_numbers(channel, 2) == [0, 1]
    barrier = channel.get_next_buffer()
    assert barrier.sequence_number == 2
    assert barrier.buffer.data_type is DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER
    assert _polled_sequence_numbers(channel, 1) == [3]
    _release(channel)


@pytest.mark.parametrize("options", [UNALIGNED, ALIGNED_WITH_TIMEOUT], ids=["unaligned", "timeoutable"])
@pytest.mark.parametrize("polled, inflight", [(0, [1, 2]), (1, [1, 2]), (2, [2])])
async def test_inflight_buffers_are_those_before_the_barrier(sim_kernel, options, polled, inflight):
    # testGetInflightBuffers, ...AfterPollingBuffer, ...Before/AfterProcessingAnnouncement(AndBuffer)
    _, _, [channel] = await _channels(4, 1, [2])
    _send_around_barrier(channel, 0, options)
    _polled_sequence_numbers(channel, polled)  # the priority element first, then buffer 1
    assert [b.size for b in channel.get_inflight_buffers(1)] == inflight
    _release(channel)


async def test_inflight_buffers_without_a_barrier_are_all_queued_buffers(sim_kernel):
    # testGetAllInflightBuffers: sequence numbers wrapping past Integer.MAX_VALUE
    _, _, [channel] = await _channels(4, 1, [2])
    channel.expected_sequence_number = INT_MAX - 2
    for size in (1, 2, 3, 4):
        channel.on_buffer(_data(size), channel.expected_sequence_number, 0)
    assert channel.expected_sequence_number == INT_MIN + 1
    assert [b.size for b in channel.get_inflight_buffers(1)] == [1, 2, 3, 4]
    _release(channel)


@pytest.mark.parametrize("first", range(INT_MAX - 10, INT_MAX + 1))
async def test_inflight_buffers_when_sequence_numbers_overflow(sim_kernel, first):
    # testGetInflightBuffersOverflow: Flink compares sequence numbers as (x - y) < 0 in int
    _, _, [channel] = await _channels(4, 1, [2])
    _send_around_barrier(channel, first, UNALIGNED)
    assert [b.size for b in channel.get_inflight_buffers(1)] == [1, 2]
    _release(channel)


async def test_size_of_queued_buffers_counts_events_too(sim_kernel):
    # testSizeOfQueuedBuffers
    _, _, [channel] = await _channels(4, 1, [2])
    channel.on_buffer(_data(1), 0, 0)
    channel.on_buffer(_data(2), 1, 0)
    assert channel.queue_size == 3
    barrier = _barrier(1, UNALIGNED)
    channel.on_buffer(barrier, 2, 0)
    assert channel.queue_size == 3 + barrier.size
    sizes = []
    for _ in range(3):
        channel.get_next_buffer()
        sizes.append(channel.queue_size)
    assert sizes == [3, 2, 0]
    _release(channel)


async def test_queue_size_is_a_running_count_an_announcement_lowers_for_good(sim_kernel):
    # Flink 2.3's RemoteInputChannel (bytecode): onBuffer adds the received buffer's size to
    # totalQueueSizeInBytes, not that of the announcement it queues for a timeoutable
    # barrier; getNextBuffer takes every polled buffer's size away, the announcement's too;
    # releaseAllResources leaves the count; the gauge reads max(0, count).
    _, _, [channel] = await _channels(4, 1, [2])
    _send_around_barrier(channel, 0, ALIGNED_WITH_TIMEOUT)
    announcement, barrier = channel.received[0][0].size, channel.received[3][0].size
    assert channel.queue_size == 1 + 2 + barrier + 3 + 4  # what is queued, but the announcement
    sizes = []
    for _ in range(6):
        channel.get_next_buffer()
        sizes.append(channel.queue_size)
    assert sizes == [max(0, 10 + barrier - announcement), max(0, 9 + barrier - announcement),
                     max(0, 7 + barrier - announcement), max(0, 7 - announcement), max(0, 4 - announcement), 0]
    assert channel.total_queue_size_in_bytes == -announcement
    channel.on_buffer(_data(announcement + 5), channel.expected_sequence_number, 0)
    assert channel.queue_size == 5  # queued: announcement + 5 bytes
    _release(channel)
    assert channel.queue_length == 0 and channel.queue_size == 5  # the release leaves the count


async def test_a_priority_event_after_the_sequence_numbers_wrap_is_not_taken_as_outdated(sim_kernel):
    # SingleInputGate.isOutdated: a barrier numbered past the wrap is newer than one at INT_MAX - 1
    _, gate, [channel] = await _channels(4, 1, [2])
    channel.expected_sequence_number = INT_MAX - 1
    channel.on_buffer(_barrier(1, UNALIGNED), INT_MAX - 1, 0)
    assert gate.poll_next().event.id == 1
    channel.on_buffer(_data(1), INT_MAX, 0)
    channel.on_buffer(_barrier(2, UNALIGNED), INT_MIN, 0)
    assert gate.priority_availability.is_available
    assert gate.poll_next().event.id == 2
    _release(channel)


def _exhaust(channel: RemoteInputChannel, pool) -> tuple[list[Buffer], list[Buffer]]:
    """All exclusive buffers of `channel` and all buffers of the gate's pool, taken."""
    exclusive = [channel.request_buffer() for _ in range(channel.initial_credit)]
    floating = [pool.request_buffer() for _ in range(pool.num_buffers)]
    assert None not in exclusive and None not in floating
    return exclusive, floating


@pytest.mark.parametrize("order", ["recycle_first", "backlog_first", "interleaved"])
async def test_backlog_and_recycling_in_any_order_end_with_the_required_buffers(sim_kernel, order):
    # testConcurrentOnSenderBacklogAndRecycle, its orderings run one after another
    _, gate, [channel] = await _channels(248, 128, [120])
    exclusive, floating = _exhaust(channel, gate.buffer_pool)
    recycles = [b.recycle for pair in zip(exclusive, floating) for b in pair] + [b.recycle for b in floating[120:]]
    backlogs = [lambda j=j: channel.on_sender_backlog(j) for j in range(1, 129)]
    steps = {"recycle_first": recycles + backlogs, "backlog_first": backlogs + recycles,
             "interleaved": [s for pair in itertools.zip_longest(recycles, backlogs) for s in pair if s]}[order]
    for step in steps:
        step()
    manager = channel.buffer_manager
    assert manager.available == manager.num_required_buffers == 248
    assert gate.buffer_pool.num_available == 0
    _release(channel)


async def test_buffers_recycled_after_release_go_back_to_their_pools(sim_kernel):
    # testConcurrentRecycleAndRelease, release first: exclusive to the NetworkBufferPool, floating to the gate
    network_pool, gate, [channel] = await _channels(248, 128, [120])
    exclusive, floating = _exhaust(channel, gate.buffer_pool)
    channel.on_sender_backlog(128)
    channel.release_all_resources()
    for buffer in exclusive + floating:
        buffer.recycle()
    assert channel.buffer_manager.available == 0
    assert gate.buffer_pool.num_available == 128 and network_pool.num_available_segments == 120


async def test_an_out_of_order_buffer_fails_the_channel_when_polled(sim_kernel):
    # testExceptionOnReordering
    _, _, [channel] = await _channels(4, 1, [2])
    channel.on_buffer(_data(1), 0, -1)
    channel.on_buffer(_data(1), 29, -1)
    with pytest.raises(IOError, match="expected buffer with sequence number 1, but received 29"):
        channel.get_next_buffer()
    _release(channel)


async def test_the_gate_is_told_of_data_and_of_priority_separately(sim_kernel):
    # testNotifyOnPriority
    _, gate, [channel] = await _channels(4, 1, [2])
    channel.on_buffer(_barrier(1, ALIGNED), 0, 0)
    assert gate.availability.is_available and not gate.priority_availability.is_available
    barrier = CheckpointBarrier(2, 123, ALIGNED)
    channel.on_buffer(Buffer.of_event(serialize_event(barrier), DataType.PRIORITIZED_EVENT_BUFFER), 1, 0)
    assert gate.availability.is_available and gate.priority_availability.is_available
    _release(channel)


async def test_converting_an_announced_barrier_tells_the_gate_of_priority(sim_kernel):
    # testGateNotifiedOnBarrierConversion
    _, gate, [channel] = await _channels(4, 1, [2])
    channel.on_buffer(_barrier(1, CheckpointOptions("CHECKPOINT", AlignmentType.ALIGNED, 3600.0)), 0, 0)
    gate.poll_next()  # the announcement
    assert not gate.priority_availability.is_available
    channel.convert_to_priority_event(0)
    assert gate.priority_availability.is_available
    _release(channel)


async def test_a_channel_persists_to_the_gates_writer_whenever_its_persister_is_made(credit_flow):
    h = await credit_flow(channels=2)
    early = h.channel(0).persister  # made before the task gives the gate its writer
    writer = ChannelStateWriter()
    for index in (0, 1):  # (the harness gives each channel a gate of its own)
        h.channel(index).gate.set_channel_state_writer(writer)
    writer.start(1)
    unaligned = CheckpointOptions("CHECKPOINT", AlignmentType.UNALIGNED)
    for index in (0, 1):  # channel 1's persister is made now, after the writer was set
        h.channel(index).checkpoint_started(CheckpointBarrier(1, 0, unaligned))
        await h.emit_values(index, [index])
        h.flush(index)
    await h.settle()
    assert early is h.channel(0).persister
    assert sorted(writer.take(1).inputs) == [h.channel(0).channel_state_key, h.channel(1).channel_state_key]


# -- released channels, the single-threaded orderings of Flink's concurrent release tests ---

class _Counted:
    """A data buffer whose recycling is counted (Flink's `isRecycled`)."""

    def __init__(self, size: int = 8) -> None:
        self.recycled = 0
        self.buffer = Buffer.of_segment(MemorySegment(64), self._recycle, size)

    def _recycle(self, _segment) -> None:
        self.recycled += 1


async def test_an_out_of_order_buffer_is_dropped_and_the_queued_one_kept_until_release(sim_kernel):
    # testExceptionOnReordering: the buffer out of order is recycled at once, the one queued
    # before it only when the failed channel is released
    _, _, [channel] = await _channels(4, 1, [2])
    queued, late = _Counted(), _Counted()
    channel.on_buffer(queued.buffer, 0, -1)
    channel.on_buffer(late.buffer, 29, -1)
    with pytest.raises(IOError):
        channel.get_next_buffer()
    assert (queued.recycled, late.recycled) == (0, 1)
    channel.release_all_resources()
    assert queued.recycled == 1


async def test_a_buffer_for_a_released_channel_is_recycled_not_queued(sim_kernel):
    # testConcurrentOnBufferAndRelease, the buffer arriving after the release
    _, _, [channel] = await _channels(4, 1, [2])
    channel.release_all_resources()
    late = _Counted()
    channel.on_buffer(late.buffer, 0, 1)
    assert late.recycled == 1 and channel.queue_length == 0 and channel.expected_sequence_number == 0


async def test_a_released_channel_declines_the_floating_buffer_it_waited_for(sim_kernel):
    # testConcurrentNotifyBufferAvailableAndRelease, the offer coming after the release
    _, gate, [channel] = await _channels(4, 1, [2])
    taken = gate.buffer_pool.request_buffer()
    channel.on_sender_backlog(4)
    assert channel.buffer_manager.is_waiting_for_floating_buffers
    channel.release_all_resources()
    assert channel.buffer_manager.notify_buffer_available(taken) is False
    taken.recycle()
    assert gate.buffer_pool.num_available == 1


async def test_release_after_backlog_requests_returns_every_buffer_and_stops_requests(sim_kernel):
    # testConcurrentOnSenderBacklogAndRelease, the release after the backlogs (and one more after it)
    network_pool, gate, [channel] = await _channels(130, 128, [2])
    for backlog in range(1, 129):
        channel.on_sender_backlog(backlog)
    assert channel.buffer_manager.available == 130
    channel.release_all_resources()
    channel.on_sender_backlog(128)
    assert channel.buffer_manager.available == 0
    assert gate.buffer_pool.num_available + network_pool.num_available_segments == 130


async def test_polling_a_released_channel_cancels_the_task(sim_kernel):
    # testConcurrentGetNextBufferAndRelease, the poll after the release
    _, _, [channel] = await _channels(4, 1, [2])
    received = [_Counted() for _ in range(2)]
    for seq, counted in enumerate(received):
        channel.on_buffer(counted.buffer, seq, 0)
    channel.release_all_resources()
    assert [c.recycled for c in received] == [1, 1]
    with pytest.raises(CancelTaskError, match="Queried for a buffer after channel has been released."):
        channel.get_next_buffer()


@pytest.mark.parametrize("call", [
    lambda channel: channel.resume_consumption(),  # testUnblockReleasedChannel
    lambda channel: channel.announce_buffer_size(10),  # testReleasedChannelAnnounceBufferSize
    lambda channel: channel.acknowledge_all_records_processed(),  # RemoteInputChannel's same checkState
], ids=["resume", "buffer_size", "acknowledge"])
async def test_a_released_channel_refuses_to_message_its_producer(sim_kernel, call):
    _, _, [channel] = await _channels(4, 1, [2])
    channel.release_all_resources()
    with pytest.raises(IllegalStateError, match="Channel released"):
        call(channel)


# -- partition-request retries (RemoteInputChannel.increaseBackoff, 1.18+) -------------------

class _RequestCounting(_Client):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def request_subpartition(self, channel: RemoteInputChannel) -> None:
        self.requests += 1


@pytest.mark.parametrize("timeout, max_backoff, retries", [(0.5, 1.0, 3), (0.5, 0.5, 1), (0.0, 0.0, 0)],
                         ids=["exponential", "single", "none"])
async def test_a_not_found_request_is_retried_while_the_backoff_allows(sim_kernel, timeout, max_backoff, retries):
    # testPartitionRequestExponentialBackoff (backoff 500, 1000, 1500 retried; 2000 fails),
    # testPartitionRequestSingleBackoff, testPartitionRequestNoBackoff: each retry re-sends at once
    config = NetworkConfig(buffer_size=64, partition_request_timeout=timeout, request_backoff_max=max_backoff)
    _, _, [channel] = await _channels(4, 1, [2], config=config)
    channel.client = client = _RequestCounting()
    for _ in range(retries):
        channel.on_failed_partition_request()
        assert channel.error is None
    assert client.requests == retries
    channel.on_failed_partition_request()
    assert client.requests == retries
    # testPartitionNotFoundExceptionWhileRetriggeringRequest: the error is raised as it is
    with pytest.raises(PartitionNotFoundError) as failure:
        channel.get_next_buffer()
    assert failure.value.partition_id == channel.partition_id
    _release(channel)


# -- unaligned checkpoints: the channel's last barrier (RemoteInputChannel.checkpointStarted,
#    checkpointStopped) -------------------------------------------------------------------------

async def test_aborting_an_older_checkpoint_keeps_the_newer_barrier_received_meanwhile(sim_kernel):
    # Checkpoint 1 runs when the channel receives data, the barrier of checkpoint 2, more data.
    # The task then aborts 1 (checkpointStopped(1)) and starts 2: what 2 persists of this
    # channel is what its barrier overtook, not the data behind it.
    _, gate, [channel] = await _channels(4, 1, [2])
    writer = ChannelStateWriter()
    gate.set_channel_state_writer(writer)
    writer.start(1)
    writer.start(2)
    channel.checkpoint_started(CheckpointBarrier(1, 0, UNALIGNED))
    channel.on_buffer(_filled(b"before"), 0, 0)
    channel.on_buffer(_barrier(2, UNALIGNED), 1, 0)
    channel.on_buffer(_filled(b"after"), 2, 0)
    channel.checkpoint_stopped(1)
    channel.checkpoint_started(CheckpointBarrier(2, 0, UNALIGNED))
    assert writer.take(1).inputs[channel.channel_state_key] == [b"before"]
    assert writer.take(2).inputs[channel.channel_state_key] == [b"before"]
    _release(channel)


async def test_a_barrier_of_an_older_checkpoint_leaves_every_queued_buffer_in_flight(sim_kernel):
    # checkpointStarted: a received barrier older than the started checkpoint is reset, so
    # every queued data buffer is in-flight data of the newer checkpoint
    _, _, [channel] = await _channels(4, 1, [2])
    channel.on_buffer(_data(1), 0, 0)
    channel.on_buffer(_barrier(1, UNALIGNED), 1, 0)
    channel.on_buffer(_data(2), 2, 0)
    assert [b.size for b in channel.get_inflight_buffers(2)] == [1, 2]
    _release(channel)


async def test_a_blocking_barrier_must_come_with_no_backlog_whatever_the_initial_credit(sim_kernel):
    # RemoteInputChannel.onBuffer: checkArgument(backlog == 0) for every channel, after a
    # channel without exclusive buffers gave its floating ones back
    _, _, [with_credit, without_credit] = await _channels(16, 8, [2, 0])
    for channel in (with_credit, without_credit):
        channel.on_sender_backlog(2)
        with pytest.raises(ValueError, match="Illegal number of backlog: 1, should be 0."):
            channel.on_buffer(_barrier(1, ALIGNED), 0, 1)
    assert [c.buffer_manager.available for c in (with_credit, without_credit)] == [4, 0]
    _release(with_credit, without_credit)
