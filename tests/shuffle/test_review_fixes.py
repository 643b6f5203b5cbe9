"""Regression tests for network-stack divergences and hangs found in review."""

import pytest

from shuffle import kernel
from shuffle.config import NetworkConfig


async def _drive(h, channels, rounds: int) -> None:
    with kernel.fail_after(10):
        for _ in range(rounds):
            for channel in channels:
                if h.producer_available(channel):
                    await h.emit_buffers(channel, 1)
            await h.settle(0.001)
        await h.settle()


async def test_tcp_mode_releasing_a_channel_that_stalls_the_connection_unblocks_it(credit_flow):
    # Pre-credit mode: channel 0's receiver is out of buffers, so the connection's reader
    # waits for one of its buffers. Releasing that channel (its task ends) must end the
    # wait, or every other channel on the connection hangs forever.
    cfg = NetworkConfig(buffer_size=4096, flow_control="tcp", send_window=16 * 1024)
    h = await credit_flow(config=cfg, channels=2, separate_producers=True)
    hog = [h.gates[0].buffer_pool.request_buffer() for _ in range(8)]
    h.auto_consume(1)
    await _drive(h, (0, 1), 40)
    # Channel 0's task holds both its (exclusive) buffers while it deserializes them.
    held = [h.gates[0].poll_next().buffer for _ in range(2)]
    await h.settle()
    stalled = len(h.consumed[1])
    assert not h.producer_available(1)
    h.gates[0].close()
    for buffer in held + hog:
        buffer.recycle()
    await _drive(h, (1,), 20)
    assert len(h.consumed[1]) > stalled + 10


async def test_destroying_a_pool_wakes_tasks_waiting_for_its_availability(sim_kernel):
    # Flink's lazyDestroy completes the availability future: a task soft back-pressured on a
    # partition that gets released must wake (and then fail on its next request), not hang.
    from shuffle.buffer.network_buffer_pool import NetworkBufferPool

    network = NetworkBufferPool(8, 1024)
    pool = network.create_buffer_pool(2, 2, num_subpartitions=1)
    builders = [pool.request_buffer_builder(0) for _ in range(2)]
    assert not pool.is_available()
    woke = kernel.Event()

    async def waiter() -> None:
        await pool.wait_available()
        woke.set()

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await kernel.sleep(1)
        pool.destroy()
        for builder in builders:
            builder.close()
        with kernel.fail_after(1):
            await woke.wait()
    assert network.num_available_segments == 8


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


async def test_local_channel_reports_the_producer_queue_as_input_queue_length(credit_flow):
    # Spec 7.3 / LocalInputChannel.unsynchronizedGetNumberOfQueuedBuffers: the view's queue
    # (FLINK-12576 fixed the old 0); only the buffer *usages* stay 0 for local channels.
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), local=True)
    await h.emit_buffers(0, 3)
    await h.settle()
    assert h.sender(0).queued == 3
    assert h.gates[0].input_queue_length == 3
    assert h.gates[0].floating_buffers_usage()[0] == 0


async def test_corrupted_stream_fails_the_connection_channels_not_the_task_manager(credit_flow):
    # Flink's client handler turns any non-IO exception into a LocalTransportException
    # that fails every channel of the connection; it must not escape the TaskManager.
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), transport="sim_frames")
    (server,) = h.producer.connection_manager._server_handlers
    await server.stream.send_all(b"\x00\x00\x00\x10" + b"\x00" * 12)
    await h.settle()
    channel = h.channel(0)
    assert channel.error is not None
    assert "corrupted" in str(channel.error)


async def test_a_failed_connection_is_replaced_not_reused(credit_flow):
    # Flink's PartitionRequestClientFactory drops a client whose handler has a channel error
    # and connects anew; reusing it fails (or strands) every later channel.
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    manager = h.consumer.connection_manager
    address = h.channel(0).producer_address
    failed = manager.client(address)
    (server,) = h.producer.connection_manager._server_handlers
    await server.stream.send_all(b"\x00\x00\x00\x10" + b"\x00" * 12)
    await h.settle()
    assert failed.channel_error is not None
    fresh = await manager.create_partition_request_client(address)
    assert fresh is not failed and fresh.channel_error is None


async def test_emit_after_finish_is_refused(credit_flow):
    h = await credit_flow()
    h.finish()
    with pytest.raises(RuntimeError, match="already finished"):
        await h.emit(0, 10)

