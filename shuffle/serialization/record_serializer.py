"""Records to wire bytes (Flink's `RecordWriter.serializeRecord` plus the stream element header).

The writer appends these bytes to the target subpartition's current buffer; a record
that does not fit continues in the next buffer (spanning is the buffer builder's job).
"""

from __future__ import annotations

from typing import Any

from shuffle.serialization.records import (
    ELEMENT_HEADER_SIZE,
    RECORD_HEADER,
    STREAM_RECORD_TAG,
    FixedWidthFormat,
    FixedWidthRecords,
    GenericFormat,
)


class RecordSerializer:
    """Serializes single records of a format, and fixed-width batches in one piece."""

    __slots__ = ("format",)

    def __init__(self, record_format: GenericFormat | FixedWidthFormat) -> None:
        self.format = record_format

    def serialize(self, value: Any, timestamp: int) -> bytes:
        """Length prefix, stream-record tag, timestamp, then the value's bytes."""
        body = self.format.encode_value(value)
        return RECORD_HEADER.pack(len(body) + ELEMENT_HEADER_SIZE, STREAM_RECORD_TAG, timestamp) + body

    def serialize_batch(self, batch: FixedWidthRecords) -> memoryview:
        """The wire bytes of a whole fixed-width batch, without copying."""
        if batch.format != self.format:
            raise ValueError(f"batch of {batch.format} given to a serializer of {self.format}")
        return batch.to_wire()
