"""The Netty message catalogue and its framing (Flink's `NET/netty/NettyMessage.java`).

Frame: 4-byte big-endian frame length (including itself), magic `0xBADC0FFE`, 1-byte
message id, then the message's fields as one msgpack array (its header). A
`BufferResponse` puts a 2-byte big-endian header length before its header and the raw
buffer bytes after it, so the payload is sliced out without parsing or copying; its size
is the rest of the frame (Flink's `bufferSize`).

`receiver_id` names the consumer's input channel: an int its TaskManager draws once per
channel, never twice (Flink's random 16-byte `InputChannelID`), so that what is still on
the way to a channel of a failed attempt never reaches its successor. `partition_id` (a
`str`) names the result partition (the execution graph's `partition_id`). Error causes
travel as class name and message (not Java-serialized).

Decoding trusts nothing: a frame whose length is out of range (refused from its length
field, before it is buffered), whose magic or id is wrong, or whose header is not exactly
the message's fields (msgpack scalars of the right types; ints are Java ints >= 0) raises
`CorruptedStreamError`, and only that.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, ClassVar, NoReturn

import msgpack

from shuffle.buffer.data_type import DataType
from shuffle.config import DEFAULT_MAX_FRAME_SIZE
from shuffle.errors import CorruptedStreamError

MAGIC_NUMBER = 0xBADC0FFE
FRAME_HEADER_LENGTH = 9  # frame length (4), magic number (4), message id (1)
_INT_MAX = 2**31 - 1  # Flink's sequence numbers, credits, backlogs, indexes are Java ints

_FRAME_HEADER = struct.Struct(">iIB")
_BUFFER_FRAME_HEADER = struct.Struct(">iIBH")  # ... plus the msgpack header's length
_FRAME_LENGTH = struct.Struct(">i")
_HEADER_LENGTH = struct.Struct(">H")  # a BufferResponse's msgpack header length
_DATA_TYPES = tuple(DataType)


class NettyMessage:
    """Base of all messages; `ID` is Flink's message id."""

    __slots__ = ()
    ID: ClassVar[int]
    _header: ClassVar[Any]  # message -> tuple of header fields
    _header_types: ClassVar[tuple[tuple[str, tuple[type, ...]], ...]]  # (field, accepted types)
    _signatures: ClassVar[frozenset[tuple[type, ...]]]  # every accepted tuple of header types
    _int_fields: ClassVar[tuple[int, ...]]  # header positions holding ints


#: Header field annotations -> the msgpack types a decoded header may hold for them.
_WIRE_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "int | None": (int, type(None)), "bool": (bool,), "bytes": (bytes,),
    "DataType": (int,),  # its ordinal
}


def _message(cls: type) -> type:
    """Make `cls` a slotted dataclass; derive its header getter and wire types from its fields."""
    cls = dataclass(slots=True)(cls)
    header_fields = [f for f in fields(cls) if f.name != "buffer"]
    cls._header_types = tuple((f.name, _WIRE_TYPES[f.type]) for f in header_fields)
    cls._signatures = frozenset(itertools.product(*(types for _, types in cls._header_types)))
    cls._int_fields = tuple(i for i, (_, types) in enumerate(cls._header_types) if int in types)
    names = [f.name for f in header_fields]
    if len(names) == 0:
        cls._header = staticmethod(lambda _msg: ())
    elif len(names) == 1:
        getter = attrgetter(names[0])
        cls._header = staticmethod(lambda msg: (getter(msg),))
    else:
        cls._header = staticmethod(attrgetter(*names))
    return cls


def _check_positive(value: int, text: str) -> None:
    if value <= 0:
        raise ValueError(f"{text} (got {value})")


@_message
class BufferResponse(NettyMessage):
    """S->C: one buffer (data or event) of a subpartition, with the producer's backlog."""

    ID: ClassVar[int] = 0
    receiver_id: int
    sequence_number: int
    backlog: int
    data_type: DataType
    buffer: bytes | bytearray | memoryview
    subpartition_id: int = 0
    is_compressed: bool = False

    @property
    def buffer_size(self) -> int:
        return len(self.buffer)

    @property
    def is_buffer(self) -> bool:
        return self.data_type.is_buffer


@_message
class ErrorResponse(NettyMessage):
    """S->C: a failure; without `receiver_id` it is fatal for the whole connection."""

    ID: ClassVar[int] = 1
    error_class: str
    message: str
    receiver_id: int | None = None

    @property
    def is_fatal_error(self) -> bool:
        return self.receiver_id is None


@_message
class PartitionRequest(NettyMessage):
    """C->S: start reading a subpartition; `credit` is the channel's initial credit."""

    ID: ClassVar[int] = 2
    partition_id: str
    subpartition_index: int
    receiver_id: int
    credit: int


@_message
class TaskEventRequest(NettyMessage):
    """C->S: a serialized task event for the producer (iterations)."""

    ID: ClassVar[int] = 3
    event: bytes
    partition_id: str
    receiver_id: int


@_message
class CancelPartitionRequest(NettyMessage):
    """C->S: release the reader of `receiver_id`."""

    ID: ClassVar[int] = 4
    receiver_id: int


@_message
class CloseRequest(NettyMessage):
    """C->S: release all readers of this connection."""

    ID: ClassVar[int] = 5


@_message
class AddCredit(NettyMessage):
    """C->S: incremental credit of one channel."""

    ID: ClassVar[int] = 6
    credit: int
    receiver_id: int

    def __post_init__(self) -> None:
        _check_positive(self.credit, "The announced credit should be greater than 0")


@_message
class ResumeConsumption(NettyMessage):
    """C->S: unblock a subpartition blocked by an aligned barrier or recovery completion."""

    ID: ClassVar[int] = 7
    receiver_id: int


@_message
class AckAllUserRecordsProcessed(NettyMessage):
    """C->S: everything up to `EndOfData` was processed."""

    ID: ClassVar[int] = 8
    receiver_id: int


@_message
class BacklogAnnouncement(NettyMessage):
    """S->C: backlog of a channel that has no credit (zero exclusive buffers)."""

    ID: ClassVar[int] = 9
    backlog: int
    receiver_id: int

    def __post_init__(self) -> None:
        _check_positive(self.backlog, "Must be positive.")


@_message
class NewBufferSize(NettyMessage):
    """C->S: the buffer size chosen by debloating."""

    ID: ClassVar[int] = 10
    buffer_size: int
    receiver_id: int

    def __post_init__(self) -> None:
        _check_positive(self.buffer_size, "The new buffer size should be greater than 0")


@_message
class SegmentId(NettyMessage):
    """C->S: the segment a hybrid-shuffle consumer needs."""

    ID: ClassVar[int] = 11
    subpartition_id: int
    segment_id: int
    receiver_id: int

    def __post_init__(self) -> None:
        _check_positive(self.segment_id, "The segmentId should be greater than 0")


_BY_ID: dict[int, type] = {
    cls.ID: cls
    for cls in (
        BufferResponse,
        ErrorResponse,
        PartitionRequest,
        TaskEventRequest,
        CancelPartitionRequest,
        CloseRequest,
        AddCredit,
        ResumeConsumption,
        AckAllUserRecordsProcessed,
        BacklogAnnouncement,
        NewBufferSize,
        SegmentId,
    )
}
#: The catalogue, in id order (tests and the fuzzer build examples of every type from it).
MESSAGE_TYPES: tuple[type, ...] = tuple(_BY_ID.values())

_packb = msgpack.Packer(use_bin_type=True).pack
_unpackb = msgpack.unpackb


def encode(msg: NettyMessage) -> list[bytes | bytearray | memoryview]:
    """The frame of `msg` as parts to write in order; a buffer payload is its own part (not copied)."""
    header = _packb(msg._header(msg))
    if type(msg) is BufferResponse:
        payload = msg.buffer
        length = _BUFFER_FRAME_HEADER.size + len(header) + len(payload)
        return [_BUFFER_FRAME_HEADER.pack(length, MAGIC_NUMBER, 0, len(header)) + header, payload]
    return [_FRAME_HEADER.pack(FRAME_HEADER_LENGTH + len(header), MAGIC_NUMBER, msg.ID) + header]


#: Bytes of Flink's encodings of the ids in a frame (2.3): `InputChannelID` 16,
#: `ResultPartitionID` 60 (`IntermediateResultPartitionID` 20, `ExecutionAttemptID` 40),
#: `ResultSubpartitionIndexSet` 8; ints 4, bytes and booleans 1.
_CHANNEL_ID, _PARTITION_ID, _INDEX_SET, _INT = 16, 60, 8, 4
#: A BufferResponse's header after the frame header: receiverId, subpartitionId,
#: numOfPartialBuffers, sequenceNumber, backlog, dataType, isCompressed, bufferSize.
_BUFFER_RESPONSE_HEADER = _CHANNEL_ID + 5 * _INT + 2
#: Message class -> the bytes of Flink's frame of it (frame header included), apart from a
#: BufferResponse's payload and a TaskEventRequest's event.
_FLINK_FRAME: dict[type, int] = {
    BufferResponse: FRAME_HEADER_LENGTH + _BUFFER_RESPONSE_HEADER,
    PartitionRequest: FRAME_HEADER_LENGTH + _PARTITION_ID + _INDEX_SET + _CHANNEL_ID + _INT,
    TaskEventRequest: FRAME_HEADER_LENGTH + _INT + _PARTITION_ID + _CHANNEL_ID,
    CancelPartitionRequest: FRAME_HEADER_LENGTH + _CHANNEL_ID,
    CloseRequest: FRAME_HEADER_LENGTH,
    AddCredit: FRAME_HEADER_LENGTH + _INT + _CHANNEL_ID,
    ResumeConsumption: FRAME_HEADER_LENGTH + _CHANNEL_ID,
    AckAllUserRecordsProcessed: FRAME_HEADER_LENGTH + _CHANNEL_ID,
    BacklogAnnouncement: FRAME_HEADER_LENGTH + _INT + _CHANNEL_ID,
    NewBufferSize: FRAME_HEADER_LENGTH + _INT + _CHANNEL_ID,
    SegmentId: FRAME_HEADER_LENGTH + 2 * _INT + _CHANNEL_ID,
}


def flink_frame_size(msg: NettyMessage) -> int:
    """The length of Flink's frame of `msg` (what a Flink TaskManager would put on the wire),
    which the simulated link carries. An ErrorResponse, a Java-serialized Throwable in Flink,
    counts its frame here (`encode`'s)."""
    cls = type(msg)
    if cls is BufferResponse:
        return _FLINK_FRAME[cls] + len(msg.buffer)  # type: ignore[attr-defined]
    if cls is TaskEventRequest:
        return _FLINK_FRAME[cls] + len(msg.event)  # type: ignore[attr-defined]
    size = _FLINK_FRAME.get(cls)
    return FRAME_HEADER_LENGTH + len(_packb(msg._header(msg))) if size is None else size


def _header(cls: type, data: memoryview) -> list[Any]:
    """The header fields of a `cls` message, checked against its wire types."""
    try:  # msgpack's errors, its limits included, are ValueErrors; str, bin and array
        # lengths are limited to len(data) by default (str as UTF-8, lists: raw=False, use_list)
        values = _unpackb(data, max_array_len=len(cls._header_types), max_map_len=0, max_ext_len=0)
    except ValueError as exc:
        raise CorruptedStreamError(f"{cls.__name__}: header is not valid msgpack ({exc})") from None
    if type(values) is not list or len(values) != len(cls._header_types):
        raise CorruptedStreamError(f"{cls.__name__}: header is not an array of {len(cls._header_types)} fields")
    if tuple(map(type, values)) in cls._signatures:
        for i in cls._int_fields:
            value = values[i]
            if value is not None and not 0 <= value <= _INT_MAX:
                break
        else:
            return values
    name, types = next((name, types) for value, (name, types) in zip(values, cls._header_types)
                       if type(value) not in types or (type(value) is int and not 0 <= value <= _INT_MAX))
    raise CorruptedStreamError(f"{cls.__name__}: field {name!r} is not a valid {types[0].__name__}")


def _decode_frame(frame: memoryview, msg_id: int) -> NettyMessage:
    """Decode one whole frame (length field included) whose header was checked."""
    try:
        if msg_id == BufferResponse.ID:
            start = _BUFFER_FRAME_HEADER.size
            if len(frame) < start:
                raise CorruptedStreamError("BufferResponse: frame too short for its header length")
            (header_length,) = _HEADER_LENGTH.unpack_from(frame, FRAME_HEADER_LENGTH)
            if start + header_length > len(frame):
                raise CorruptedStreamError(f"BufferResponse: header length {header_length} exceeds its frame")
            receiver_id, sequence_number, backlog, data_type, subpartition_id, is_compressed = _header(
                BufferResponse, frame[start : start + header_length])
            if data_type >= len(_DATA_TYPES):
                raise CorruptedStreamError(f"BufferResponse: unknown data type {data_type}")
            return BufferResponse(receiver_id, sequence_number, backlog, _DATA_TYPES[data_type],
                                  frame[start + header_length :], subpartition_id, is_compressed)
        cls = _BY_ID[msg_id]
        return cls(*_header(cls, frame[FRAME_HEADER_LENGTH:]))
    except CorruptedStreamError:
        raise
    except ValueError as exc:  # a message's own validation (e.g. credit > 0)
        raise CorruptedStreamError(str(exc)) from None


class FrameDecoder:
    """Splits a byte stream into messages, decoding them from one reusable buffer.

    Bytes come in either copied by `feed(data)`, or read straight into `room(n)` (the
    buffer's free tail) and then announced by `commit(count)`, which spares that copy.
    Iterating yields every complete message. A `BufferResponse` payload is a memoryview
    into the decoder's buffer, valid until the next `feed` or `room`: copy it into a network
    buffer before that (Flink's decoder copies it into a pooled buffer). A frame longer
    than `max_frame_size` is refused from its length field; after a `CorruptedStreamError`
    the decoder keeps raising it and drops whatever is fed.
    """

    __slots__ = ("_buffer", "_view", "_start", "_end", "_max_frame_size", "_error")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buffer = bytearray()
        self._view = memoryview(self._buffer)
        self._start = 0  # the first byte not decoded yet
        self._end = 0  # the end of the bytes in the buffer
        self._max_frame_size = max_frame_size
        self._error: CorruptedStreamError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Take a copy of `data`."""
        if len(data) and self._error is None:
            self.room(len(data))[:] = memoryview(data).cast("B")
            self._end += len(data)

    def room(self, size: int) -> memoryview:
        """`size` writable bytes right after the undecoded ones; fill a prefix, then `commit`.
        Moves the undecoded bytes to the front of the buffer (or into a larger one) when the
        free tail is shorter than `size`; the payloads of earlier messages get overwritten."""
        start, end = self._start, self._end
        if start == end:
            self._start = self._end = start = end = 0
        if len(self._buffer) - end < size:
            pending = end - start
            undecoded = self._view[start:end]
            if pending + size > len(self._buffer):
                # a new buffer (payload views may still hold the old one), with room for
                # a few more reads of `size` before the next move
                self._buffer = bytearray(max(4 * size, pending + size, 2 * len(self._buffer)))
                self._view = memoryview(self._buffer)
            elif pending > start:
                undecoded = undecoded.tobytes()  # it overlaps its new place
            self._buffer[:pending] = undecoded
            self._start, self._end = start, end = 0, pending
        return self._view[end:end + size]

    def commit(self, count: int) -> None:
        """`count` bytes were written at the start of the last `room`."""
        if self._error is None:
            self._end += count

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet decoded (an incomplete frame)."""
        return self._end - self._start

    def __iter__(self) -> Iterator[NettyMessage]:
        return self

    def __next__(self) -> NettyMessage:
        if self._error is not None:
            raise self._error
        start = self._start
        available = self._end - start
        if available < FRAME_HEADER_LENGTH:
            if available < 4:
                raise StopIteration
            # only the length has arrived: check it now, the rest once it is here
            (length,) = _FRAME_LENGTH.unpack_from(self._view, start)
            magic, msg_id = MAGIC_NUMBER, BufferResponse.ID
        else:
            length, magic, msg_id = _FRAME_HEADER.unpack_from(self._view, start)
        if not FRAME_HEADER_LENGTH <= length <= self._max_frame_size:
            self._fail(f"Network stream corrupted: frame length {length} "
                       f"(must be {FRAME_HEADER_LENGTH} to {self._max_frame_size} bytes)")
        if magic != MAGIC_NUMBER:
            self._fail("Network stream corrupted: received incorrect magic number.")
        if msg_id not in _BY_ID:
            self._fail(f"Received unknown message id {msg_id}")
        if available < length:
            raise StopIteration
        self._start = start + length
        try:
            return _decode_frame(self._view[start : start + length], msg_id)
        except CorruptedStreamError as exc:
            self._fail(exc)

    def _fail(self, error: str | CorruptedStreamError) -> NoReturn:
        """Fail for good: drop the buffered bytes, raise `error` now and on every later call."""
        self._error = error if isinstance(error, CorruptedStreamError) else CorruptedStreamError(error)
        self._start = self._end = 0
        raise self._error
