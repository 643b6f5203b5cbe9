"""SingleInputGate against the cases of Flink's SingleInputGateTest and InputGateTestBase
(behaviour ported, one test per Flink case named in its comment)."""

import pytest

from shuffle.api.events import EndOfDataStatus, EndOfPartitionEvent, StopMode
from shuffle.buffer.data_type import DataType
from shuffle.errors import PartitionNotFoundError

from scripted_channel import scripted_gate


def expect(gate, is_buffer: bool, channel: int, more_available: bool) -> None:
    """Flink's `verifyBufferOrEvent`: the next item's kind, channel and more-available flag;
    where nothing more is announced, the next poll finds nothing."""
    result = gate.poll_next()
    assert result is not None
    assert result.is_buffer is is_buffer
    assert result.channel_info.channel_index == channel
    assert result.more_available is more_available
    if result.buffer is not None:
        result.buffer.recycle()
    if not more_available:
        assert gate.poll_next() is None


def test_buffers_and_events_interleave_round_robin_and_the_gate_finishes():
    # Flink: SingleInputGateTest.testBasicGetNextLogic
    gate, (c0, c1) = scripted_gate(2)
    c0.read_buffer().read_buffer()
    c1.read_buffer()
    c1.read_end_of_data()
    c0.read_end_of_data()
    c1.read_end_of_partition()
    c0.read_end_of_partition()
    gate.notify_channel_non_empty(c0)
    gate.notify_channel_non_empty(c1)

    expect(gate, True, 0, True)
    expect(gate, True, 1, True)
    expect(gate, True, 0, True)
    expect(gate, False, 1, True)
    assert gate.has_received_end_of_data() is EndOfDataStatus.NOT_END_OF_DATA
    expect(gate, False, 0, True)
    assert not gate.is_finished
    assert gate.has_received_end_of_data() is EndOfDataStatus.DRAINED
    expect(gate, False, 1, True)
    expect(gate, False, 0, False)
    assert gate.has_received_end_of_data() is EndOfDataStatus.DRAINED
    assert gate.is_finished
    assert all(b.is_recycled for c in (c0, c1) for b in c.returned if not b.is_buffer)


@pytest.mark.parametrize("modes, status", [((StopMode.NO_DRAIN, StopMode.DRAIN), EndOfDataStatus.STOPPED),
                                           ((StopMode.DRAIN, StopMode.DRAIN), EndOfDataStatus.DRAINED)])
def test_end_of_data_drains_only_if_every_channel_said_drain(modes, status):
    # Flink: SingleInputGateTest.testDrainFlagComputation
    gate, channels = scripted_gate(2)
    channels[1].read_end_of_data(modes[1])
    channels[0].read_end_of_data(modes[0])
    for channel in channels:
        gate.notify_channel_non_empty(channel)
    expect(gate, False, 0, True)
    assert gate.has_received_end_of_data() is EndOfDataStatus.NOT_END_OF_DATA
    expect(gate, False, 1, True)
    assert gate.has_received_end_of_data() is status


def test_a_channel_that_ended_is_not_queued_again():
    # Flink: SingleInputGateTest.testNotifyAfterEndOfPartition
    gate, (c0, _) = scripted_gate(2)
    c0.read_end_of_partition()
    c0.notify_channel_non_empty()
    assert gate.poll_next().event == EndOfPartitionEvent.INSTANCE
    c0.notify_channel_non_empty()  # the other channel keeps the gate open
    assert gate.poll_next() is None


def test_the_gate_turns_available_when_a_channel_gets_data():
    # Flink: SingleInputGateTest.testIsAvailable (InputGateTestBase.testIsAvailable)
    gate, (c0,) = scripted_gate(1)
    assert not gate.is_available()
    assert gate.poll_next() is None
    assert not gate.is_available()
    assert gate.poll_next() is None
    c0.read_buffer()
    gate.notify_channel_non_empty(c0)
    assert gate.is_available()


def test_the_gate_is_available_once_finished():
    # Flink: SingleInputGateTest.testIsAvailableAfterFinished
    gate, (c0,) = scripted_gate(1)
    assert not gate.is_available()
    assert gate.poll_next() is None
    c0.read_end_of_partition()
    gate.notify_channel_non_empty(c0)
    assert gate.poll_next() is not None
    assert gate.is_finished and gate.is_available()


def test_more_available_follows_the_one_channel_with_data():
    # Flink: SingleInputGateTest.testIsMoreAvailableReadingFromSingleInputChannel
    gate, (c0, _) = scripted_gate(2)
    c0.read_buffer()
    c0.read_end_of_partition()
    gate.notify_channel_non_empty(c0)
    expect(gate, True, 0, True)
    expect(gate, False, 0, False)


def test_unfinished_channels_shrink_as_channels_end():
    # Flink: SingleInputGateTest.testGetUnfinishedChannels
    gate, channels = scripted_gate(3, gate_index=1)
    assert [info.channel_index for info in gate.unfinished_channels()] == [0, 1, 2]
    for ended, left in ((1, [0, 2]), (0, [2]), (2, [])):
        channels[ended].read_end_of_partition()
        gate.notify_channel_non_empty(channels[ended])
        gate.poll_next()
        assert [info.channel_index for info in gate.unfinished_channels()] == left
        assert all(info.gate_index == 1 for info in gate.unfinished_channels())


def test_buffers_in_use_sum_over_the_channels():
    # Flink: SingleInputGateTest.testBufferInUseCount
    gate, (c0, c1) = scripted_gate(2)
    assert gate.buffers_in_use_count == 0
    c0.read_buffer()
    assert gate.buffers_in_use_count == 1
    c0.read_buffer()
    assert gate.buffers_in_use_count == 2
    c1.read_buffer()
    assert gate.buffers_in_use_count == 3


def test_a_partition_not_found_reaches_the_task_as_it_is():
    # Flink: SingleInputGateTest.testPartitionNotFoundExceptionWhileGetNextBuffer
    gate, (c0,) = scripted_gate(1)
    error = PartitionNotFoundError("partition-x not found")
    c0.set_error(error)
    with pytest.raises(PartitionNotFoundError) as raised:
        gate.poll_next()
    assert raised.value is error


def test_channel_infos_carry_gate_and_channel_index():
    # Flink: SingleInputGateTest.testSingleInputGateInfo
    for gate_index in range(2):
        gate, channels = scripted_gate(3, gate_index=gate_index)
        assert [(c.channel_info.gate_index, c.channel_info.channel_index) for c in channels] == \
            [(gate_index, 0), (gate_index, 1), (gate_index, 2)]



def test_the_gate_is_unavailable_as_soon_as_its_last_queued_channel_is_polled():
    # Flink: SingleInputGate.waitAndGetNextData calls checkUnavailability after taking data,
    # so the availability future is reset when the queue empties, not at the next empty poll
    # (what UnionInputGateTest.testAvailability/testEmptyPull rely on through the union).
    gate, (c0, c1) = scripted_gate(2)
    c0.read_buffer(next_data_type=DataType.NONE)
    c1.read_buffer(next_data_type=DataType.NONE)
    gate.notify_channel_non_empty(c0)
    gate.notify_channel_non_empty(c1)
    gate.poll_next().buffer.recycle()
    assert gate.is_available()  # channel 1 is still queued
    result = gate.poll_next()
    result.buffer.recycle()
    assert not result.more_available and not gate.is_available()


def test_a_closed_gate_cancels_the_poll_unless_it_had_finished():
    # Flink: SingleInputGate.getNextBufferOrEvent returns nothing once every channel ended,
    # closed or not, and otherwise throws CancelTaskException("Input gate is already closed.")
    from shuffle.errors import CancelTaskError

    gate, (c0,) = scripted_gate(1)
    gate.close()
    with pytest.raises(CancelTaskError, match=r"^Input gate is already closed\.$"):
        gate.poll_next()
    gate, (c0,) = scripted_gate(1)
    c0.read_end_of_partition()
    gate.notify_channel_non_empty(c0)
    assert gate.poll_next().event == EndOfPartitionEvent.INSTANCE
    gate.close()
    assert gate.poll_next() is None


# -- Flink's InputGateFairnessTest -------------------------------------------------------------
# 37 channels, 27 buffers each: after every poll the channels' queues differ by at most one
# buffer (the gate serves its channels round robin), and a channel is never queued twice.

_FAIR_CHANNELS, _FAIR_BUFFERS = 37, 27


def _fair_gate():
    from shuffle.buffer.network_buffer_pool import NetworkBufferPool
    from shuffle.config import NetworkConfig
    from shuffle.consumer.single_input_gate import SingleInputGate

    return SingleInputGate(0, "fairness", NetworkConfig(buffer_size=64), NetworkBufferPool(1, 64))


def _buffer_of_42_bytes():
    from shuffle.buffer.buffer import Buffer, MemorySegment

    return Buffer.of_segment(MemorySegment(64), lambda segment: None, 42)


def _poll_fairly(gate, queue_lengths) -> None:
    """Flink's FairnessVerifyingInputGate.getNextBufferOrEvent plus the test's min/max check."""
    queued = list(gate._with_data)
    assert len(queued) == len(set(map(id, queued))) <= gate.num_channels
    result = gate.poll_next()
    assert result is not None
    if result.buffer is not None:
        result.buffer.recycle()
    lengths = queue_lengths()
    assert max(lengths) - min(lengths) <= 1, lengths


def _remote_channels(gate):
    from shuffle.consumer.remote_input_channel import RemoteInputChannel

    channels = [RemoteInputChannel(gate, i, "partition", i, "producer", 0, i) for i in range(_FAIR_CHANNELS)]
    for channel in channels:
        gate.add_channel(channel)
    return channels


def _fill_randomly(rng, add, per_channel: int) -> None:
    """Flink's fillRandom: `per_channel` buffers for every channel, in a shuffled order."""
    order = [i for i in range(_FAIR_CHANNELS) for _ in range(per_channel)]
    rng.shuffle(order)
    for i in order:
        add(i)


def test_remote_channels_prefilled_are_consumed_fairly():
    # Flink: InputGateFairnessTest.testFairConsumptionRemoteChannelsPreFilled
    from shuffle.buffer.buffer import Buffer
    from shuffle.serialization.event_serializer import serialize_event

    gate = _fair_gate()
    channels = _remote_channels(gate)
    for channel in channels:
        for seq in range(_FAIR_BUFFERS):
            channel.on_buffer(_buffer_of_42_bytes(), seq, -1)
        channel.on_buffer(Buffer.of_event(serialize_event(EndOfPartitionEvent.INSTANCE), DataType.EVENT_BUFFER),
                          _FAIR_BUFFERS, -1)
    for _ in range(_FAIR_CHANNELS * (_FAIR_BUFFERS + 1)):
        _poll_fairly(gate, lambda: [c.queue_length for c in channels])
    assert gate.is_finished and gate.poll_next() is None


def test_remote_channels_filled_while_read_are_consumed_fairly():
    # Flink: InputGateFairnessTest.testFairConsumptionRemoteChannels
    import random

    gate = _fair_gate()
    channels = _remote_channels(gate)

    def add(i: int) -> None:
        channels[i].on_buffer(_buffer_of_42_bytes(), channels[i].expected_sequence_number, -1)

    add(11)
    rng = random.Random(42)
    for i in range(_FAIR_CHANNELS * _FAIR_BUFFERS):
        _poll_fairly(gate, lambda: [c.queue_length for c in channels])
        if i % (2 * _FAIR_CHANNELS) == 0:
            _fill_randomly(rng, add, 3)


def _local_sources(gate):
    """One subpartition per channel, read by a local channel of `gate` through its view."""
    from shuffle.consumer.local_input_channel import LocalInputChannel
    from shuffle.partition.subpartition_view import PipelinedSubpartitionView

    from lone_subpartition import lone_subpartition

    sources = [lone_subpartition() for _ in range(_FAIR_CHANNELS)]
    for i, source in enumerate(sources):
        channel = LocalInputChannel(gate, i, "p", 0)
        gate.add_channel(channel)
        channel.view = PipelinedSubpartitionView(source, channel)
    return sources


def _finished_buffer_of_42_bytes():
    """Flink's createFilledFinishedBufferConsumer(42): its consumer made before the finish,
    so only its copies (which the test adds, as Flink's) see the builder finished."""
    from shuffle.buffer.buffer import MemorySegment
    from shuffle.buffer.buffer_builder import BufferBuilder

    builder = BufferBuilder(MemorySegment.wrap(bytearray(42)), lambda segment: None)
    consumer = builder.create_buffer_consumer_from(0)
    builder.append(memoryview(bytes(42)))
    builder.finish()
    builder.close()
    return consumer


def test_local_channels_prefilled_are_consumed_fairly():
    # Flink: InputGateFairnessTest.testFairConsumptionLocalChannelsPreFilled
    gate = _fair_gate()
    sources = _local_sources(gate)
    buffer = _finished_buffer_of_42_bytes()
    for source in sources:
        for _ in range(_FAIR_BUFFERS):
            source.add(buffer.copy())
        source.finish()
    for _ in range(_FAIR_CHANNELS * (_FAIR_BUFFERS + 1)):
        _poll_fairly(gate, lambda: [s.number_of_queued_buffers for s in sources])
    assert gate.is_finished and gate.poll_next() is None


def test_local_channels_filled_while_read_are_consumed_fairly():
    # Flink: InputGateFairnessTest.testFairConsumptionLocalChannels
    import random

    gate = _fair_gate()
    sources = _local_sources(gate)
    buffer = _finished_buffer_of_42_bytes()
    sources[12].add(buffer.copy())
    rng = random.Random(42)
    for i in range(_FAIR_CHANNELS * _FAIR_BUFFERS):
        _poll_fairly(gate, lambda: [s.number_of_queued_buffers for s in sources])
        if i % (2 * _FAIR_CHANNELS) == 0:
            _fill_randomly(rng, lambda j: sources[j].add(buffer.copy()), 3)
