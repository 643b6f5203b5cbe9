"""CheckpointedInputGate: priority events first, with one gate or several (spec 5.2)."""

from shuffle.config import NetworkConfig


def _task_gates(h):
    """The harness's gates (each gate 0 of its consumer) as the gates 0, 1, ... of one task."""
    for index, gate in enumerate(h.gates):
        gate.gate_index = index
    return h.gates


async def test_one_gate_serves_a_priority_event_before_queued_data(credit_flow):
    """One gate alone is polled without the union's scan for gates with priority events: the
    gate puts a channel with one ahead of those with data itself."""
    from shuffle.api.events import CancelCheckpointMarker
    from taskmgr.checkpointing.checkpointed_input_gate import CheckpointedInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True,
                          separate_producers=True, one_gate=True)
    checkpointed = CheckpointedInputGate(h.gates, input_index=0)
    for channel in (0, 1):
        await h.emit_buffers(channel, 3)
        h.flush(channel)
    await h.settle()
    first = checkpointed.poll_next()
    assert first.channel_info.channel_index == 0 and first.buffer is not None
    first.buffer.recycle()
    h.targets[1][0].broadcast_event(CancelCheckpointMarker(1), is_priority=True)
    assert checkpointed.has_priority_events
    result = checkpointed.poll_next()
    assert result.channel_info.channel_index == 1 and isinstance(result.event, CancelCheckpointMarker)
    assert result.has_priority
    while (result := checkpointed.poll_next()) is not None:
        assert result.buffer is not None  # the rest is data, in queue order
        result.buffer.recycle()


async def test_several_gates_serve_the_gate_with_a_priority_event_first(credit_flow):
    from shuffle.api.events import CancelCheckpointMarker
    from taskmgr.checkpointing.checkpointed_input_gate import CheckpointedInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True,
                          separate_producers=True)
    checkpointed = CheckpointedInputGate(_task_gates(h), input_index=0)
    for channel in (0, 1):
        await h.emit_buffers(channel, 3)
        h.flush(channel)
    await h.settle()
    first = checkpointed.poll_next()  # round-robin: gate 0 first, then it is gate 1's turn
    assert first.buffer is not None
    first.buffer.recycle()
    h.targets[0][0].broadcast_event(CancelCheckpointMarker(1), is_priority=True)
    assert h.gates[0].has_priority_events
    result = checkpointed.poll_next()
    assert isinstance(result.event, CancelCheckpointMarker) and result.has_priority
    assert not h.gates[0].has_priority_events  # it was gate 0's
    while (result := checkpointed.poll_next()) is not None:
        if result.buffer is not None:
            result.buffer.recycle()


async def test_several_gates_are_read_in_the_order_their_data_arrived(credit_flow):
    # Flink reads a task's several gates through a UnionInputGate, which queues a gate when
    # its data arrives: gate 1, whose buffer came first, is read before gate 0.
    from taskmgr.checkpointing.checkpointed_input_gate import CheckpointedInputGate

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, local=True,
                          separate_producers=True)
    checkpointed = CheckpointedInputGate(_task_gates(h), input_index=0)
    assert checkpointed.poll_next() is None
    for channel in (1, 0):
        await h.emit_buffers(channel, 1)
        h.flush(channel)
        await h.settle()
    order = []
    while (result := checkpointed.poll_next()) is not None:
        order.append(result.channel_info.gate_index)
        result.buffer.recycle()
    assert order == [1, 0]
