"""UnionInputGate: wakeups, waiting on any gate, priority first (spec 4.7)."""

from shuffle import kernel
from shuffle.config import NetworkConfig


async def test_union_gate_sees_data_that_arrives_after_an_empty_poll(credit_flow):
    from shuffle.consumer.union_input_gate import UnionInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True)
    union = UnionInputGate(h.gates)
    assert union.poll_next() is None  # nothing yet: both gates leave the queue
    await h.emit_buffers(1, 1)
    h.flush(1)
    await h.settle()
    result = union.poll_next()
    assert result is not None and result.channel_info.channel_index == 1
    result.buffer.recycle()


async def test_union_gate_waits_for_any_gate(credit_flow):
    from shuffle.consumer.union_input_gate import UnionInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True)
    union = UnionInputGate(h.gates)
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
    assert result is not None and result.channel_info.channel_index == 0
    result.buffer.recycle()


async def test_union_gate_serves_a_gate_with_a_priority_event_first(credit_flow):
    from shuffle.api.events import CancelCheckpointMarker
    from shuffle.consumer.union_input_gate import UnionInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True,
                          separate_producers=True)
    union = UnionInputGate(h.gates)
    for channel in (0, 1):
        await h.emit_buffers(channel, 3)
        h.flush(channel)
    await h.settle()
    for expected in (0, 1):  # round-robin: gate 1 is now behind gate 0
        result = union.poll_next()
        assert result.channel_info.channel_index == expected
        result.buffer.recycle()
    h.targets[1][0].broadcast_event(CancelCheckpointMarker(1), is_priority=True)
    result = union.poll_next()
    assert result.channel_info.channel_index == 1 and isinstance(result.event, CancelCheckpointMarker)
    while (result := union.poll_next()) is not None:
        if result.buffer is not None:
            result.buffer.recycle()
