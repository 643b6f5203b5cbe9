"""Framed message streams: when a BufferResponse's network buffer is recycled (after its
bytes are taken: over TCP the payload is written from the buffer itself, other streams copy
it), and an idle writer's work written over TCP by the task that made it."""

import pytest
import trio
import trio.testing

from shuffle.buffer.buffer import Buffer, MemorySegment
from shuffle.buffer.data_type import DataType
from shuffle.netty.message_stream import FramedMessageStream
from shuffle.netty.messages import BufferResponse, ErrorResponse
from shuffle.netty.outbound_writer import OutboundWriter

pytestmark = pytest.mark.tcp


def pooled_buffer(payload: bytes, recycled: list[MemorySegment]) -> Buffer:
    segment = MemorySegment(64 * 1024)
    segment.grow(len(payload))[:len(payload)] = payload
    return Buffer.of_segment(segment, recycled.append, len(payload))


def response(buffer: Buffer) -> BufferResponse:
    return BufferResponse(1, 3, 1, DataType.DATA_BUFFER, buffer.memory())


def socket_streams() -> tuple[FramedMessageStream, FramedMessageStream]:
    left, right = trio.socket.socketpair()
    return FramedMessageStream(trio.SocketStream(left)), FramedMessageStream(trio.SocketStream(right))


async def test_over_tcp_the_buffer_is_recycled_once_its_frame_is_written():
    sender, receiver = socket_streams()
    payload = bytes(range(256)) * 100
    recycled: list[MemorySegment] = []
    buffer = pooled_buffer(payload, recycled)
    sealed = sender.seal(response(buffer), buffer)
    assert recycled == []  # Netty holds the buffer until the write is done
    with trio.fail_after(10):
        await sender.send_sealed(sealed)
        assert recycled == [buffer.segment]
        (received,) = await receiver.receive()
    assert (received.receiver_id, received.sequence_number, received.backlog) == (1, 3, 1)
    assert bytes(received.buffer) == payload


async def test_over_tcp_a_write_cancelled_midway_still_recycles_the_buffer():
    sender, _receiver = socket_streams()
    recycled: list[MemorySegment] = []
    big = [pooled_buffer(bytes(60_000), recycled) for _ in range(200)]  # more than the socket holds
    with trio.move_on_after(0.2) as scope:
        for buffer in big:
            await sender.send_sealed(sender.seal(response(buffer), buffer))
    assert scope.cancelled_caught  # nobody reads: a write blocked and was cancelled
    assert 0 < len(recycled) < len(big)
    assert all(buffer.is_recycled for buffer in big[:len(recycled)])


async def test_where_bytes_are_not_written_from_the_buffer_it_is_recycled_at_seal():
    stream, _ = trio.testing.memory_stream_pair()
    sender = FramedMessageStream(stream)  # a byte stream without a socket: the frame is copied
    recycled: list[MemorySegment] = []
    buffer = pooled_buffer(b"abc", recycled)
    sealed = sender.seal(response(buffer), buffer)
    assert recycled == [buffer.segment] and isinstance(sealed, bytes) and sealed.endswith(b"abc")


class Work:
    """An OutboundWriter's owner: a queue of sealed frames to write."""

    def __init__(self, stream: FramedMessageStream) -> None:
        self.stream = stream
        self.queue: list[Buffer] = []
        self.writer = OutboundWriter(stream, self.next_sealed, lambda: bool(self.queue))

    def next_sealed(self):
        if not self.queue:
            return None
        buffer = self.queue.pop(0)
        return self.stream.seal(response(buffer), buffer)

    def add(self, buffer: Buffer) -> None:
        self.queue.append(buffer)
        self.writer.wake()


async def writer_idle(work: Work) -> None:
    while work.writer._wakeup is None:  # the writer task has not reached its wait for work yet
        await trio.sleep(0)


async def test_over_tcp_an_idle_writer_writes_from_the_task_that_made_the_work():
    sender, receiver = socket_streams()
    work = Work(sender)
    recycled: list[MemorySegment] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(work.writer.run)
        await writer_idle(work)
        buffer = pooled_buffer(b"payload", recycled)
        work.add(buffer)  # no checkpoint from here on: the writer task cannot have run
        assert recycled == [buffer.segment]  # written whole, and recycled, within `add`
        with trio.fail_after(10):
            (received,) = await receiver.receive()
        assert bytes(received.buffer) == b"payload"
        nursery.cancel_scope.cancel()


async def test_over_tcp_what_the_socket_does_not_take_the_writer_task_writes_in_order():
    sender, receiver = socket_streams()
    work = Work(sender)
    recycled: list[MemorySegment] = []
    payloads = [bytes([i]) * 60_000 for i in range(40)]  # more than the socket buffers hold
    received: list[bytes] = []

    async def read_all():
        while len(received) < len(payloads):
            received.extend(bytes(msg.buffer) for msg in await receiver.receive())

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(work.writer.run)
            await writer_idle(work)
            for payload in payloads:
                work.add(pooled_buffer(payload, recycled))
            assert 0 < len(recycled) < len(payloads)  # the socket filled up: the rest waits
            nursery.start_soon(read_all)
            while len(recycled) < len(payloads):
                await trio.sleep(0.001)
            nursery.cancel_scope.cancel()
    with trio.fail_after(10):
        await read_all()
    assert received == payloads


async def test_over_tcp_an_error_of_a_write_from_another_task_is_raised_by_the_writer_task():
    sender, receiver = socket_streams()
    work = Work(sender)
    recycled: list[MemorySegment] = []
    added: list[Buffer] = []
    raised = []
    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(work.writer.run)
                await writer_idle(work)
                await receiver.stream.aclose()
                while True:  # the first writes may still land in the socket buffer
                    added.append(pooled_buffer(bytes(60_000), recycled))
                    work.add(added[-1])  # never raises here: the writer task does
                    await trio.sleep(0)
    except* trio.BrokenResourceError as group:
        raised.extend(group.exceptions)
    assert len(raised) == 1
    taken = [buffer for buffer in added if buffer not in work.queue]  # what the stream got
    assert taken and all(buffer.is_recycled for buffer in taken)  # nothing it got is lost


async def test_a_frame_left_unfinished_when_the_writer_ends_stays_until_the_connection_is_closed():
    sender, _receiver = socket_streams()
    work = Work(sender)
    recycled: list[MemorySegment] = []
    buffers = [pooled_buffer(bytes(60_000), recycled) for _ in range(40)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(work.writer.run)
        await writer_idle(work)
        for buffer in buffers:
            work.add(buffer)
        await trio.sleep(0.05)  # the writer task waits for the socket, with a frame half written
        nursery.cancel_scope.cancel()  # nobody reads: the writer ends there
    written = [buffer for buffer in buffers if buffer.is_recycled]
    assert 0 < len(written) < len(buffers) and buffers[:len(written)] == written
    assert sender.has_unsent()  # the rest of the next frame: a later write must finish it first
    unfinished = buffers[len(written)]
    assert not unfinished.is_recycled
    sender.discard_unsent()  # the connection is closed (as the handlers do)
    assert unfinished.is_recycled and not sender.has_unsent()
    assert all(not buffer.is_recycled for buffer in buffers[len(written) + 1:])  # still queued


async def test_a_write_after_the_writer_was_cancelled_midway_comes_after_the_whole_frame():
    """The server's fatal ErrorResponse, sent once the connection's writer is gone, must not
    land inside a frame the writer was cancelled in the middle of."""
    sender, receiver = socket_streams()
    work = Work(sender)
    recycled: list[MemorySegment] = []
    received: list = []

    async def read_all():
        while messages := await receiver.receive():
            received.extend(messages)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as connection:
                connection.start_soon(work.writer.run)
                await writer_idle(work)
                for _ in range(40):
                    work.add(pooled_buffer(bytes(60_000), recycled))
                await trio.sleep(0.05)
                connection.cancel_scope.cancel()  # a fatal error ends the connection's writer
            nursery.start_soon(read_all)
            await sender.send(ErrorResponse("ProtocolError", "too many requests"))
            await sender.stream.aclose()
    assert received[-1] == ErrorResponse("ProtocolError", "too many requests")
    assert all(type(msg) is BufferResponse and len(msg.buffer) == 60_000 for msg in received[:-1])
