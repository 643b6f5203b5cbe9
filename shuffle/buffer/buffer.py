"""Memory segments and network buffers with Flink's reference counting.

A `MemorySegment` is a fixed-size slice of a NetworkBufferPool's memory. A `Buffer` is a
view of a segment (offset and size) with a data type. Several buffers (slices of a
partly flushed segment, broadcast copies) may share one segment: the segment goes back
to its recycler only when the last holder releases it, as Flink's NetworkBuffer does.
"""

from __future__ import annotations

from typing import Callable

from shuffle.buffer.data_type import DataType

Recycler = Callable[["MemorySegment"], None]


class MemorySegment:
    """A fixed-size piece of network memory."""

    __slots__ = ("index", "memory")

    def __init__(self, index: int, memory: memoryview) -> None:
        self.index = index
        self.memory = memory

    @property
    def size(self) -> int:
        return len(self.memory)

    @staticmethod
    def wrap(data: bytes | bytearray) -> "MemorySegment":
        """An unpooled segment over existing bytes (event buffers, as Flink's heap segments)."""
        return MemorySegment(-1, memoryview(data))


def _drop(_: MemorySegment) -> None:
    """Recycler of unpooled segments: nothing to give back."""


class SegmentRef:
    """Reference count of one segment; recycles it when the count drops to zero."""

    __slots__ = ("segment", "recycler", "count")

    def __init__(self, segment: MemorySegment, recycler: Recycler = _drop) -> None:
        self.segment = segment
        self.recycler = recycler
        self.count = 1

    def retain(self) -> None:
        if self.count <= 0:
            raise RuntimeError("buffer retained after it was recycled")
        self.count += 1

    def release(self) -> None:
        if self.count <= 0:
            raise RuntimeError("buffer recycled twice")
        self.count -= 1
        if self.count == 0:
            self.recycler(self.segment)


class Buffer:
    """A readable view of `size` bytes of a segment, starting at `offset`."""

    __slots__ = ("ref", "offset", "size", "data_type")

    def __init__(self, ref: SegmentRef, offset: int, size: int, data_type: DataType) -> None:
        self.ref = ref
        self.offset = offset
        self.size = size
        self.data_type = data_type

    @staticmethod
    def of_segment(segment: MemorySegment, recycler: Recycler, size: int = 0,
                   data_type: DataType = DataType.DATA_BUFFER) -> "Buffer":
        """A fresh buffer owning a whole segment (consumer side: filled by the network)."""
        return Buffer(SegmentRef(segment, recycler), 0, size, data_type)

    @staticmethod
    def of_event(payload: bytes, data_type: DataType) -> "Buffer":
        """An unpooled event buffer."""
        return Buffer(SegmentRef(MemorySegment.wrap(payload)), 0, len(payload), data_type)

    @property
    def segment(self) -> MemorySegment:
        return self.ref.segment

    def memory(self) -> memoryview:
        """The readable bytes."""
        return self.ref.segment.memory[self.offset:self.offset + self.size]

    @property
    def is_buffer(self) -> bool:
        return self.data_type.is_buffer

    def retain(self) -> "Buffer":
        self.ref.retain()
        return self

    def recycle(self) -> None:
        self.ref.release()

    @property
    def is_recycled(self) -> bool:
        return self.ref.count <= 0

    def __repr__(self) -> str:
        return f"Buffer({self.data_type.name}, size={self.size})"
