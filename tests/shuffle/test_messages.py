"""Netty message catalogue and framing (spec 3.1, 3.2)."""

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shuffle.buffer.data_type import DataType
from shuffle.netty.messages import (
    MAGIC_NUMBER,
    AckAllUserRecordsProcessed,
    AddCredit,
    BacklogAnnouncement,
    BufferResponse,
    CancelPartitionRequest,
    CloseRequest,
    CorruptedStreamError,
    ErrorResponse,
    FrameDecoder,
    NewBufferSize,
    PartitionRequest,
    ResumeConsumption,
    SegmentId,
    TaskEventRequest,
    encode,
)

EXAMPLES = [
    BufferResponse(1, 5, 2, DataType.DATA_BUFFER, b"\x01\x02\x03", subpartition_id=4),
    BufferResponse(1, 6, 0, DataType.ALIGNED_CHECKPOINT_BARRIER, b"", is_compressed=True),
    ErrorResponse("PartitionNotFoundException", "Partition p-1 not found.", 1),
    ErrorResponse("IOException", "connection lost"),
    PartitionRequest("p-1", 3, 1, 2),
    TaskEventRequest(b"\x00\x00\x00\x02", "p-1", 1),
    CancelPartitionRequest(1),
    CloseRequest(),
    AddCredit(3, 1),
    ResumeConsumption(1),
    AckAllUserRecordsProcessed(1),
    BacklogAnnouncement(7, 1),
    NewBufferSize(1024, 1),
    SegmentId(0, 9, 1),
]


def frame_bytes(msg):
    return b"".join(bytes(part) for part in encode(msg))


def test_ids_are_flinks():
    assert [type(m).ID for m in EXAMPLES] == [0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_frame_layout_and_round_trip(msg):
    data = frame_bytes(msg)
    length, magic, msg_id = struct.unpack_from(">iIB", data)
    assert (length, magic, msg_id) == (len(data), 0xBADC0FFE, type(msg).ID)
    decoder = FrameDecoder()
    decoder.feed(data)
    assert list(decoder) == [msg]
    assert decoder.buffered_bytes == 0


def test_buffer_response_payload_is_not_copied_on_encode_and_sliced_on_decode():
    payload = bytearray(b"x" * 1000)
    msg = BufferResponse(9, 1, 0, DataType.DATA_BUFFER, memoryview(payload))
    header, body = encode(msg)
    assert body.obj is payload  # the very payload memory, no copy
    decoder = FrameDecoder()
    decoder.feed(header + bytes(body))
    (decoded,) = decoder
    assert isinstance(decoded.buffer, memoryview)
    assert decoded.buffer_size == 1000 and bytes(decoded.buffer) == bytes(payload)
    assert decoded.is_buffer and decoded.data_type is DataType.DATA_BUFFER


def test_validation_like_flink():
    with pytest.raises(ValueError, match="The announced credit should be greater than 0"):
        AddCredit(0, 1)
    with pytest.raises(ValueError, match="Must be positive."):
        BacklogAnnouncement(0, 1)
    with pytest.raises(ValueError, match="The new buffer size should be greater than 0"):
        NewBufferSize(-1, 1)
    with pytest.raises(ValueError, match="The segmentId should be greater than 0"):
        SegmentId(0, 0, 1)
    assert ErrorResponse("E", "m").is_fatal_error and not ErrorResponse("E", "m", 1).is_fatal_error


def test_validation_applies_to_decoded_frames():
    data = bytearray(frame_bytes(AddCredit(1, 1)))
    header_start = 9
    assert data[header_start : header_start + 2] == b"\x92\x01"  # msgpack [1, 1]
    data[header_start + 1] = 0
    decoder = FrameDecoder()
    decoder.feed(bytes(data))
    with pytest.raises(ValueError, match="greater than 0"):
        next(decoder)


def test_wrong_magic_is_flinks_error():
    data = bytearray(frame_bytes(CloseRequest()))
    data[4:8] = struct.pack(">I", 0xDEADBEEF)
    decoder = FrameDecoder()
    decoder.feed(bytes(data))
    with pytest.raises(CorruptedStreamError, match="Network stream corrupted: received incorrect magic number"):
        list(decoder)


def test_unknown_id_and_bad_length():
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">iIB", 10, MAGIC_NUMBER, 99) + b"\x90")
    with pytest.raises(CorruptedStreamError, match="unknown message id 99"):
        next(decoder)
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", 3))
    with pytest.raises(CorruptedStreamError, match="frame length 3"):
        next(decoder)


def test_partial_frame_waits_for_more():
    data = frame_bytes(EXAMPLES[0])
    decoder = FrameDecoder()
    decoder.feed(data[:-1])
    assert list(decoder) == []
    assert decoder.buffered_bytes == len(data) - 1
    decoder.feed(data[-1:])
    assert list(decoder) == [EXAMPLES[0]]


ids = st.text(min_size=1, max_size=20)
ints = st.integers(0, 2**31 - 1)
messages = st.one_of(
    st.builds(
        BufferResponse,
        ints,
        ints,
        ints,
        st.sampled_from(DataType),
        st.binary(max_size=3000),
        ints,
        st.booleans(),
    ),
    st.builds(ErrorResponse, ids, st.text(), st.none() | ints),
    st.builds(PartitionRequest, ids, ints, ints, ints),
    st.builds(AddCredit, st.integers(1, 2**31 - 1), ints),
    st.builds(BacklogAnnouncement, st.integers(1, 2**31 - 1), ints),
    st.builds(NewBufferSize, st.integers(1, 2**31 - 1), ints),
    st.just(CloseRequest()),
    st.builds(ResumeConsumption, ints),
)


@given(st.lists(messages, max_size=12), st.data())
def test_any_chunking_round_trips(msgs, data):
    stream = b"".join(frame_bytes(m) for m in msgs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=25)))
    decoder = FrameDecoder()
    decoded = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):
        decoder.feed(stream[start:end])
        for msg in decoder:
            if isinstance(msg, BufferResponse):
                msg.buffer = bytes(msg.buffer)  # the caller copies the payload out
            decoded.append(msg)
    assert decoded == msgs
    assert decoder.buffered_bytes == 0


def _read_in_pieces(decoder, stream, read_sizes, room_size):
    """Read `stream` into `decoder.room(room_size)` as a socket would, each read taking the
    next of `read_sizes` (cycled) bytes at most; the decoded messages, payloads copied out
    before the next read as handlers do."""
    decoded, position = [], 0
    for size in itertools.cycle(read_sizes):
        if position == len(stream):
            return decoded
        room = decoder.room(room_size)
        count = min(size, room_size, len(stream) - position)
        room[:count] = stream[position:position + count]
        decoder.commit(count)
        position += count
        for msg in decoder:
            if isinstance(msg, BufferResponse):
                msg.buffer = bytes(msg.buffer)
            decoded.append(msg)


def test_frames_split_across_reads_at_every_byte_boundary():
    stream = b"".join(frame_bytes(m) for m in EXAMPLES)
    for cut in range(1, len(stream)):
        decoder = FrameDecoder()
        assert _read_in_pieces(decoder, stream, [cut, len(stream)], len(stream)) == EXAMPLES
        assert decoder.buffered_bytes == 0


def test_many_frames_in_one_read_decode_from_the_read_buffer_without_copies():
    msgs = [BufferResponse(1, i, 0, DataType.DATA_BUFFER, bytes([i]) * 1000) for i in range(50)]
    stream = b"".join(frame_bytes(m) for m in msgs)
    decoder = FrameDecoder()
    room = decoder.room(len(stream) + 10)
    room[:len(stream)] = stream
    decoder.commit(len(stream))
    decoded = list(decoder)
    assert decoded == msgs  # payload views compare equal to the bytes sent
    assert all(m.buffer.obj is room.obj for m in decoded)  # views into the read buffer itself


def test_a_frame_larger_than_the_buffer_grows_it_keeping_what_was_read():
    big = BufferResponse(1, 1, 0, DataType.DATA_BUFFER, bytes(range(256)) * 40)
    msgs = [AddCredit(1, 1), big, AddCredit(2, 1)]
    stream = b"".join(frame_bytes(m) for m in msgs)
    assert _read_in_pieces(FrameDecoder(), stream, [100], 100) == msgs


def test_undecoded_bytes_move_to_the_front_also_onto_themselves():
    """Reads of 100 into a 400-byte buffer: a partial frame moves to the front, overlapping
    its old place when it is longer than what was decoded before it."""
    msgs = [m for i in range(6) for m in (
        BufferResponse(1, i, 0, DataType.DATA_BUFFER, bytes([i]) * (150 + 40 * i)), AddCredit(i + 1, 1))]
    stream = b"".join(frame_bytes(m) for m in msgs)
    for read_sizes in ([100], [100, 37], [61, 100, 3]):
        assert _read_in_pieces(FrameDecoder(), stream, read_sizes, 100) == msgs


@given(st.lists(messages, max_size=12), st.lists(st.integers(1, 300), min_size=1, max_size=40),
       st.integers(1, 300))
def test_any_reads_into_the_buffer_round_trip(msgs, read_sizes, room_size):
    stream = b"".join(frame_bytes(m) for m in msgs)
    decoder = FrameDecoder()
    assert _read_in_pieces(decoder, stream, read_sizes, room_size) == msgs
    assert decoder.buffered_bytes == 0


def test_a_failed_decoder_ignores_reads():
    decoder = FrameDecoder()
    room = decoder.room(4)
    room[:] = struct.pack(">i", 3)
    decoder.commit(4)
    with pytest.raises(CorruptedStreamError, match="frame length 3"):
        next(decoder)
    decoder.commit(len(decoder.room(10)))
    decoder.feed(frame_bytes(CloseRequest()))
    assert decoder.buffered_bytes == 0
    with pytest.raises(CorruptedStreamError, match="frame length 3"):
        next(decoder)
