"""An in-memory network link in trio (virtual) time.

Each connection is a pair of `SimStream`s; each direction models a link plus a socket
buffer:

- bytes accepted by `send_all` serialize onto the link one chunk after another, taking
  `size / bandwidth` each, then arrive `latency` later (FIFO, so arrivals never reorder);
- while `send_window_bytes` or more are unread by the receiver (in flight or arrived) the
  connection is not writable: `send_all` blocks, and with it every channel multiplexed on
  the connection, as TCP-style backpressure does; a writable connection takes a whole
  write (Netty's high-watermark rule), so the window may overshoot by one write; bytes
  leave the window when the receiver reads them;
- `receive_some` waits until the first chunk has arrived and returns every arrived chunk
  up to `max_bytes`.

No background tasks: a reader sleeps until the next arrival (one wakeup per batch), a
writer sleeps until the reader frees window space. Connecting takes one round trip;
closing sends EOF behind the data already accepted, and the peer's writes then fail.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Hashable
from typing import Any

import trio

from shuffle.transport import StreamHandler

DEFAULT_RECEIVE_SIZE = 65536
_EOF = None  # chunk marking the end of the stream (the peer's FIN)


class _Direction:
    """Bytes travelling one way on a connection, with their arrival times.

    A waiting reader sleeps in a cancel scope kept here, so the writer can move its wakeup
    to an arrival time (`deadline`) and a close can wake it (`cancel()`) without extra
    tasks; a writer waiting for window space parks in `writer_lot`.
    """

    __slots__ = ("chunks", "unread", "link_free_at", "reader_wait", "writer_lot", "reader_closed")

    def __init__(self) -> None:
        self.chunks: deque[tuple[float, bytes | None]] = deque()  # (arrival time, data or EOF)
        self.unread = 0  # data bytes in the window
        self.link_free_at = -math.inf  # when the link finishes serializing what it has
        self.reader_wait: trio.CancelScope | None = None
        self.writer_lot = trio.lowlevel.ParkingLot()
        self.reader_closed = False


async def _wait_for_arrival(direction: _Direction, deadline: float) -> None:
    """Sleep until `deadline`, or until the writer or a close moves or cancels it."""
    with trio.CancelScope(deadline=deadline) as scope:
        direction.reader_wait = scope
        try:
            await trio.sleep_forever()
        finally:
            direction.reader_wait = None


class SimStream(trio.abc.Stream):
    """One end of a simulated connection."""

    __slots__ = ("_network", "_out", "_in", "_closed", "_sending", "_receiving")

    def __init__(self, network: SimNetwork, out: _Direction, inbound: _Direction) -> None:
        self._network = network
        self._out = out
        self._in = inbound
        self._closed = False
        self._sending = False
        self._receiving = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Accept `data` into the window (waiting for space while it is full)."""
        self._enter_send()
        try:
            out = self._out
            network = self._network
            window = network.send_window_bytes
            data = bytes(data)  # the caller may reuse its buffer once send_all returns
            blocked = False
            self._check_writable()
            while out.unread >= window:
                await out.writer_lot.park()
                blocked = True
                self._check_writable()
            if not data:
                await trio.lowlevel.checkpoint()
                return
            # A writable connection takes the whole write, as Netty queues a message while
            # below its high watermark; the window may overshoot by that one write.
            out.unread += len(data)
            arrival = network._schedule(out, len(data))
            if not out.chunks and out.reader_wait is not None:
                out.reader_wait.deadline = arrival
            out.chunks.append((arrival, data))
            if not blocked:
                await trio.lowlevel.checkpoint()
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        self._enter_send()
        try:
            self._check_writable()
            if self._out.unread < self._network.send_window_bytes:
                await trio.lowlevel.checkpoint()
                return
            await self._out.writer_lot.park()
            self._check_writable()
        finally:
            self._sending = False

    def _enter_send(self) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is already sending on this stream")
        self._sending = True

    def _check_writable(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this stream was closed")
        if self._out.reader_closed:
            raise trio.BrokenResourceError("the peer closed the connection")

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Wait for the next arrival; return the arrived bytes (at most `max_bytes`), b"" at EOF."""
        max_bytes = DEFAULT_RECEIVE_SIZE if max_bytes is None else operator.index(max_bytes)
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        if self._receiving:
            raise trio.BusyResourceError("another task is already receiving on this stream")
        self._receiving = True
        try:
            inbound = self._in
            chunks = inbound.chunks
            waited = False
            while True:
                if self._closed:
                    raise trio.ClosedResourceError("this stream was closed")
                deadline = chunks[0][0] if chunks else math.inf
                if deadline <= trio.current_time():
                    break
                await _wait_for_arrival(inbound, deadline)
                waited = True
            if not waited:
                await trio.lowlevel.checkpoint()
            return self._take_arrived(inbound, max_bytes)
        finally:
            self._receiving = False

    def _take_arrived(self, inbound: _Direction, max_bytes: int) -> bytes:
        chunks = inbound.chunks
        now = trio.current_time()
        parts: list[bytes] = []
        taken = 0
        while chunks and taken < max_bytes:
            arrival, chunk = chunks[0]
            if arrival > now or chunk is _EOF:
                break
            room = max_bytes - taken
            if len(chunk) > room:
                parts.append(chunk[:room])
                chunks[0] = (arrival, chunk[room:])
                taken = max_bytes
                break
            chunks.popleft()
            parts.append(chunk)
            taken += len(chunk)
        inbound.unread -= taken
        if taken:
            inbound.writer_lot.unpark_all()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def aclose(self) -> None:
        """Close this end: data already sent still reaches the peer, then EOF; unread data is dropped."""
        if not self._closed:
            self._closed = True
            out, inbound = self._out, self._in
            arrival = self._network._schedule(out, 0)
            if not out.chunks and out.reader_wait is not None:
                out.reader_wait.deadline = arrival
            out.chunks.append((arrival, _EOF))
            inbound.reader_closed = True
            inbound.chunks.clear()
            inbound.unread = 0
            if inbound.reader_wait is not None:
                inbound.reader_wait.cancel()  # our own blocked reader: closed
            out.writer_lot.unpark_all()  # our own blocked writer: closed
            inbound.writer_lot.unpark_all()  # the peer's blocked writer: broken
        await trio.lowlevel.checkpoint()


class SimNetwork:
    """Simulated links between named endpoints: `serve` at an address, `connect` to it."""

    def __init__(self, bandwidth_bytes_per_s: float, latency_s: float, send_window_bytes: int) -> None:
        if bandwidth_bytes_per_s <= 0 or latency_s < 0 or send_window_bytes < 1:
            raise ValueError("bandwidth must be > 0, latency >= 0 and send window >= 1 byte")
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.latency_s = latency_s
        self.send_window_bytes = send_window_bytes
        self._listeners: dict[Hashable, tuple[trio.Nursery, StreamHandler]] = {}

    def _schedule(self, direction: _Direction, size: int) -> float:
        """Put `size` bytes on the link now; returns when they arrive."""
        start = max(trio.current_time(), direction.link_free_at)
        direction.link_free_at = start + size / self.bandwidth_bytes_per_s
        return direction.link_free_at + self.latency_s

    async def serve(
        self, address: Hashable, handler: StreamHandler, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections at `address` until cancelled; each runs `handler(stream)`."""
        if address in self._listeners:
            raise OSError(f"address already in use: {address!r}")
        async with trio.open_nursery() as nursery:
            self._listeners[address] = (nursery, handler)
            try:
                task_status.started(address)
                await trio.sleep_forever()
            finally:
                del self._listeners[address]

    async def connect(self, address: Hashable) -> SimStream:
        """Connect to the server at `address`; `ConnectionRefusedError` if nobody serves it."""
        if address not in self._listeners:
            await trio.lowlevel.checkpoint()
            raise ConnectionRefusedError(f"connection refused: nothing serves {address!r}")
        await trio.sleep(2 * self.latency_s)
        listener = self._listeners.get(address)
        if listener is None:
            raise ConnectionRefusedError(f"connection refused: {address!r} stopped serving")
        nursery, handler = listener
        to_server, to_client = _Direction(), _Direction()
        nursery.start_soon(handler, SimStream(self, to_client, to_server))
        return SimStream(self, to_server, to_client)
