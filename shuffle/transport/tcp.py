"""The `Transport` over real TCP sockets (realtime mode), with TCP_NODELAY on every stream.

Addresses are `"host:port"` strings (`"[::1]:port"` for IPv6). Servers bind to the host
of the address, or to the transport's `bind_host` (127.0.0.1 by default) when the host is
empty; port 0 picks a free port, and `serve` reports the bound address.
"""

from __future__ import annotations

import socket
from typing import Any

import trio

from shuffle.transport import StreamHandler


def parse_address(address: str) -> tuple[str, int]:
    """`"host:port"` to `(host, port)`; `ValueError` naming the address if malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _set_nodelay(stream: trio.SocketStream) -> None:
    stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)


class TcpTransport:
    """Serve and connect over TCP."""

    def __init__(self, bind_host: str = "127.0.0.1") -> None:
        self.bind_host = bind_host

    async def serve(self, address: str, handler: StreamHandler, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Accept connections until cancelled, each handled by `handler(stream)`."""
        host, port = parse_address(address)
        listeners = await trio.open_tcp_listeners(port, host=host or self.bind_host)

        async def handle(stream: trio.SocketStream) -> None:
            _set_nodelay(stream)
            await handler(stream)

        bound_host, bound_port = listeners[0].socket.getsockname()[:2]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, handle, listeners)
            task_status.started(format_address(bound_host, bound_port))

    async def connect(self, address: str) -> trio.SocketStream:
        """A TCP stream to `address` (an `OSError` if the connection fails)."""
        host, port = parse_address(address)
        stream = await trio.open_tcp_stream(host, port)
        _set_nodelay(stream)
        return stream
