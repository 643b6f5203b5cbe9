"""The simulated link: timing, send window, ordering, close semantics (ARCHITECTURE: Transport)."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.harness.credit_flow import CreditFlowHarness
from shuffle.kernel import sim
from shuffle.transport.sim_link import SimNetwork

BANDWIDTH = 1_000_000.0  # bytes/s: 1000 B take 1 ms
LATENCY = 0.010


async def open_pair(nursery, network, address="tm-b"):
    """(client stream, server stream) of one connection."""
    accepted = kernel.Queue()

    async def handler(stream):
        accepted.put_nowait(stream)

    await nursery.start(network.serve, address, handler)
    client = await network.connect(address)
    return client, await accepted.get()


async def test_frame_arrives_after_serialization_plus_latency(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 1 << 20)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        t0 = kernel.current_time()
        await client.send_all(b"x" * 1000)
        assert kernel.current_time() == t0  # accepted into the window at once
        assert await server.receive_some() == b"x" * 1000
        assert kernel.current_time() == pytest.approx(t0 + 0.001 + LATENCY)
        nursery.cancel_scope.cancel()


async def test_back_to_back_frames_serialize_one_after_another(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 1 << 20)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        t0 = kernel.current_time()
        for i in range(3):
            await client.send_all(bytes([i]) * 1000)
        arrivals = []
        for i in range(3):
            assert await server.receive_some() == bytes([i]) * 1000
            arrivals.append(kernel.current_time() - t0)
        assert arrivals == pytest.approx([0.011, 0.012, 0.013])
        # a frame sent when the link is idle again starts at once
        await kernel.sleep(1)
        t1 = kernel.current_time()
        await client.send_all(b"y" * 500)
        await server.receive_some()
        assert kernel.current_time() - t1 == pytest.approx(0.0005 + LATENCY)
        nursery.cancel_scope.cancel()


async def test_a_writer_cancelled_while_the_window_is_full_leaves_no_waiter(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 1000)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        await client.send_all(b"1" * 1000)  # the window is full
        for _ in range(100):
            with kernel.move_on_after(0.001):
                await client.send_all(b"2")
        assert client._out.writers == []
        assert await server.receive_some() == b"1" * 1000
        await client.send_all(b"3")  # the window has room again
        assert await server.receive_some() == b"3"
        nursery.cancel_scope.cancel()


async def test_reader_gets_everything_arrived_up_to_max_bytes(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 1 << 20)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        for part in (b"a" * 100, b"b" * 100, b"c" * 100):
            await client.send_all(part)
        await kernel.sleep(1)  # all three have arrived
        assert await server.receive_some(250) == b"a" * 100 + b"b" * 100 + b"c" * 50
        assert await server.receive_some() == b"c" * 50
        with pytest.raises(ValueError):
            await server.receive_some(0)
        nursery.cancel_scope.cancel()


async def test_full_window_blocks_the_writer_until_the_reader_reads(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 2500)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        t0 = kernel.current_time()
        await client.send_all(b"1" * 1000)
        await client.send_all(b"2" * 1000)
        await client.send_all(b"3" * 1000)  # writable (2000 < 2500): taken whole, overshooting
        returned_at = []

        async def fourth_send():
            await client.send_all(b"4" * 1000)
            returned_at.append(kernel.current_time())

        nursery.start_soon(fourth_send)
        await kernel.sleep(5)  # everything in the window has arrived long ago: still blocked
        assert returned_at == []
        assert await server.receive_some() == b"1" * 1000 + b"2" * 1000 + b"3" * 1000
        await sim.wait_all_tasks_blocked()
        assert returned_at == [t0 + 5]  # freed window space let the write in at once
        assert await server.receive_some() == b"4" * 1000
        assert kernel.current_time() == pytest.approx(t0 + 5 + 0.001 + LATENCY)
        nursery.cancel_scope.cancel()


async def test_a_blocked_connection_blocks_everything_sent_on_it(sim_kernel):
    """TCP-style backpressure: a second sender on the same connection waits behind the first."""
    network = SimNetwork(BANDWIDTH, LATENCY, 1000)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        lock = kernel.Lock()  # the Netty writer serializes writers of all channels
        done = []

        async def channel(name):
            async with lock:
                await client.send_all(name * 1000)
            done.append(name)

        nursery.start_soon(channel, b"a")
        nursery.start_soon(channel, b"b")
        with kernel.move_on_after(10):
            await kernel.sleep_forever()
        assert len(done) == 1  # the second channel cannot send: nobody reads
        assert len(await server.receive_some()) == 1000
        await kernel.sleep(1)
        assert len(done) == 2
        nursery.cancel_scope.cancel()


async def test_close_delivers_pending_data_then_eof(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 1 << 20)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        await client.send_all(b"z" * 2000)
        await client.aclose()
        with pytest.raises(kernel.ClosedResourceError):
            await client.send_all(b"more")
        with pytest.raises(kernel.ClosedResourceError):
            await client.receive_some()
        assert await server.receive_some() == b"z" * 2000
        assert await server.receive_some() == b""
        assert await server.receive_some() == b""
        with pytest.raises(kernel.BrokenResourceError):
            await server.send_all(b"reply")
        await client.aclose()  # closing twice is fine
        nursery.cancel_scope.cancel()


async def test_close_wakes_blocked_tasks(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 100)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        errors = []

        async def expect(exc, fn, *args):
            with pytest.raises(exc):
                await fn(*args)
            errors.append(exc)

        nursery.start_soon(expect, kernel.ClosedResourceError, server.receive_some)
        await client.send_all(b"w" * 1000)  # taken whole: the connection is now not writable
        nursery.start_soon(expect, kernel.BrokenResourceError, client.send_all, b"w" * 1000)
        await sim.wait_all_tasks_blocked()
        await server.aclose()
        await sim.wait_all_tasks_blocked()
        assert sorted(e.__name__ for e in errors) == ["BrokenResourceError", "ClosedResourceError"]
        nursery.cancel_scope.cancel()


async def test_concurrent_use_is_an_error(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 10)
    async with kernel.open_nursery() as nursery:
        client, server = await open_pair(nursery, network)
        await client.send_all(b"x" * 100)  # taken whole: the connection is now not writable
        nursery.start_soon(client.send_all, b"x" * 100)  # blocks for window space
        await sim.wait_all_tasks_blocked()
        with pytest.raises(kernel.BusyResourceError):
            await client.send_all(b"y")
        nursery.start_soon(idle_receive, client)  # the other end waits for data that never comes
        await sim.wait_all_tasks_blocked()
        with pytest.raises(kernel.BusyResourceError):
            await client.receive_some()
        nursery.cancel_scope.cancel()


async def idle_receive(stream):
    await stream.receive_some()


async def idle_handler(stream):
    await kernel.sleep_forever()


async def test_addresses(sim_kernel):
    network = SimNetwork(BANDWIDTH, LATENCY, 1000)
    with pytest.raises(ConnectionRefusedError):
        await network.connect("nobody")
    async with kernel.open_nursery() as nursery:
        address = await nursery.start(network.serve, ("tm", 1), idle_handler)
        assert address == ("tm", 1)
        with pytest.raises(OSError, match="already in use"):
            await network.serve(("tm", 1), idle_handler)
        t0 = kernel.current_time()
        await network.connect(("tm", 1))
        assert kernel.current_time() - t0 == pytest.approx(2 * LATENCY)  # one round trip
        nursery.cancel_scope.cancel()
    with pytest.raises(ConnectionRefusedError):
        await network.connect(("tm", 1))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.binary(min_size=0, max_size=3000), max_size=15),
    st.integers(1, 4000),
    st.integers(1, 5000),
)
def test_bytes_arrive_in_order_for_any_sizes(parts, window, max_bytes):
    async def main():
        network = SimNetwork(BANDWIDTH, LATENCY, window)
        async with kernel.open_nursery() as nursery:
            client, server = await open_pair(nursery, network)

            async def write():
                for part in parts:
                    await client.send_all(part)
                await client.aclose()

            nursery.start_soon(write)
            received = bytearray()
            while chunk := await server.receive_some(max_bytes):
                assert len(chunk) <= max_bytes
                received += chunk
            nursery.cancel_scope.cancel()
        return bytes(received), kernel.current_time()

    received, end = kernel.run(main, mode="sim")
    assert received == b"".join(parts)
    total = sum(map(len, parts))
    assert end >= total / BANDWIDTH + LATENCY - 1e-9 and math.isfinite(end)


def test_the_send_window_is_autotuned_from_bandwidth_and_round_trip_unless_set():
    # Flink leaves the socket buffers to the OS, which sizes the send buffer to ~2x the
    # congestion window: 2 x bandwidth x round trip, between 64 KiB and tcp_wmem's 4 MiB
    assert NetworkConfig().socket_window == 250_000  # 10 Gbit/s, 2 x 50 us
    assert NetworkConfig(link_bandwidth=1.25e6).socket_window == 64 * 1024  # 10 Mbit/s
    assert NetworkConfig(link_latency=0.01).socket_window == 4 * 1024 * 1024
    assert NetworkConfig(send_window=4096).socket_window == 4096


@pytest.mark.parametrize("latency, least, most", [(50e-6, 0.9, 1.02), (1e-3, 0.06, 0.15)])
async def test_a_network_bound_channel_fills_the_link_until_credit_limits_it(sim_kernel, latency, least, most):
    """Full buffers as fast as credit allows to a consumer that takes them at once: on the
    default link the connection carries ~the link rate (a 64 KiB window held it to ~70 %);
    at 1 ms credit per round trip bounds it, as in Flink (~7 %; a 64 KiB window: ~5 %)."""
    config = NetworkConfig(buffer_size=32 * 1024, link_latency=latency)
    async with CreditFlowHarness.open(config, trace=False) as h:
        h.auto_consume(0)
        await h.emit_buffers(0, 300)  # past the start: requests, credit, the window
        while len(h.consumed[0]) < 299:
            await kernel.sleep(0.0001)
        start = kernel.current_time()
        await h.emit_buffers(0, 2000)
        while len(h.consumed[0]) < 2299:
            await kernel.sleep(0.0001)
        rate = 2000 * config.buffer_size / (kernel.current_time() - start)
    assert least * config.link_bandwidth < rate < most * config.link_bandwidth
