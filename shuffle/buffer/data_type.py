"""`Buffer.DataType`: what a network buffer carries (Flink's `NET/buffer/Buffer.java`).

The ordinal travels on the wire as one byte (in `BufferResponse`), so the values are
Flink's ordinals and must not change.
"""

from __future__ import annotations

from enum import IntEnum


class DataType(IntEnum):
    """Kind of a buffer's content; properties as Flink defines them per constant."""

    NONE = 0
    DATA_BUFFER = 1
    EVENT_BUFFER = 2
    PRIORITIZED_EVENT_BUFFER = 3
    ALIGNED_CHECKPOINT_BARRIER = 4
    TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER = 5
    RECOVERY_COMPLETION = 6
    END_OF_SEGMENT = 7

    # Properties as Flink defines them per constant, set on each member below (plain
    # attributes: the hot path reads them several times per buffer).
    #: Record data (the only type that costs credit).
    is_buffer: bool
    #: Every serialized event (all types but NONE and DATA_BUFFER).
    is_event: bool
    #: Events that overtake queued buffers (unaligned barriers, announcements).
    has_priority: bool
    #: The producer's subpartition blocks after sending it until resumed.
    is_blocking_upstream: bool
    #: Its arrival is announced ahead of the data (timeoutable barriers).
    requires_announcement: bool


_BLOCKING_UPSTREAM = frozenset(
    {
        DataType.ALIGNED_CHECKPOINT_BARRIER,
        DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER,
        DataType.RECOVERY_COMPLETION,
    }
)

for _member in DataType:
    _member.is_buffer = _member is DataType.DATA_BUFFER
    _member.is_event = _member > DataType.DATA_BUFFER
    _member.has_priority = _member is DataType.PRIORITIZED_EVENT_BUFFER
    _member.is_blocking_upstream = _member in _BLOCKING_UPSTREAM
    _member.requires_announcement = _member is DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER
del _member
