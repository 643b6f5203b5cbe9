"""How Netty messages travel on a connection: as frames on a byte stream, or as objects.

Over TCP a message is its frame (`messages.encode`, `FrameDecoder`). On the simulated
link a message travels as the object itself, occupying the size of Flink's frame of it on
the wire (`messages.flink_frame_size`), so timing, windows and credit decisions are those
of Flink's frames while no hop pays for encoding and decoding. The handlers see one interface:

- `seal(msg, buffer)`: what will be sent. The network buffer whose bytes a BufferResponse
  carries passes to the stream, which recycles it once its bytes are taken: on the
  simulated link at once, over TCP when the write is done (as Netty releases a
  BufferResponse's buffer after writing it: no copy of the payload). On the simulated
  link the bytes travel without a copy, as a read-only view, when they are the whole of
  their memory (a full buffer: nothing writes them again once the segment is recycled,
  which drops its hold on them); a slice of a larger memory is copied, so that the
  receiver holds only the bytes that arrived, not the sender's whole segment. The
  receiver keeps a payload that is bytes or a read-only view, and copies a writable one
  (a frame decoder's buffer, which the next frames overwrite);
- `await send_sealed(sealed)` (or `await send(msg)` for both steps);
- `await wait_writable()`: until the connection takes a write at once (Netty's
  `isWritable`); Flink checks it before it takes a reader off the queue or builds an
  AddCredit, so nothing is pulled while the connection is congested;
- `defer(fn)` (where `defers` is True): hand an idle writer's work to the connection's
  event loop, as Flink hands it to the Netty thread; `fn` writes with `can_send_now()` /
  `send_now(sealed)`, without waking the writer task. On the simulated link `fn` runs after
  the current task's step. Over TCP it runs at once, in the calling task: the socket takes
  what it can without waiting (Netty's thread would write it at once; a trio task switch
  per message costs more than the write), and what it does not take (`has_unsent()`) the
  writer task writes first when woken (`wait_writable`), as it raises an error the socket
  gave. Over other byte streams `defers` is False and the writer task does the work;
- `await receive()`: the next messages, in order; [] once the peer closed the stream;
- `await serve(on_messages, writer)`: run the connection: arrived messages go to
  `on_messages(messages)` in order (it returns False to stop reading) while `writer` (an
  `OutboundWriter`) writes; returns at the peer's EOF or when reading stopped, and raises
  the first error of either side. Over a byte stream the reader is a loop in the calling
  task and the writer a task of its own; on the simulated link both run from the kernel
  loop (messages delivered at their arrival time, the writer as steps where its task
  would have been woken), so a hop wakes no task of the connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from shuffle import kernel
from shuffle.config import DEFAULT_MAX_FRAME_SIZE
from shuffle.errors import CorruptedStreamError
from shuffle.netty.messages import BufferResponse, FrameDecoder, NettyMessage, encode, flink_frame_size
from shuffle.transport import ByteStream
from shuffle.transport.sim_link import CORRUPTED
from shuffle.transport.tcp import socket_io

if TYPE_CHECKING:
    from shuffle.buffer.buffer import Buffer
    from shuffle.netty.outbound_writer import OutboundWriter

OnMessages = Callable[[list[NettyMessage]], bool]

#: Bytes per read. `receive_some` allocates them (below glibc's mmap threshold: no mmap per
#: recv); a TCP read fills the decoder's buffer instead.
RECEIVE_SIZE = 64 * 1024


class MessageStream(Protocol):
    def seal(self, msg: NettyMessage, buffer: Buffer | None = None) -> Any: ...

    async def send_sealed(self, sealed: Any) -> None: ...

    async def send(self, msg: NettyMessage) -> None: ...

    async def wait_writable(self) -> None: ...

    #: Whether `defer` hands work to the connection's event loop (fixed per connection).
    defers: bool

    def defer(self, fn: Callable[[], None]) -> None: ...

    def can_send_now(self) -> bool: ...

    def send_now(self, sealed: Any) -> None: ...

    def has_unsent(self) -> bool: ...

    def discard_unsent(self) -> None: ...

    async def receive(self) -> list[NettyMessage]: ...

    async def serve(self, on_messages: OnMessages, writer: OutboundWriter) -> None: ...


class _WrittenFrame:
    """A frame on its way to a socket, as parts: a BufferResponse's payload is still in its
    network buffer, which is recycled after the write (`buffer`, None for other frames)."""

    __slots__ = ("parts", "buffer")

    def __init__(self, parts: list[bytes | bytearray | memoryview], buffer: Buffer | None) -> None:
        self.parts = parts
        self.buffer = buffer

    def recycle(self) -> None:
        if self.buffer is not None:
            self.buffer.recycle()

    @staticmethod
    def of(sealed: Any) -> _WrittenFrame:
        """A sealed message as a frame to write (a frame without a buffer is sealed as its bytes)."""
        return sealed if type(sealed) is _WrittenFrame else _WrittenFrame([sealed], None)


class FramedMessageStream:
    """Messages as Flink's frames on a byte stream. On a TCP stream the socket is read
    straight into the decoder's buffer and written without a scheduler pass per frame
    (`SocketIO`)."""

    __slots__ = ("stream", "_decoder", "_io", "_unsent", "defers")

    def __init__(self, stream: ByteStream, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(max_frame_size)
        self._io = socket_io(stream)
        self.defers = self._io is not None or hasattr(stream, "call_soon")
        #: What a TCP write left for the next one: the rest of a frame (a write from another
        #: task, `send_now`, that the socket did not take whole, or a write cancelled midway,
        #: so that a later frame, such as a fatal ErrorResponse, does not land inside it), or
        #: the error the socket gave a write from another task.
        self._unsent: _WrittenFrame | BaseException | None = None

    def seal(self, msg: NettyMessage, buffer: Buffer | None = None) -> Any:
        if self._io is None or buffer is None:
            sealed = b"".join(encode(msg))
            if buffer is not None:
                buffer.recycle()
            return sealed
        return _WrittenFrame(encode(msg), buffer)

    async def send_sealed(self, sealed: Any) -> None:
        if self._io is None:
            await self.stream.send_all(sealed)
            return
        frame = _WrittenFrame.of(sealed)
        try:
            if self._unsent is not None:
                await self._send_unsent()
        except BaseException:
            frame.recycle()
            raise
        await self._write(frame)

    async def _write(self, frame: _WrittenFrame) -> None:
        """Write all of `frame`, then recycle its buffer; cancelled (or failed) midway, its
        rest stays for the next write (`discard_unsent` when the connection is closed)."""
        self._unsent = frame
        await self._io.send_parts(frame.parts)
        self._unsent = None
        frame.recycle()

    async def _send_unsent(self) -> None:
        unsent, self._unsent = self._unsent, None
        if isinstance(unsent, BaseException):
            raise unsent
        await self._write(unsent)

    def has_unsent(self) -> bool:
        return self._unsent is not None

    def discard_unsent(self) -> None:
        """The connection is closed: recycle the buffer of a frame not written whole."""
        unsent, self._unsent = self._unsent, None
        if type(unsent) is _WrittenFrame:
            unsent.recycle()

    async def send(self, msg: NettyMessage) -> None:
        await self.send_sealed(self.seal(msg))

    async def wait_writable(self) -> None:
        # On TCP the writer's outbound buffer is the socket's send buffer (send_all waits
        # while it is full), plus what a write from another task left: written here first.
        # Only the simulated link has a window to wait for (asking a real socket would cost
        # an epoll round per frame).
        if self._unsent is not None:
            await self._send_unsent()
        if hasattr(self.stream, "can_send_now"):
            await self.stream.wait_send_all_might_not_block()

    def defer(self, fn: Callable[[], None]) -> None:
        if self._io is not None:
            fn()
        else:
            self.stream.call_soon(fn)

    def can_send_now(self) -> bool:
        if self._io is not None:
            return self._unsent is None
        return self.stream.can_send_now()  # the simulated link (`defer` succeeded)

    def send_now(self, sealed: Any) -> None:
        if self._io is None:
            self.stream.send_now((sealed, len(sealed)))
            return
        frame = _WrittenFrame.of(sealed)
        try:
            self._io.write_now(frame.parts)
        except Exception as exc:  # noqa: BLE001 - the writer task raises it (`wait_writable`)
            self._unsent = exc
            frame.recycle()
            return
        if frame.parts:
            self._unsent = frame
        else:
            frame.recycle()

    async def receive(self) -> list[NettyMessage]:
        decoder, io = self._decoder, self._io
        while True:
            if io is None:
                data = await self.stream.receive_some(RECEIVE_SIZE)
                decoder.feed(data)
                count = len(data)
            else:
                count = await io.receive_into(decoder.room(RECEIVE_SIZE))
                decoder.commit(count)
            if not count:
                return []
            messages = list(decoder)
            if messages:
                return messages

    async def serve(self, on_messages: OnMessages, writer: OutboundWriter) -> None:
        async with kernel.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            while (messages := await self.receive()) and on_messages(messages):
                pass
            nursery.cancel_scope.cancel()


class ObjectMessageStream:
    """Messages as objects on the simulated link, each the size of Flink's frame on the wire."""

    __slots__ = ("stream", "defer", "run_soon", "ready_to_send", "when_writable", "can_send_now", "send_now")

    defers = True

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        # What a writer calls per message is the link's own (no call in between): `defer`
        # (the link's `call_soon`), `run_soon`, `ready_to_send`, `when_writable` (a stepped
        # writer), `can_send_now()` and `send_now(sealed)` (a sealed message is the link's
        # `(item, size)`).
        self.defer: Callable[[Callable[[], None]], None] = stream.call_soon
        self.run_soon: Callable[[Callable[[], None]], None] = stream.run_soon
        self.ready_to_send: Callable[[], bool] = stream.ready_to_send
        self.when_writable: Callable[[Callable[[], None]], None] = stream.when_writable
        self.can_send_now: Callable[[], bool] = stream.can_send_now
        self.send_now: Callable[[tuple[NettyMessage, int]], None] = stream.send_now

    def seal(self, msg: NettyMessage, buffer: Buffer | None = None) -> tuple[NettyMessage, int]:
        if type(msg) is BufferResponse and type(msg.buffer) is not bytes:
            payload = msg.buffer
            if buffer is not None and type(payload) is memoryview and payload.nbytes == len(payload.obj):
                # the whole of its memory: nothing writes these bytes again (a writer appends
                # only at new positions, past this end into new memory); the receiver holds them
                msg.buffer = payload.toreadonly()
            else:
                msg.buffer = bytes(payload)  # the receiver holds only its own bytes
        if buffer is not None:
            buffer.recycle()
        return msg, flink_frame_size(msg)

    async def send_sealed(self, sealed: tuple[NettyMessage, int]) -> None:
        await self.stream.send_message(*sealed)

    async def send(self, msg: NettyMessage) -> None:
        await self.stream.send_message(*self.seal(msg))

    async def wait_writable(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    def has_unsent(self) -> bool:
        return False

    def discard_unsent(self) -> None:
        """Nothing: every send is whole."""

    async def receive(self) -> list[NettyMessage]:
        return _checked(await self.stream.receive_messages())

    async def serve(self, on_messages: OnMessages, writer: OutboundWriter) -> None:
        done = kernel.Event()
        #: How serving ended, once it did: None (EOF, or reading stopped) or the first error.
        #: A list, not `done.is_set()`: a delivery reads it without a call.
        outcome: list[BaseException | None] = []

        def finish(error: BaseException | None) -> None:
            if not outcome:
                outcome.append(error)
                done.set()

        def on_items(messages: list[NettyMessage] | None) -> None:
            if outcome:
                return
            try:
                if messages is None:
                    raise kernel.ClosedResourceError("this stream was closed")
                if not messages or not on_messages(_checked(messages)):
                    finish(None)
            except Exception as exc:  # noqa: BLE001 - raised below, in the connection's task
                finish(exc)

        stream = self.stream
        writer.start(finish)
        stream.set_receiver(on_items)
        try:
            await done.wait()
        finally:
            stream.set_receiver(None)
            writer.stop()
        if outcome[0] is not None:
            raise outcome[0]


def _checked(messages: list[NettyMessage]) -> list[NettyMessage]:
    for message in messages:
        if message is CORRUPTED:
            raise CorruptedStreamError("Network stream corrupted: received incorrect magic number.")
    return messages


def message_stream(stream: Any, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> FramedMessageStream | ObjectMessageStream:
    """The message stream over `stream`: objects where the transport carries them (nothing
    to decode, so no frame limit), else frames of at most `max_frame_size` bytes."""
    if getattr(stream, "carries_objects", False):
        return ObjectMessageStream(stream)
    return FramedMessageStream(stream, max_frame_size)
