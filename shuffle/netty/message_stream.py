"""How Netty messages travel on a connection: as frames on a byte stream, or as objects.

Over TCP a message is its frame (`messages.encode`, `FrameDecoder`). On the simulated
link a message travels as the object itself, occupying its frame's size on the wire
(`messages.frame_size`), so timing, windows and credit decisions are those of the frames
while no hop pays for encoding and decoding. The handlers see one interface:

- `seal(msg)`: what will be sent, taken now, so the caller may recycle the buffer whose
  bytes a BufferResponse carries as soon as `seal` returns;
- `await send_sealed(sealed)` (or `await send(msg)` for both steps);
- `await wait_writable()`: until the connection takes a write at once (Netty's
  `isWritable`); Flink checks it before it takes a reader off the queue or builds an
  AddCredit, so nothing is pulled while the connection is congested;
- `defer(fn)`: on the simulated link, run `fn()` on the connection's event loop (after the
  current task's step, as Flink hands work to the Netty thread) and return True; there
  `can_send_now()` / `send_now(sealed)` let an idle writer write without waking its
  task. Over TCP `defer` returns False and the writer task does the work;
- `await receive()`: the next messages, in order; [] once the peer closed the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from shuffle.config import DEFAULT_MAX_FRAME_SIZE
from shuffle.errors import CorruptedStreamError
from shuffle.netty.messages import BufferResponse, FrameDecoder, NettyMessage, encode, frame_size
from shuffle.transport import ByteStream
from shuffle.transport.sim_link import CORRUPTED

RECEIVE_SIZE = 64 * 1024  # below glibc's mmap threshold: no mmap per recv


class MessageStream(Protocol):
    def seal(self, msg: NettyMessage) -> Any: ...

    async def send_sealed(self, sealed: Any) -> None: ...

    async def send(self, msg: NettyMessage) -> None: ...

    async def wait_writable(self) -> None: ...

    def defer(self, fn: Callable[[], None]) -> bool: ...

    def can_send_now(self) -> bool: ...

    def send_now(self, sealed: Any) -> None: ...

    async def receive(self) -> list[NettyMessage]: ...


class FramedMessageStream:
    """Messages as Flink's frames on a byte stream."""

    __slots__ = ("stream", "_decoder")

    def __init__(self, stream: ByteStream, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(max_frame_size)

    def seal(self, msg: NettyMessage) -> bytes:
        return b"".join(encode(msg))

    async def send_sealed(self, sealed: bytes) -> None:
        await self.stream.send_all(sealed)

    async def send(self, msg: NettyMessage) -> None:
        await self.stream.send_all(b"".join(encode(msg)))

    async def wait_writable(self) -> None:
        # On TCP the writer has no outbound buffer of its own: the socket's send buffer is
        # Netty's, and send_all waits while it is full. Only the simulated link has a window
        # to wait for here (asking a real socket would cost an epoll round per frame).
        if hasattr(self.stream, "writable"):
            await self.stream.wait_send_all_might_not_block()

    def defer(self, fn: Callable[[], None]) -> bool:
        return _defer(self.stream, fn)

    def can_send_now(self) -> bool:
        return self.stream.writable  # only asked after `defer` succeeded: the simulated link

    def send_now(self, sealed: bytes) -> None:
        self.stream.send_now(sealed, len(sealed))

    async def receive(self) -> list[NettyMessage]:
        decoder = self._decoder
        while True:
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                return []
            decoder.feed(data)
            messages = list(decoder)
            if messages:
                return messages


class ObjectMessageStream:
    """Messages as objects on the simulated link, each the size of its frame on the wire."""

    __slots__ = ("stream",)

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def seal(self, msg: NettyMessage) -> tuple[NettyMessage, int]:
        if type(msg) is BufferResponse and type(msg.buffer) is not bytes:
            msg.buffer = bytes(msg.buffer)  # a copy: the network buffer is recycled after seal
        return msg, frame_size(msg)

    async def send_sealed(self, sealed: tuple[NettyMessage, int]) -> None:
        await self.stream.send_message(*sealed)

    async def send(self, msg: NettyMessage) -> None:
        await self.stream.send_message(*self.seal(msg))

    async def wait_writable(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    def defer(self, fn: Callable[[], None]) -> bool:
        return _defer(self.stream, fn)

    def can_send_now(self) -> bool:
        return self.stream.writable

    def send_now(self, sealed: tuple[NettyMessage, int]) -> None:
        self.stream.send_now(*sealed)

    async def receive(self) -> list[NettyMessage]:
        messages = await self.stream.receive_messages()
        if any(message is CORRUPTED for message in messages):
            raise CorruptedStreamError("Network stream corrupted: received incorrect magic number.")
        return messages


def _defer(stream: Any, fn: Callable[[], None]) -> bool:
    call_soon = getattr(stream, "call_soon", None)
    if call_soon is None:
        return False
    call_soon(fn)
    return True


def message_stream(stream: Any, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> FramedMessageStream | ObjectMessageStream:
    """The message stream over `stream`: objects where the transport carries them (nothing
    to decode, so no frame limit), else frames of at most `max_frame_size` bytes."""
    if getattr(stream, "carries_objects", False):
        return ObjectMessageStream(stream)
    return FramedMessageStream(stream, max_frame_size)
