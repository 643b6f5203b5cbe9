"""BufferBuilder (the single writer of a segment) and BufferConsumer (its readers).

The builder appends bytes and publishes a committed position; consumers build read
slices from their read position up to it. A segment can thus leave as several slices
when it is flushed while partly filled, as in Flink since 1.5.
"""

from __future__ import annotations

from shuffle.buffer.buffer import Buffer, MemorySegment, Recycler, SegmentRef
from shuffle.buffer.data_type import DataType


class BufferBuilder:
    """Writes into one segment; `finish()` freezes its size."""

    __slots__ = ("ref", "segment", "memory", "position", "capacity", "finished", "data_type", "_closed")

    def __init__(self, segment: MemorySegment, recycler: Recycler,
                 data_type: DataType = DataType.DATA_BUFFER) -> None:
        self.ref = SegmentRef(segment, recycler)
        self.segment = segment
        self.memory = segment.memory  # grows as bytes are appended (MemorySegment.grow)
        self.position = 0
        self.capacity = segment.size
        self.finished = False
        self.data_type = data_type
        self._closed = False

    def create_buffer_consumer(self) -> "BufferConsumer":
        """A reader from the current position (broadcast builders start readers at 0)."""
        return self.create_buffer_consumer_from(self.position)

    def create_buffer_consumer_from(self, offset: int) -> "BufferConsumer":
        self.ref.retain()
        return BufferConsumer(self, offset)

    def append(self, data: bytes | bytearray | memoryview, start: int = 0) -> int:
        """Copy as many bytes of `data[start:]` as fit; returns how many were copied."""
        pos = self.position
        n = len(data) - start
        if n > self.capacity - pos:
            n = self.capacity - pos
        if n > 0:
            if pos + n > self.memory.nbytes:
                self.memory = self.segment.grow(pos + n)
            self.memory[pos:pos + n] = data[start:start + n]
            self.position = pos + n
        return n

    @property
    def writable_bytes(self) -> int:
        return self.capacity - self.position

    def is_full(self) -> bool:
        return self.position >= self.capacity

    def finish(self) -> int:
        """Freeze the size; returns the bytes written."""
        self.finished = True
        return self.position

    def trim(self, new_size: int) -> None:
        """Lower (or restore) the usable capacity, never below the position (debloating)."""
        self.capacity = max(self.position, min(new_size, self.segment.size))

    def close(self) -> None:
        """The writer's reference is released; consumers keep the segment alive."""
        if not self._closed:
            self._closed = True
            self.ref.release()


class BufferConsumer:
    """Reads what its builder has committed; `build()` returns the next slice."""

    __slots__ = ("builder", "data_type", "read_position", "is_finished", "_closed")

    def __init__(self, builder: BufferBuilder, read_position: int) -> None:
        self.builder = builder
        self.data_type = builder.data_type  # the builder's, fixed (read several times per buffer)
        self.read_position = read_position
        #: Flink's `isFinished()`: the writer's "finished" flag as cached when the last slice
        #: was built (the subpartition's notification rules depend on this). An attribute, read
        #: several times per buffer; only `build` sets it after creation.
        self.is_finished = builder.finished
        self._closed = False

    @staticmethod
    def for_event(payload: bytes, data_type: DataType) -> "BufferConsumer":
        """A finished consumer over an (unpooled) event."""
        builder = BufferBuilder(MemorySegment.wrap(bytearray(payload)), _no_recycle, data_type)
        builder.position = len(payload)
        builder.finish()
        consumer = builder.create_buffer_consumer_from(0)
        builder.close()
        return consumer

    @property
    def is_buffer(self) -> bool:
        return self.data_type.is_buffer

    def is_data_available(self) -> bool:
        return self.read_position < self.builder.position

    def unread_bytes(self) -> int:
        return self.builder.position - self.read_position

    def build(self) -> Buffer:
        """The slice from the read position to the committed position (may be empty)."""
        builder = self.builder
        self.is_finished = builder.finished
        start, end = self.read_position, builder.position
        self.read_position = end
        builder.ref.retain()
        return Buffer(builder.ref, start, end - start, builder.data_type)

    def copy(self) -> "BufferConsumer":
        """Another reader over the same segment at the same position (reference counted). As
        Flink's, its cached finished flag is read from the writer now, not copied."""
        return self.builder.create_buffer_consumer_from(self.read_position)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.builder.ref.release()

    @property
    def is_closed(self) -> bool:
        return self._closed


def _no_recycle(_: MemorySegment) -> None:
    """Event segments are plain bytes."""
