"""Events to bytes and back in Flink's layout (`NET/api/serialization/EventSerializer.java`).

An event buffer starts with a big-endian int tag; bodies are big-endian. A barrier is
`tag, id (long), timestamp (long), checkpoint type (byte; a savepoint adds its format
byte), location-reference length (int, -1 = default location), alignment (byte),
aligned-checkpoint timeout (long, ms; Long.MAX_VALUE = none)`.

Flink allocates a barrier's buffer for 38 bytes (plus a non-default location's): a
checkpoint's barrier fills 34 of them, a savepoint's 35. A buffer queued in a subpartition
(`toBufferConsumer`, `event_buffer_bytes`) spans the whole allocation, so the barrier is
38 bytes on the wire; a buffer an input channel makes (`toBuffer`: the announcement of a
timeoutable barrier) holds only the bytes written (`serialize_event`).
"""

from __future__ import annotations

import math
import struct

from shuffle.api.events import (
    AbstractEvent,
    AlignmentType,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfChannelStateEvent,
    EndOfData,
    EndOfPartitionEvent,
    EndOfSuperstepEvent,
    EventAnnouncement,
    StopMode,
)
from shuffle.buffer.data_type import DataType

END_OF_PARTITION_EVENT = 0
CHECKPOINT_BARRIER_EVENT = 1
END_OF_SUPERSTEP_EVENT = 2
CANCEL_CHECKPOINT_MARKER_EVENT = 4
END_OF_CHANNEL_STATE_EVENT = 5
ANNOUNCEMENT_EVENT = 6
END_OF_USER_RECORDS_EVENT = 8

_CHECKPOINT_TYPE_CHECKPOINT = 0
_CHECKPOINT_TYPE_SAVEPOINT = 1
_SAVEPOINT_FORMAT_CANONICAL = 0
_DEFAULT_LOCATION = -1
#: `ByteBuffer.allocate(38 + location bytes)` in Flink's serializeCheckpointBarrier.
_BARRIER_CAPACITY = 38
_JAVA_LONG_MAX = (1 << 63) - 1

_TAG = struct.Struct(">i")
_LONG = struct.Struct(">q")
_BARRIER_HEAD = struct.Struct(">iqq")
_BARRIER_TAIL = struct.Struct(">ibq")
_ALIGNMENT_AND_TIMEOUT = struct.Struct(">bq")
_ANNOUNCEMENT_HEAD = struct.Struct(">ii")

_SINGLETONS: dict[type, int] = {
    EndOfPartitionEvent: END_OF_PARTITION_EVENT,
    EndOfSuperstepEvent: END_OF_SUPERSTEP_EVENT,
    EndOfChannelStateEvent: END_OF_CHANNEL_STATE_EVENT,
}
_SINGLETON_BYTES = {cls: _TAG.pack(tag) for cls, tag in _SINGLETONS.items()}
_SINGLETON_BY_TAG: dict[int, AbstractEvent] = {
    END_OF_PARTITION_EVENT: EndOfPartitionEvent.INSTANCE,
    END_OF_SUPERSTEP_EVENT: EndOfSuperstepEvent.INSTANCE,
    END_OF_CHANNEL_STATE_EVENT: EndOfChannelStateEvent.INSTANCE,
}


def serialize_event(event: AbstractEvent) -> bytes:
    """The event's bytes, starting with Flink's int tag."""
    cls = type(event)
    singleton = _SINGLETON_BYTES.get(cls)
    if singleton is not None:
        return singleton
    if cls is CheckpointBarrier:
        return _serialize_barrier(event)  # type: ignore[arg-type]
    if cls is CancelCheckpointMarker:
        return _TAG.pack(CANCEL_CHECKPOINT_MARKER_EVENT) + _LONG.pack(event.checkpoint_id)  # type: ignore[attr-defined]
    if cls is EndOfData:
        return _TAG.pack(END_OF_USER_RECORDS_EVENT) + bytes((event.stop_mode,))  # type: ignore[attr-defined]
    if cls is EventAnnouncement:
        head = _ANNOUNCEMENT_HEAD.pack(ANNOUNCEMENT_EVENT, event.sequence_number)  # type: ignore[attr-defined]
        return head + serialize_event(event.announced_event)  # type: ignore[attr-defined]
    raise TypeError(f"cannot serialize event of type {cls.__name__}")


def event_buffer_bytes(event: AbstractEvent) -> bytes:
    """The bytes of the buffer Flink queues for `event` in a subpartition
    (`EventSerializer.toBufferConsumer`, which wraps the whole array `toSerializedEvent`
    allocated): the serialized event and the zeros after it. Deserializing ignores them."""
    payload = serialize_event(event)
    return payload.ljust(_allocated_size(event, len(payload)), b"\0")


def _allocated_size(event: AbstractEvent, written: int) -> int:
    """The size of the array Flink serializes `event` into (`written` bytes of it used)."""
    cls = type(event)
    if cls is CheckpointBarrier:
        return _BARRIER_CAPACITY
    if cls is EventAnnouncement:  # its header, then the announced event's whole array
        inner = event.announced_event  # type: ignore[attr-defined]
        return _ANNOUNCEMENT_HEAD.size + _allocated_size(inner, written - _ANNOUNCEMENT_HEAD.size)
    return written


def deserialize_event(data: bytes | bytearray | memoryview) -> AbstractEvent:
    """The event encoded in `data`; `ValueError` on a truncated or unknown encoding."""
    try:
        event, _ = _deserialize(memoryview(data), 0)
    except struct.error as e:
        raise ValueError(f"Incomplete event: {e}") from None
    return event


def _deserialize(data: memoryview, pos: int) -> tuple[AbstractEvent, int]:
    if len(data) - pos < 4:
        raise ValueError("Incomplete event")
    (tag,) = _TAG.unpack_from(data, pos)
    pos += 4
    singleton = _SINGLETON_BY_TAG.get(tag)
    if singleton is not None:
        return singleton, pos
    if tag == CHECKPOINT_BARRIER_EVENT:
        return _deserialize_barrier(data, pos)
    if tag == CANCEL_CHECKPOINT_MARKER_EVENT:
        (checkpoint_id,) = _LONG.unpack_from(data, pos)
        return CancelCheckpointMarker(checkpoint_id), pos + 8
    if tag == END_OF_USER_RECORDS_EVENT:
        if len(data) <= pos:
            raise ValueError("Incomplete event: EndOfData without stop mode")
        return EndOfData(StopMode(data[pos])), pos + 1
    if tag == ANNOUNCEMENT_EVENT:
        (sequence_number,) = _TAG.unpack_from(data, pos)
        announced, pos = _deserialize(data, pos + 4)
        return EventAnnouncement(announced, sequence_number), pos
    raise ValueError(f"Corrupt byte stream for event: unknown event tag {tag}")


def _serialize_barrier(barrier: CheckpointBarrier) -> bytes:
    options = barrier.options
    if options.is_savepoint:
        type_bytes = bytes((_CHECKPOINT_TYPE_SAVEPOINT, _SAVEPOINT_FORMAT_CANONICAL))
    else:
        type_bytes = bytes((_CHECKPOINT_TYPE_CHECKPOINT,))
    timeout = options.aligned_checkpoint_timeout
    timeout_ms = _JAVA_LONG_MAX if math.isinf(timeout) else round(timeout * 1000)
    return (
        _BARRIER_HEAD.pack(CHECKPOINT_BARRIER_EVENT, barrier.id, barrier.timestamp)
        + type_bytes
        + _BARRIER_TAIL.pack(_DEFAULT_LOCATION, options.alignment, timeout_ms)
    )


def _deserialize_barrier(data: memoryview, pos: int) -> tuple[CheckpointBarrier, int]:
    checkpoint_id, timestamp, type_code = struct.unpack_from(">qqb", data, pos)
    pos += 17
    if type_code == _CHECKPOINT_TYPE_CHECKPOINT:
        checkpoint_type = "CHECKPOINT"
    elif type_code == _CHECKPOINT_TYPE_SAVEPOINT:
        checkpoint_type = "SAVEPOINT"
        pos += 1  # savepoint format type, always canonical here
    else:
        raise ValueError(f"Unknown checkpoint type code: {type_code}")
    (location_length,) = _TAG.unpack_from(data, pos)
    pos += 4 + max(location_length, 0)  # a non-default location reference is skipped
    alignment, timeout_ms = _ALIGNMENT_AND_TIMEOUT.unpack_from(data, pos)
    pos += _ALIGNMENT_AND_TIMEOUT.size
    timeout = math.inf if timeout_ms == _JAVA_LONG_MAX else timeout_ms / 1000
    options = CheckpointOptions(checkpoint_type, AlignmentType(alignment), timeout)
    return CheckpointBarrier(checkpoint_id, timestamp, options), pos


def data_type_for_event(event: AbstractEvent, has_priority: bool) -> DataType:
    """The buffer data type an event travels as (`Buffer.DataType.getDataType`)."""
    if has_priority:
        return DataType.PRIORITIZED_EVENT_BUFFER
    if isinstance(event, EndOfChannelStateEvent):
        return DataType.RECOVERY_COMPLETION
    if not isinstance(event, CheckpointBarrier):
        return DataType.EVENT_BUFFER
    if event.options.needs_alignment:
        if event.options.is_timeoutable:
            return DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER
        return DataType.ALIGNED_CHECKPOINT_BARRIER
    return DataType.EVENT_BUFFER
