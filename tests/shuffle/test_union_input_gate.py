"""UnionInputGate: wakeups, waiting on any gate, priority first (spec 4.7)."""

from shuffle import kernel
from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig


def _indexed(gates):
    """The harness's gates (one per consumer, each gate 0 of its task) as the gates of one
    task: a union needs distinct gate indexes, as Flink's."""
    for index, gate in enumerate(gates):
        gate.gate_index = index
    return gates


async def test_union_gate_sees_data_that_arrives_after_an_empty_poll(credit_flow):
    from shuffle.consumer.union_input_gate import UnionInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True)
    union = UnionInputGate(_indexed(h.gates))
    assert union.poll_next() is None  # nothing yet
    await h.emit_buffers(1, 1)
    h.flush(1)
    await h.settle()
    result = union.poll_next()
    assert result is not None and result.channel_info == (1, 0)
    result.buffer.recycle()


async def test_union_gate_waits_for_any_gate(credit_flow):
    from shuffle.consumer.union_input_gate import UnionInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True)
    union = UnionInputGate(_indexed(h.gates))
    assert union.poll_next() is None
    assert not union.is_available()
    woke = kernel.Event()

    async def task() -> None:
        await union.wait_available()
        woke.set()

    h._nursery.start_soon(task)
    await h.settle()
    assert not woke.is_set()
    await h.emit_buffers(0, 1)
    h.flush(0)
    with kernel.fail_after(1):
        await woke.wait()
    assert union.is_available()
    result = union.poll_next()
    assert result is not None and result.channel_info == (0, 0)
    result.buffer.recycle()


async def test_union_gate_serves_a_gate_with_a_priority_event_first(credit_flow):
    from shuffle.api.events import CancelCheckpointMarker
    from shuffle.consumer.union_input_gate import UnionInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True,
                          separate_producers=True)
    union = UnionInputGate(_indexed(h.gates))
    for channel in (0, 1):
        await h.emit_buffers(channel, 3)
        h.flush(channel)
    await h.settle()
    for expected in (0, 1):  # round-robin: gate 1 is now behind gate 0
        result = union.poll_next()
        assert result.channel_info.gate_index == expected
        result.buffer.recycle()
    h.targets[1][0].broadcast_event(CancelCheckpointMarker(1), is_priority=True)
    result = union.poll_next()
    assert result.channel_info.gate_index == 1 and isinstance(result.event, CancelCheckpointMarker)
    while (result := union.poll_next()) is not None:
        if result.buffer is not None:
            result.buffer.recycle()


# -- Flink's UnionInputGateTest, ported (scripted channels) ------------------------------


def _expect(union, is_buffer: bool, gate: int, channel: int, more_available: bool) -> None:
    """Flink's verifyBufferOrEvent against a union: kind, the gate's own channel info, and
    the more-available flag (nothing more to poll where it is false)."""
    result = union.poll_next()
    assert result is not None and result.is_buffer is is_buffer
    assert result.channel_info == (gate, channel) and result.more_available is more_available
    if result.buffer is not None:
        result.buffer.recycle()
    if not more_available:
        assert union.poll_next() is None


def _two_gates(n0: int, n1: int, notify_on_read: bool = False):
    from scripted_channel import scripted_gate

    from shuffle.consumer.union_input_gate import UnionInputGate

    g0, c0 = scripted_gate(n0, 0, notify_on_read)
    g1, c1 = scripted_gate(n1, 1, notify_on_read)
    return UnionInputGate([g0, g1]), (g0, g1), (c0, c1)


def test_union_alternates_between_gates_and_finishes_after_both():
    # Flink: UnionInputGateTest.testBasicGetNextLogic
    from shuffle.api.events import EndOfDataStatus

    union, (g0, g1), (a, b) = _two_gates(3, 5)
    assert union.num_channels == 8
    a[0].read_buffer().read_end_of_data().read_end_of_partition()
    b[2].read_buffer().read_end_of_data().read_end_of_partition()
    b[0].read_buffer()
    b[1].read_buffer()
    a[1].read_buffer()
    b[3].read_buffer()
    a[1].read_end_of_data()
    b[3].read_end_of_data()
    a[1].read_end_of_partition()
    b[3].read_end_of_partition()
    a[2].read_buffer().read_end_of_data().read_end_of_partition()
    b[4].read_buffer().read_end_of_data()
    b[1].read_end_of_data()
    b[0].read_end_of_data()
    b[4].read_end_of_partition()
    b[1].read_end_of_partition()
    b[0].read_end_of_partition()
    for gate, channels in ((g0, a), (g1, b)):
        for channel in channels:
            gate.notify_channel_non_empty(channel)

    for is_buffer, gate, channel in ((True, 0, 0), (True, 1, 0), (True, 0, 1), (True, 1, 1), (True, 0, 2),
                                     (True, 1, 2), (False, 0, 0), (True, 1, 3), (False, 0, 1), (True, 1, 4),
                                     (False, 0, 2), (False, 1, 0), (False, 0, 0), (False, 1, 1), (False, 0, 1)):
        _expect(union, is_buffer, gate, channel, True)
    assert union.has_received_end_of_data() is EndOfDataStatus.NOT_END_OF_DATA
    for gate, channel in ((1, 2), (0, 2), (1, 3), (1, 4)):
        _expect(union, False, gate, channel, True)
    assert union.has_received_end_of_data() is EndOfDataStatus.DRAINED
    assert not union.is_finished
    for channel in range(4):
        _expect(union, False, 1, channel, True)
    _expect(union, False, 1, 4, False)
    assert union.is_finished and union.poll_next() is None


def test_union_end_of_data_drains_only_if_every_gate_drained():
    # Flink: UnionInputGateTest.testDrainFlagComputation
    from shuffle.api.events import EndOfDataStatus, StopMode

    union, (g0, g1), (a, b) = _two_gates(2, 2)
    a[1].read_end_of_data(StopMode.DRAIN)
    a[0].read_end_of_data(StopMode.NO_DRAIN)
    b[1].read_end_of_data(StopMode.DRAIN)
    b[0].read_end_of_data(StopMode.DRAIN)
    for gate, channels in ((g0, a), (g1, b)):
        for channel in channels:
            gate.notify_channel_non_empty(channel)
    _expect(union, False, 0, 0, True)
    _expect(union, False, 1, 0, True)
    assert union.has_received_end_of_data() is EndOfDataStatus.NOT_END_OF_DATA
    _expect(union, False, 0, 1, True)
    _expect(union, False, 1, 1, True)
    assert union.has_received_end_of_data() is EndOfDataStatus.STOPPED


def test_union_turns_available_when_a_gate_gets_data():
    # Flink: UnionInputGateTest.testIsAvailable (InputGateTestBase.testIsAvailable)
    union, (g0, _), (a, _) = _two_gates(1, 1)
    assert not union.is_available() and union.poll_next() is None
    assert not union.is_available() and union.poll_next() is None
    a[0].read_buffer()
    g0.notify_channel_non_empty(a[0])
    assert union.is_available()


def test_union_stays_available_while_a_gate_has_more():
    # Flink: UnionInputGateTest.testAvailability
    union, _, (a, _) = _two_gates(1, 1, notify_on_read=True)
    a[0].read_buffer(1)
    assert union.is_available()
    a[0].read_buffer(2)
    assert union.is_available()
    result = union.poll_next()
    assert result.buffer.size == 1
    result.buffer.recycle()
    assert union.is_available()
    union.poll_next().buffer.recycle()


def test_union_is_available_once_every_gate_finished():
    # Flink: UnionInputGateTest.testIsAvailableAfterFinished
    union, (g0, g1), (a, b) = _two_gates(1, 1)
    assert not union.is_available() and union.poll_next() is None
    a[0].read_end_of_partition()
    b[0].read_end_of_partition()
    g0.notify_channel_non_empty(a[0])
    g1.notify_channel_non_empty(b[0])
    assert union.poll_next() is not None
    assert union.is_available()


def test_union_channels_are_numbered_over_the_gates_in_order():
    # Flink: UnionInputGateTest.testGetChannelWithShiftedGateIndexes
    from scripted_channel import scripted_gate

    from shuffle.consumer.union_input_gate import UnionInputGate

    (g2, (c2,)), (g3, (c3,)) = scripted_gate(1, 2), scripted_gate(1, 3)
    union = UnionInputGate([g2, g3])
    assert union.get_channel(0) is c2 and union.get_channel(1) is c3


def test_union_notified_without_data_turns_unavailable_after_an_empty_poll():
    # Flink: UnionInputGateTest.testEmptyPull
    union, _, (a, _) = _two_gates(1, 1, notify_on_read=True)
    a[0].notify_channel_non_empty()
    assert union.is_available()
    assert union.poll_next() is None
    assert not union.is_available()


def test_union_queues_gates_in_the_order_their_data_arrived():
    # Flink's UnionInputGate queues a gate when its availability future completes
    # (thenRun), so a gate that got data first is polled first, whatever its position.
    union, (g0, g1), (a, b) = _two_gates(1, 1)
    assert union.poll_next() is None
    b[0].read_buffer(next_data_type=DataType.NONE)
    g1.notify_channel_non_empty(b[0])
    a[0].read_buffer(next_data_type=DataType.NONE)
    g0.notify_channel_non_empty(a[0])
    _expect(union, True, 1, 0, True)
    _expect(union, True, 0, 0, False)
