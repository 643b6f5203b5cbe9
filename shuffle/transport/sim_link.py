"""An in-memory network link in virtual time (sim mode only: it runs on the sim kernel).

Each connection is a pair of `SimStream`s; each direction models a link plus a socket
buffer:

- what `send_all` (bytes) or `send_message` (an object with its size on the wire)
  accepts serializes onto the link one item after another, taking `size / bandwidth`
  each, then arrives `latency` later (FIFO, so arrivals never reorder);
- while `send_window_bytes` or more are unread by the receiver (in flight or arrived) the
  connection is not writable: sends block, and with them every channel multiplexed on the
  connection, as TCP-style backpressure does; a writable connection takes a whole write
  (Netty's high-watermark rule), so the window may overshoot by one write; bytes leave the
  window when the receiver reads them;
- `receive_some` returns arrived bytes, `receive_messages` arrived objects; both wait for
  the first arrival.

Objects travel as they are: the Netty layer sends its message objects with their frame
size rather than encoding and decoding frames per hop (the TCP transport carries the same
messages as bytes). No background tasks: a reader is woken at the next arrival (or a
receiver, `set_receiver`, is called then), a blocked writer woken (or a writer step run,
`when_writable`) when the reader frees window space. Connecting takes one round trip; closing sends EOF
behind what was already accepted, and the peer's sends then fail.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
import math
import operator
from typing import Any

from shuffle import kernel
from shuffle.kernel import sim
from shuffle.transport import StreamHandler

DEFAULT_RECEIVE_SIZE = 65536
_EOF = None  # item marking the end of the stream (the peer's FIN)


class _Corrupted:
    def __repr__(self) -> str:
        return "CORRUPTED"


#: What a corrupted message arrives as on an object-carrying link (a `corrupt_frame` fault).
CORRUPTED = _Corrupted()


class _Direction:
    """What travels one way on a connection: (arrival time, item, size) in FIFO order."""

    __slots__ = ("items", "unread", "link_free_at", "reader", "receiver", "delivery_pending", "writers",
                 "reader_closed", "paused", "bandwidth", "latency", "corrupt_next")

    def __init__(self) -> None:
        self.items: deque[tuple[float, Any, int]] = deque()
        self.unread = 0  # bytes in the window
        self.link_free_at = -math.inf  # when the link finishes serializing what it has
        self.reader: tuple[sim.Task, int] | None = None  # a reader blocked until an arrival
        self.receiver: Callable[[], None] | None = None  # delivers arrivals (`set_receiver`)
        self.delivery_pending = False  # a delivery to `receiver` is scheduled
        #: Writers blocked on a full window: blocked tasks, or steps to run (`when_writable`).
        self.writers: list[tuple[sim.Task, int] | Callable[[], None]] = []
        self.reader_closed = False
        self.paused = False  # not writable whatever the window (tests, a paused link)
        self.bandwidth: float | None = None  # overrides of the network's (a slow link)
        self.latency: float | None = None
        self.corrupt_next = False  # the next item sent this way arrives corrupted (a fault)

    def wake_writers(self) -> None:
        writers, self.writers = self.writers, []
        for waiter in writers:
            if type(waiter) is tuple:
                sim.wake(*waiter)
            else:
                sim.run_soon(waiter)


class SimStream:
    """One end of a simulated connection (trio's Stream interface, plus whole objects)."""

    __slots__ = ("_network", "_out", "_in", "_closed", "_sending", "_receiving", "_on_items", "carries_objects")

    def __init__(self, network: SimNetwork, out: _Direction, inbound: _Direction) -> None:
        self.carries_objects = network.carry_objects  # the Netty layer sends objects, not frames
        self._network = network
        self._out = out
        self._in = inbound
        self._closed = False
        self._sending = False
        self._receiving = False
        self._on_items: Callable[[list[Any] | None], None] | None = None

    # -- sending ---------------------------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Accept `data` into the window (waiting for space while it is full)."""
        data = bytes(data)  # the caller may reuse its buffer once send_all returns
        await self._send(data, len(data))

    async def send_message(self, message: Any, size: int) -> None:
        """Send an object that takes `size` bytes on the wire; the peer receives it as it is."""
        await self._send(message, size)

    def can_send_now(self) -> bool:
        """A send now would be taken at once (Netty's `isWritable`, and no send in progress)."""
        out = self._out
        return (not self._sending and not self._closed and not out.reader_closed and not out.paused
                and out.unread < self._network.send_window_bytes)

    def set_writable(self, writable: bool) -> None:
        """Make this end unwritable (or writable again) whatever its window, as Netty's
        user-defined writability does; sends wait meanwhile."""
        self._out.paused = not writable
        if writable:
            self._out.wake_writers()

    def impair_link(self, *, paused: bool = False, bandwidth: float | None = None,
                    latency: float | None = None) -> None:
        """Both directions of this connection: stop taking writes (`paused`), or carry at
        `bandwidth` bytes/s after `latency` s instead of the network's; all defaults restore."""
        for direction in (self._out, self._in):
            direction.paused = paused
            direction.bandwidth, direction.latency = bandwidth, latency
            if not paused:
                direction.wake_writers()

    def corrupt_next_inbound(self) -> None:
        """The next item the peer sends on this connection arrives corrupted."""
        self._in.corrupt_next = True

    #: `call_soon(fn)`: run `fn()` on the connection's event loop, once every runnable task
    #: has yielded; `run_soon(fn)`: where a task woken now would run. The kernel's own.
    call_soon = staticmethod(sim.call_soon)
    run_soon = staticmethod(sim.run_soon)

    def ready_to_send(self) -> bool:
        """Whether a send now is taken at once; raises as a send would on a closed or broken
        connection. For a writer that runs as steps rather than as a task."""
        out = self._out
        if self._closed or out.reader_closed:
            self._check_writable()
        return not out.paused and out.unread < self._network.send_window_bytes

    def when_writable(self, step: Any) -> None:
        """Run `step()` (`run_soon`) when the window has room again, or the connection closes."""
        self._out.writers.append(step)

    def send_now(self, sized: tuple[Any, int]) -> None:
        """Send `(item, size on the wire)` without waiting; only while `can_send_now()`. One
        argument: a message stream hands over its sealed message as it is (no call between)."""
        if not self.can_send_now():
            raise kernel.BusyResourceError("the connection is not writable now")
        self._push(*sized)

    async def wait_send_all_might_not_block(self) -> None:
        self._enter_send()
        try:
            await self._wait_writable()
        finally:
            self._sending = False

    async def _send(self, item: Any, size: int) -> None:
        self._enter_send()
        try:
            await self._wait_writable()
            if size or item:
                self._push(item, size)
        finally:
            self._sending = False

    async def _wait_writable(self) -> None:
        out = self._out
        window = self._network.send_window_bytes
        self._check_writable()
        while out.unread >= window or out.paused:
            waiter = sim.block()
            out.writers.append(waiter)
            try:
                await sim.park()
            except BaseException:
                if waiter in out.writers:  # cancelled while waiting: no wakeup owed to it
                    out.writers.remove(waiter)
                raise
            self._check_writable()

    def _push(self, item: Any, size: int) -> None:
        out = self._out
        if out.corrupt_next and item is not _EOF:
            out.corrupt_next = False
            item = CORRUPTED if self.carries_objects else bytes(size)  # zeros: no frame's magic
        out.unread += size
        network = self._network
        now, link_free_at = sim._K.now, out.link_free_at
        start = link_free_at if link_free_at > now else now  # after what the link carries already
        out.link_free_at = start + size / (out.bandwidth or network.bandwidth_bytes_per_s)
        arrival = out.link_free_at + (network.latency_s if out.latency is None else out.latency)
        if not out.items:
            if out.reader is not None:
                sim.wake_at(arrival, *out.reader)
            elif out.receiver is not None and not out.delivery_pending:
                out.delivery_pending = True
                sim._K.call_at(arrival, out.receiver)
        out.items.append((arrival, item, size))

    def _enter_send(self) -> None:
        if self._sending:
            raise kernel.BusyResourceError("another task is already sending on this stream")
        self._sending = True

    def _check_writable(self) -> None:
        if self._closed:
            raise kernel.ClosedResourceError("this stream was closed")
        if self._out.reader_closed:
            raise kernel.BrokenResourceError("the peer closed the connection")

    # -- receiving -------------------------------------------------------------------------

    async def _wait_arrival(self) -> None:
        if self._receiving:
            raise kernel.BusyResourceError("another task is already receiving on this stream")
        inbound = self._in
        items = inbound.items
        while True:
            if self._closed:
                raise kernel.ClosedResourceError("this stream was closed")
            if items and items[0][0] <= sim._K.now:
                return
            inbound.reader = waiter = sim.block()
            if items:
                sim.wake_at(items[0][0], *waiter)
            self._receiving = True
            try:
                await sim.park()
            finally:
                self._receiving = False
                inbound.reader = None

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Wait for the next arrival; return the arrived bytes (at most `max_bytes`), b"" at EOF."""
        max_bytes = DEFAULT_RECEIVE_SIZE if max_bytes is None else operator.index(max_bytes)
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        await self._wait_arrival()
        inbound = self._in
        items = inbound.items
        now = sim._K.now
        parts: list[bytes] = []
        taken = 0
        while items and taken < max_bytes:
            arrival, chunk, size = items[0]
            if arrival > now or chunk is _EOF:
                break
            room = max_bytes - taken
            if size > room:
                parts.append(chunk[:room])
                items[0] = (arrival, chunk[room:], size - room)
                taken = max_bytes
                break
            items.popleft()
            parts.append(chunk)
            taken += size
        self._taken(taken)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def receive_messages(self) -> list[Any]:
        """Wait for the next arrival; return every arrived object in order, [] at EOF."""
        await self._wait_arrival()
        return self._take_arrived()[0]

    def set_receiver(self, on_items: Callable[[list[Any] | None], None] | None) -> None:
        """Deliver arrivals to `on_items(objects)` from the kernel loop at their arrival time,
        in order, instead of waking a reader task: every arrived object at once, [] at EOF,
        None once this end is closed. `None` stops the deliveries."""
        if self._receiving:
            raise kernel.BusyResourceError("another task is already receiving on this stream")
        inbound = self._in
        self._on_items = on_items
        inbound.receiver = None if on_items is None else self._deliver
        if on_items is not None and inbound.items and not inbound.delivery_pending:
            inbound.delivery_pending = True
            sim._K.call_at(max(inbound.items[0][0], sim._K.now), self._deliver)

    def _deliver(self) -> None:
        inbound = self._in
        inbound.delivery_pending = False
        on_items = self._on_items
        if on_items is None:
            return
        items = inbound.items
        messages, eof = self._take_arrived()
        if messages:
            on_items(messages)
        if eof:
            if self._on_items is not None:
                self._on_items([])
        elif items and self._on_items is not None and not inbound.delivery_pending:
            inbound.delivery_pending = True
            sim._K.call_at(items[0][0], self._deliver)

    def _take_arrived(self) -> tuple[list[Any], bool]:
        """The objects that have arrived by now, in order, and whether EOF comes next."""
        items = self._in.items
        now = sim._K.now
        messages = []
        taken = 0
        eof = False
        while items:
            arrival, message, size = items[0]
            if arrival > now:
                break
            if message is _EOF:
                eof = True
                break
            items.popleft()
            messages.append(message)
            taken += size
        self._taken(taken)
        return messages, eof

    def _taken(self, size: int) -> None:
        inbound = self._in
        inbound.unread -= size
        if size and inbound.writers:
            inbound.wake_writers()

    # -- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close this end: data already sent still reaches the peer, then EOF; unread data is dropped."""
        if self._closed:
            return
        self._closed = True
        out, inbound = self._out, self._in
        self._push(_EOF, 0)
        inbound.reader_closed = True
        inbound.items.clear()
        inbound.unread = 0
        if inbound.reader is not None:
            sim.wake(*inbound.reader)  # our own blocked reader: closed
        if self._on_items is not None:
            self._on_items(None)  # our own receiver: closed
        out.wake_writers()  # our own blocked writer: closed
        inbound.wake_writers()  # the peer's blocked writer: broken


class SimNetwork:
    """Simulated links between named endpoints: `serve` at an address, `connect` to it.

    `carry_objects=False` makes the Netty layer send encoded frames instead of message
    objects (the same sizes and timing; tests compare the two)."""

    def __init__(self, bandwidth_bytes_per_s: float, latency_s: float, send_window_bytes: int,
                 carry_objects: bool = True) -> None:
        if bandwidth_bytes_per_s <= 0 or latency_s < 0 or send_window_bytes < 1:
            raise ValueError("bandwidth must be > 0, latency >= 0 and send window >= 1 byte")
        self.carry_objects = carry_objects  # False: the Netty layer encodes frames, as over TCP
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.latency_s = latency_s
        self.send_window_bytes = send_window_bytes
        self._listeners: dict[Hashable, tuple[Any, StreamHandler]] = {}

    async def serve(
        self, address: Hashable, handler: StreamHandler, *, task_status: Any = kernel.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections at `address` until cancelled; each runs `handler(stream)`."""
        if address in self._listeners:
            raise OSError(f"address already in use: {address!r}")
        async with kernel.open_nursery() as nursery:
            self._listeners[address] = (nursery, handler)
            try:
                task_status.started(address)
                await kernel.sleep_forever()
            finally:
                del self._listeners[address]

    async def connect(self, address: Hashable) -> SimStream:
        """Connect to the server at `address`; `ConnectionRefusedError` if nobody serves it."""
        if address not in self._listeners:
            raise ConnectionRefusedError(f"connection refused: nothing serves {address!r}")
        await kernel.sleep(2 * self.latency_s)
        listener = self._listeners.get(address)
        if listener is None:
            raise ConnectionRefusedError(f"connection refused: {address!r} stopped serving")
        nursery, handler = listener
        to_server, to_client = _Direction(), _Direction()
        nursery.start_soon(handler, SimStream(self, to_client, to_server))
        return SimStream(self, to_server, to_client)
