"""The `Transport` over real TCP sockets (realtime mode), with TCP_NODELAY on every stream.

Addresses are `"host:port"` strings (`"[::1]:port"` for IPv6). Servers bind to the host
of the address, or to the transport's `bind_host` (127.0.0.1 by default) when the host is
empty; port 0 picks a free port, and `serve` reports the bound address.

`SocketIO` reads and writes such a stream's socket for the Netty layer's hot path.
"""

from __future__ import annotations

import errno
import os
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


#: Reads (or writes) in a row that did not have to wait before `SocketIO` yields once anyway.
FAIR_STREAK = 16

#: Scheduler passes a read that found the socket empty spends polling it before it sleeps
#: in epoll (busy polling, as Linux's `net.core.busy_read` does in the kernel). Credit
#: makes the stack latency-bound: the peer's answer (an AddCredit, the next buffer) is
#: usually tens of microseconds away, and a process asleep in epoll until then pays an
#: idle core's wakeup (~50 us on our 2-core machines) on every round trip. A pass runs the
#: process's other runnable tasks; with none, 32 passes take ~100 us. Between passes that
#: brought nothing, the read offers the core to any other runnable process (`sched_yield`)
#: and reads again at once, as the kernel's own busy polling gives way when another task
#: needs the CPU: where the peer shares this core (more busy processes than cores),
#: spinning would keep it from answering. The passes are counted, not timed: with busy
#: neighbours, each offer may last a time slice before the read comes back.
BUSY_POLL_PASSES = 32

#: A connection busy-polls only while its peer answers quickly: after a wait in epoll
#: longer than this (seconds), its reads sleep at once until a wait is short again. An
#: idle connection (a buffer per 100 ms flush) so costs no polling, which matters where
#: one process holds many (a realtime cluster's TaskManagers all run in one).
BUSY_POLL_MAX_WAIT = 0.001


class SocketIO:
    """Non-blocking reads and writes on a TCP stream's socket, yielding only when needed.

    trio's `SocketStream` passes through the scheduler on every `receive_some` and
    `send_all`, also when the socket gives or takes the bytes at once: one scheduler pass
    per frame or read on the Netty hot path. Here a call waits (and so yields) only when
    the socket would block; after `FAIR_STREAK` calls in a row that did not, the next call
    yields once first (a checkpoint: a cancellation delivered there comes before any byte
    of the call moved; one delivered while waiting for the socket may leave a write
    partly done, as with trio's `send_all`), so a busy connection cannot starve the other
    tasks. A read that finds the socket empty polls it for `BUSY_POLL_PASSES` scheduler
    passes (offering the core to other processes between them), before it waits for
    readability, while the connection is busy (its last wait in epoll, if any, was under
    `BUSY_POLL_MAX_WAIT`). TCP exists only in realtime mode,
    so this calls trio directly. One task reads and one task writes at a time (the Netty
    layer's reader loop and its `OutboundWriter`). Errors are trio's: `ClosedResourceError`
    once the socket is closed, `BrokenResourceError` for a failed connection.
    """

    __slots__ = ("_socket", "_read_streak", "_write_streak", "_busy_poll")

    def __init__(self, stream: trio.SocketStream) -> None:
        self._socket = stream.socket
        self._read_streak = 0
        self._write_streak = 0
        self._busy_poll = True

    async def receive_into(self, buffer: memoryview) -> int:
        """Read what is there (at most `len(buffer)` bytes) into `buffer`, waiting for at least
        one byte; 0 at the peer's EOF."""
        if self._read_streak >= FAIR_STREAK:
            self._read_streak = 0
            await trio.lowlevel.checkpoint()
        sock = self._socket
        polls = 0 if self._busy_poll else BUSY_POLL_PASSES
        offered = True  # the first pass runs this process's tasks before the core is offered
        while True:
            try:
                count = os.readv(sock.fileno(), (buffer,))
                break
            except BlockingIOError:
                self._read_streak = 0
                if polls < BUSY_POLL_PASSES:
                    if not offered:
                        offered = True
                        os.sched_yield()
                        continue  # read again at once: the peer may have run meanwhile
                    offered = False
                    polls += 1
                    await trio.lowlevel.checkpoint()
                else:
                    started = trio.current_time()
                    await trio.lowlevel.wait_readable(sock)
                    self._busy_poll = trio.current_time() - started < BUSY_POLL_MAX_WAIT
            except OSError as exc:
                raise _stream_error(exc) from exc
        self._read_streak += 1
        return count

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of `data`, waiting while the socket's send buffer is full."""
        await self.send_parts([data])

    async def send_parts(self, parts: list[bytes | bytearray | memoryview]) -> None:
        """Write `parts` in order, one gathered write where the socket takes them all (a
        frame's header and the network buffer holding its payload, without joining them).
        What is written is taken off `parts`: a call cancelled (or failed) midway leaves
        the rest there."""
        if self._write_streak >= FAIR_STREAK:
            self._write_streak = 0
            await trio.lowlevel.checkpoint()
        sock = self._socket
        while True:
            try:
                sent = os.writev(sock.fileno(), parts)
            except BlockingIOError:
                self._write_streak = 0
                await trio.lowlevel.wait_writable(sock)
                continue
            except OSError as exc:
                raise _stream_error(exc) from exc
            parts[:] = _unsent(parts, sent)
            if not parts:
                break
        self._write_streak += 1

    def write_now(self, parts: list[bytes | bytearray | memoryview]) -> None:
        """Write what the socket takes of `parts` without waiting, taking it off `parts`.
        (No checkpoint: the caller is no writer task of its own.)"""
        try:
            sent = os.writev(self._socket.fileno(), parts)
        except BlockingIOError:
            return
        except OSError as exc:
            raise _stream_error(exc) from exc
        parts[:] = _unsent(parts, sent)


def _unsent(parts: list[bytes | bytearray | memoryview], sent: int) -> list[bytes | bytearray | memoryview]:
    """What is left of `parts` after the first `sent` bytes were written."""
    for index, part in enumerate(parts):
        if sent < len(part):
            return [memoryview(part)[sent:], *parts[index + 1:]]
        sent -= len(part)
    return []


def _stream_error(exc: OSError) -> Exception:
    """trio's error for a failed socket call: closed by us, or a broken connection."""
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("this socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {exc}")


def socket_io(stream: Any) -> SocketIO | None:
    """A `SocketIO` for a TCP stream; None for any other stream (the simulated link)."""
    return SocketIO(stream) if isinstance(stream, trio.SocketStream) else None
