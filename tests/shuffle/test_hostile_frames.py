"""Hostile bytes on a Netty connection: the decoder raises CorruptedStreamError and nothing
else, refuses oversized frames from their length field, and the handlers close only the
connection that carried them (spec 3.1, Flink's NettyMessageDecoder behaviour).
Random and mutated inputs in random chunks: tests/scenarios/test_fuzz.py."""

from __future__ import annotations

import struct

import msgpack
import pytest
from shuffle import kernel

from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig
from shuffle.environment import InputChannelDescriptor
from shuffle.netty.client_handler import LocalTransportError
from shuffle.netty.messages import (
    MAGIC_NUMBER,
    AddCredit,
    BufferResponse,
    CorruptedStreamError,
    ErrorResponse,
    FrameDecoder,
    PartitionRequest,
    encode,
)
from test_messages import frame_bytes

LIMIT = 4096


def frame(msg_id: int, header: bytes) -> bytes:
    return struct.pack(">iIB", 9 + len(header), MAGIC_NUMBER, msg_id) + header


def decode(data: bytes, cuts: list[int] = (), limit: int = LIMIT) -> list:
    """Feed `data` split at `cuts`; the messages, with payloads copied out as a handler does."""
    decoder = FrameDecoder(limit)
    out = []
    for start, end in zip([0, *cuts], [*cuts, len(data)]):
        decoder.feed(data[start:end])
        for msg in decoder:
            if isinstance(msg, BufferResponse):
                msg.buffer = bytes(msg.buffer)
            out.append(msg)
    return out


def test_oversized_frame_is_refused_from_its_length_field():
    decoder = FrameDecoder(LIMIT)
    decoder.feed(struct.pack(">i", LIMIT + 1))  # nothing of the frame itself has come yet
    with pytest.raises(CorruptedStreamError, match=f"frame length {LIMIT + 1}"):
        next(decoder)
    assert decoder.buffered_bytes == 0
    decoder.feed(b"x" * 100_000)  # a failed decoder keeps nothing and keeps failing
    assert decoder.buffered_bytes == 0
    with pytest.raises(CorruptedStreamError):
        next(decoder)


def test_frame_of_exactly_the_limit_is_accepted():
    msg = BufferResponse(1, 0, 0, DataType.DATA_BUFFER, b"")
    header_size = len(frame_bytes(msg))
    msg.buffer = b"p" * (LIMIT - header_size)
    assert decode(frame_bytes(msg)) == [msg]


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 8])
def test_negative_and_short_lengths(length):
    with pytest.raises(CorruptedStreamError, match="frame length"):
        decode(struct.pack(">i", length))


def test_wrong_magic_is_found_before_the_frame_is_complete():
    with pytest.raises(CorruptedStreamError, match="incorrect magic number"):
        decode(struct.pack(">iIB", 1000, 0xDEADBEEF, 2))


BOMBS = {
    "array of 2**32 fields": b"\xdd\xff\xff\xff\xff",
    "str of 2**32 bytes": b"\x91\xdb\xff\xff\xff\xff",
    "bin of 2**32 bytes": b"\x91\xc6\xff\xff\xff\xff",
    "deep nesting": b"\x91" * 5000 + b"\xc0",
    "a map": b"\x81\xa1k\xa1v",
    "an ext type": b"\x91\xd6\xff\x00\x00\x00\x01",
    "invalid utf-8": b"\x91\xa2\xff\xfe",
    "reserved byte": b"\x91\xc1",
    "trailing bytes": msgpack.packb([1]) + b"\x00",
    "truncated": b"\x92\x01",
}


@pytest.mark.parametrize("header", BOMBS.values(), ids=BOMBS.keys())
def test_msgpack_bombs_and_garbage_headers(header):
    with pytest.raises(CorruptedStreamError):
        decode(frame(4, header))  # CancelPartitionRequest


WRONG_FIELDS = {
    "credit as text": (6, ["3", 1]),
    "credit as bool": (6, [True, 1]),
    "credit as float": (6, [1.5, 1]),
    "zero credit": (6, [0, 1]),
    "credit above a Java int": (6, [2**31, 1]),
    "negative subpartition": (2, ["p", -1, 1, 2]),
    "receiver id as bytes": (4, [b"ch"]),
    "receiver id as text": (4, ["ch"]),
    "receiver id above a Java int": (4, [2**31]),
    "missing field": (2, ["p", 0, 1]),
    "extra field": (5, [1]),
    "not an array": (4, 1),
}


@pytest.mark.parametrize("msg_id, fields", WRONG_FIELDS.values(), ids=WRONG_FIELDS.keys())
def test_fields_of_the_wrong_type_or_range(msg_id, fields):
    with pytest.raises(CorruptedStreamError):
        decode(frame(msg_id, msgpack.packb(fields)))


def test_buffer_response_with_bad_data_type_or_header_length():
    good = frame_bytes(BufferResponse(1, 0, 0, DataType.DATA_BUFFER, b"abc"))
    header = msgpack.packb([1, 0, 0, len(DataType), 0, False])
    bad_type = struct.pack(">iIBH", 11 + len(header), MAGIC_NUMBER, 0, len(header)) + header
    with pytest.raises(CorruptedStreamError, match="data type"):
        decode(bad_type)
    overlong = bytearray(good)
    overlong[9:11] = struct.pack(">H", 60000)
    with pytest.raises(CorruptedStreamError, match="header length"):
        decode(bytes(overlong))
    with pytest.raises(CorruptedStreamError):
        decode(struct.pack(">iIB", 10, MAGIC_NUMBER, 0) + b"\x00")  # too short for its header length


def test_max_frame_size_default_and_validation():
    assert NetworkConfig().frame_size_limit == 1024 * 1024
    assert NetworkConfig(buffer_size=4 << 20).frame_size_limit == (4 << 20) + 64 * 1024
    assert NetworkConfig(max_frame_size=200_000).frame_size_limit == 200_000
    with pytest.raises(ValueError, match="max_frame_size must be at least buffer_size"):
        NetworkConfig(max_frame_size=40_000)


# -- the handlers: Flink's behaviour, for that connection only ------------------------------


async def read_until_closed(stream) -> bytes:
    data = bytearray()
    while chunk := await stream.receive_some():
        data += chunk
    return bytes(data)


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x20" + b"not a frame at all, just text..",
    struct.pack(">i", 10 * 1024 * 1024),  # an oversized frame: refused from its length alone
    frame(6, msgpack.packb([-5, "ch"])),
])
async def test_server_answers_garbage_with_a_fatal_error_and_closes_only_that_connection(credit_flow, garbage):
    h = await credit_flow(channels=1, transport="sim_frames")  # raw bytes: the frame path
    stray = await h.producer.connection_manager.transport.connect(h.producer.address)
    await stray.send_all(garbage)
    (reply,) = decode(await read_until_closed(stray), limit=1 << 20)
    assert isinstance(reply, ErrorResponse) and reply.is_fatal_error
    assert reply.error_class == "CorruptedStreamError"
    await h.emit_buffers(0, 3)  # the genuine connection goes on
    await h.settle()
    h.consume(0, 2)
    await h.settle()
    assert len(h.consumed[0]) == 2


@pytest.mark.parametrize("garbage, reason", [
    (b"".join(encode(AddCredit(1, 1))), "unknown message from producer"),  # valid, wrong direction
    (struct.pack(">iIB", 50, 0x12345678, 0) + bytes(41), "incorrect magic number"),
    (struct.pack(">i", 2**31 - 1), "frame length"),
])
async def test_client_fails_the_channels_of_a_corrupted_connection_only(credit_flow, garbage, reason):
    h = await credit_flow(channels=1, transport="sim_frames")  # raw bytes: the frame path
    network = h.producer.connection_manager.transport

    async def corrupt_producer(stream):
        await stream.receive_some()  # the partition request
        await stream.send_all(garbage)
        await kernel.sleep_forever()

    await h._nursery.start(network.serve, "corrupt", corrupt_producer)
    gate = h.consumer.create_input_gate(0, "victim", [InputChannelDescriptor("p", 0, "corrupt")])
    await gate.setup()
    await gate.request_partitions()
    await h.settle()
    (channel,) = gate.channels
    assert isinstance(channel.error, LocalTransportError) and reason in str(channel.error)
    gate.close()
    await h.emit_buffers(0, 2)  # the genuine connection goes on
    h.flush(0)
    await h.settle()
    h.consume(0, 2)
    assert len(h.consumed[0]) == 2


def test_partition_request_round_trip_keeps_attempt_ids():
    msg = PartitionRequest("ds0#1@" + "ab" * 16, 0, 7, 2)
    assert decode(frame_bytes(msg)) == [msg]


async def test_requests_for_partitions_that_never_come_leave_nothing_behind(sim_kernel):
    from shuffle.partition.result_partition_manager import ResultPartitionManager

    manager = ResultPartitionManager(listener_timeout=1.0)
    manager.start_listener_timeout_checks()
    async with kernel.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(manager.wait_for_partition, f"guess-{i % 10}")
    assert manager._registered == {}
