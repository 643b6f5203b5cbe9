"""When a BufferResponse's network buffer is recycled: after its bytes are taken (framed
streams over TCP write the payload from the buffer itself; other streams copy it)."""

import pytest
import trio
import trio.testing

from shuffle.buffer.buffer import Buffer, MemorySegment
from shuffle.buffer.data_type import DataType
from shuffle.netty.message_stream import FramedMessageStream
from shuffle.netty.messages import BufferResponse

pytestmark = pytest.mark.tcp


def pooled_buffer(payload: bytes, recycled: list[int]) -> Buffer:
    segment = MemorySegment(7, 64 * 1024)
    segment.grow(len(payload))[:len(payload)] = payload
    return Buffer.of_segment(segment, lambda seg: recycled.append(seg.index), len(payload))


def response(buffer: Buffer) -> BufferResponse:
    return BufferResponse("receiver", 3, 1, DataType.DATA_BUFFER, buffer.memory())


def socket_streams() -> tuple[FramedMessageStream, FramedMessageStream]:
    left, right = trio.socket.socketpair()
    return FramedMessageStream(trio.SocketStream(left)), FramedMessageStream(trio.SocketStream(right))


async def test_over_tcp_the_buffer_is_recycled_once_its_frame_is_written():
    sender, receiver = socket_streams()
    payload = bytes(range(256)) * 100
    recycled: list[int] = []
    buffer = pooled_buffer(payload, recycled)
    sealed = sender.seal(response(buffer), buffer)
    assert recycled == []  # Netty holds the buffer until the write is done
    with trio.fail_after(10):
        await sender.send_sealed(sealed)
        assert recycled == [7]
        (received,) = await receiver.receive()
    assert (received.receiver_id, received.sequence_number, received.backlog) == ("receiver", 3, 1)
    assert bytes(received.buffer) == payload


async def test_over_tcp_a_write_cancelled_midway_still_recycles_the_buffer():
    sender, _receiver = socket_streams()
    recycled: list[int] = []
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
    recycled: list[int] = []
    buffer = pooled_buffer(b"abc", recycled)
    sealed = sender.seal(response(buffer), buffer)
    assert recycled == [7] and isinstance(sealed, bytes) and sealed.endswith(b"abc")
