"""The TCP transport over loopback (bounded by trio.fail_after so nothing hangs)."""

import socket

import pytest
import trio

from shuffle.transport import tcp
from shuffle.transport.tcp import BUSY_POLL_MAX_WAIT, BUSY_POLL_PASSES, FAIR_STREAK, SocketIO, TcpTransport, format_address, parse_address, socket_io

pytestmark = pytest.mark.tcp


async def echo(stream):
    async with stream:
        while data := await stream.receive_some():
            await stream.send_all(data)


def nodelay(stream):
    return stream.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_serve_reports_the_bound_address_and_echoes():
    transport = TcpTransport()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(transport.serve, ":0", echo)
            host, port = parse_address(address)
            assert host == "127.0.0.1" and port > 0
            stream = await transport.connect(address)
            assert nodelay(stream)
            payload = bytes(range(256)) * 4096  # 1 MiB, more than any socket buffer
            received = bytearray()

            async def read_all():
                while len(received) < len(payload):
                    received.extend(await stream.receive_some())

            async with trio.open_nursery() as io:
                io.start_soon(read_all)
                await stream.send_all(payload)
            assert received == payload
            await stream.aclose()
            nursery.cancel_scope.cancel()


async def test_accepted_streams_have_nodelay():
    transport = TcpTransport()
    seen = []

    async def handler(stream):
        seen.append(nodelay(stream))
        await stream.aclose()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(transport.serve, "127.0.0.1:0", handler)
            stream = await transport.connect(address)
            assert await stream.receive_some() == b""  # the server closed after checking
            assert seen == [True]
            nursery.cancel_scope.cancel()


async def test_connect_to_a_closed_port_fails():
    transport = TcpTransport()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(transport.serve, ":0", echo)
            nursery.cancel_scope.cancel()
        with pytest.raises(OSError):
            await transport.connect(address)


def test_addresses():
    assert parse_address("10.0.0.7:6121") == ("10.0.0.7", 6121)
    assert parse_address("[::1]:80") == ("::1", 80)
    assert format_address("::1", 80) == "[::1]:80"
    assert format_address("localhost", 1) == "localhost:1"
    with pytest.raises(ValueError, match="'nohost'"):
        parse_address("nohost")


def stream_pair():
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def read_into(io: SocketIO, received: bytearray, total: int) -> None:
    """Read from `io` into `received` until it holds `total` bytes."""
    buffer = memoryview(bytearray(100_000))
    while len(received) < total:
        count = await io.receive_into(buffer)
        received.extend(buffer[:count])


async def test_socket_io_moves_more_than_the_socket_buffers_hold_both_ways():
    left, right = stream_pair()
    io_left, io_right = SocketIO(left), SocketIO(right)
    payload = bytes(range(256)) * 8192  # 2 MiB: the writer must wait for the reader
    received = bytearray()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_into, io_right, received, len(payload))
            await io_left.send_all(payload)
    assert received == payload
    await left.aclose()
    with trio.fail_after(10):
        assert await io_right.receive_into(memoryview(bytearray(10))) == 0  # the peer's EOF


async def test_socket_io_writes_parts_in_order_across_partial_writes():
    left, right = stream_pair()
    io_left, io_right = SocketIO(left), SocketIO(right)
    parts = [b"head", memoryview(bytes(range(256)) * 8192), b"", bytearray(b"tail")]  # 2 MiB in the middle
    expected = b"".join(parts)
    received = bytearray()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_into, io_right, received, len(expected))
            await io_left.send_parts(parts)
    assert received == expected and parts == []  # what was written is taken off the list


async def test_socket_io_errors_are_trios():
    left, right = stream_pair()
    io_left = SocketIO(left)
    await right.aclose()
    with pytest.raises(trio.BrokenResourceError):
        for _ in range(100):  # the first writes may still land in the socket buffer
            await io_left.send_all(b"x" * 65536)
    await left.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await io_left.receive_into(memoryview(bytearray(10)))
    with pytest.raises(trio.ClosedResourceError):
        await io_left.send_all(b"x")


async def test_socket_io_yields_only_every_fair_streak_calls_while_bytes_are_waiting():
    left, right = stream_pair()
    reads = 3 * FAIR_STREAK + 1  # a checkpoint before reads 17, 33 and 49
    await left.send_all(bytes(reads))  # all there before the first read
    io, one = SocketIO(right), memoryview(bytearray(1))
    other_steps = 0
    done = False

    async def other():
        nonlocal other_steps
        while not done:
            other_steps += 1
            await trio.lowlevel.checkpoint()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.lowlevel.checkpoint()  # `other` starts
            other_steps = 0
            for _ in range(reads):
                assert await io.receive_into(one) == 1
            done = True
    # the other task ran: a step after each FAIR_STREAK reads (give or take trio's order of
    # the tasks of one batch), not one per read
    assert 2 <= other_steps <= 4


class _PolledReads:
    """Reads through one `SocketIO` while a peer task writes after some scheduler passes;
    counts the reads' waits for readability, on a clock the test moves."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.left, self.io_stream = stream_pair()
        self.io = SocketIO(self.io_stream)
        self.waits = 0
        self.now = 0.0
        wait_readable = trio.lowlevel.wait_readable

        async def counting_wait_readable(sock: object) -> None:
            self.waits += 1
            await wait_readable(sock)

        monkeypatch.setattr(trio.lowlevel, "wait_readable", counting_wait_readable)
        monkeypatch.setattr(trio, "current_time", lambda: self.now)

    async def read(self, passes: int, waited: float = 0.0) -> int:
        """One read whose data the peer writes after `passes` passes and `waited` seconds
        (of the test's clock); how often it waited for readability."""
        before = self.waits

        async def peer() -> None:
            for _ in range(passes):
                await trio.lowlevel.checkpoint()
            self.now += waited
            await self.left.send_all(b"credit")

        buffer = memoryview(bytearray(16))
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(peer)
                count = await self.io.receive_into(buffer)
        assert bytes(buffer[:count]) == b"credit"
        return self.waits - before

    async def aclose(self) -> None:
        await self.left.aclose()
        await self.io_stream.aclose()


async def test_socket_io_busy_polls_an_empty_socket_before_it_waits(monkeypatch):
    reads = _PolledReads(monkeypatch)
    # an answer within the polling passes is read without sleeping in epoll
    assert await reads.read(2) == 0
    # a later one: the read waits for readability once, then reads it
    assert await reads.read(3 * BUSY_POLL_PASSES) == 1
    assert await reads.read(2) == 0  # that wait was short: the connection still polls
    await reads.aclose()


async def test_socket_io_offers_the_core_to_other_processes_only_after_its_own_tasks(monkeypatch):
    yields = []
    monkeypatch.setattr(tcp.os, "sched_yield", lambda: yields.append(1))
    reads = _PolledReads(monkeypatch)
    assert await reads.read(3 * BUSY_POLL_PASSES) == 1
    # one between passes (none before the first: the process's own tasks go first), then the wait
    assert len(yields) == BUSY_POLL_PASSES - 1
    yields.clear()
    await reads.left.send_all(b"credit")
    await reads.read(0)  # the bytes are there: no pass, no yield
    assert not yields
    await reads.aclose()


async def test_socket_io_stops_polling_an_idle_connection_until_its_peer_answers_quickly(monkeypatch):
    reads = _PolledReads(monkeypatch)
    assert await reads.read(3 * BUSY_POLL_PASSES, waited=100 * BUSY_POLL_MAX_WAIT) == 1  # a long wait
    assert await reads.read(2) == 1  # so the next read sleeps at once (its wait is short)
    assert await reads.read(2) == 0  # and polling resumes
    await reads.aclose()


async def test_socket_io_is_for_tcp_streams_only():
    left, right = stream_pair()
    assert isinstance(socket_io(left), SocketIO)
    assert socket_io(object()) is None
    await left.aclose()
    await right.aclose()
