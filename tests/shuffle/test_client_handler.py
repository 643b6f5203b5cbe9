"""The consumer side of a connection: stalls, releases and corrupted streams (spec 3.5)."""

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
