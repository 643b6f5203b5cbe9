"""Memory segments and network buffers with Flink's reference counting.

A `MemorySegment` is one of a NetworkBufferPool's fixed-size pieces of memory. It is
accounted as Flink accounts segments (pools, required counts, exclusive and floating),
but holds real bytes only for the data it holds: they grow as data is written and are
dropped when its last buffer is recycled, so an idle channel's buffers cost no memory and
a buffer flushed with three records costs three records. A `Buffer` is a view of a segment (offset and
size) with a data type. Several buffers (slices of a
partly flushed segment, broadcast copies) may share one segment: the segment goes back
to its recycler only when the last holder releases it, as Flink's NetworkBuffer does.
"""

from __future__ import annotations

from typing import Callable

from shuffle.buffer.data_type import DataType

Recycler = Callable[["MemorySegment"], None]


class MemorySegment:
    """A fixed-size piece of network memory; its bytes exist while it holds data.

    `size` is the segment's capacity (what pools account). `memory` is only what was
    written (empty if nothing): the writer (BufferBuilder) grows it as it appends, a
    receiving channel adopts the bytes that arrived (`adopt`), and it is dropped when the
    last buffer over the segment is recycled. A plain attribute, not a property: every
    buffer read and every builder reads it (set it only through the methods below and
    `SegmentRef.release`).
    """

    __slots__ = ("size", "memory")

    def __init__(self, size: int, memory: memoryview | None = None) -> None:
        self.size = size
        self.memory = _EMPTY if memory is None else memory

    @property
    def allocated(self) -> int:
        """Bytes of real memory behind the segment now."""
        return self.memory.nbytes

    def adopt(self, data: bytes | memoryview) -> None:
        """Hold `data` as the segment's content (no copy; the segment is read, not written)."""
        if len(data) > self.size:
            raise ValueError(f"{len(data)} bytes do not fit a segment of {self.size}")
        self.memory = memoryview(data)

    def grow(self, needed: int) -> memoryview:
        """Writable bytes for at least `needed` bytes, keeping what was written; built slices
        keep viewing the old bytes, which stay valid because only new positions are written.
        Sizes are powers of two from `_MIN_ALLOCATION` up to the segment's (at most twice
        what is written, and a large first write needs no second allocation and copy)."""
        old = self.memory
        have = old.nbytes
        if needed > have:
            new = memoryview(bytearray(min(self.size, max(1 << (needed - 1).bit_length(), _MIN_ALLOCATION))))
            if have:
                new[:have] = old
            self.memory = old = new
        return old

    @staticmethod
    def wrap(data: bytes | bytearray) -> "MemorySegment":
        """An unpooled segment over existing bytes (event buffers, as Flink's heap segments)."""
        return MemorySegment(len(data), memoryview(data))


_EMPTY = memoryview(b"")
_MIN_ALLOCATION = 512


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
            segment = self.segment
            segment.memory = _EMPTY  # it holds no data any more: drop its bytes
            self.recycler(segment)


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
