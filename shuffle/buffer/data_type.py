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

    @property
    def is_buffer(self) -> bool:
        """True for record data (the only type that costs credit)."""
        return self is DataType.DATA_BUFFER

    @property
    def is_event(self) -> bool:
        """True for every serialized event (all types but NONE and DATA_BUFFER)."""
        return self > DataType.DATA_BUFFER

    @property
    def has_priority(self) -> bool:
        """True for events that overtake queued buffers (unaligned barriers, announcements)."""
        return self is DataType.PRIORITIZED_EVENT_BUFFER

    @property
    def is_blocking_upstream(self) -> bool:
        """True when the producer's subpartition blocks after sending it until resumed."""
        return self in _BLOCKING_UPSTREAM

    @property
    def requires_announcement(self) -> bool:
        """True when its arrival is announced ahead of the data (timeoutable barriers)."""
        return self is DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER


_BLOCKING_UPSTREAM = frozenset(
    {
        DataType.ALIGNED_CHECKPOINT_BARRIER,
        DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER,
        DataType.RECOVERY_COMPLETION,
    }
)
