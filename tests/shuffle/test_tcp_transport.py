"""The TCP transport over loopback (bounded by trio.fail_after so nothing hangs)."""

import socket

import pytest
import trio

from shuffle.transport.tcp import TcpTransport, format_address, parse_address

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
