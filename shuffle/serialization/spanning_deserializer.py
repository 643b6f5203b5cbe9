"""Reassembles records from a channel's buffers (Flink's `SpillingAdaptiveSpanningRecordDeserializer`).

Records may split at any byte, even inside the length prefix. `add_buffer` parses every
record completed by the buffer and copies only the unfinished tail, so the caller may
recycle the buffer as soon as it returns; `read` hands out what was parsed. One
deserializer per input channel. Records are kept in memory (no spilling of huge records).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shuffle.serialization.records import (
    ELEMENT_HEADER,
    ELEMENT_HEADER_SIZE,
    LENGTH_FIELD,
    LENGTH_FIELD_SIZE,
    STREAM_RECORD_TAG,
    FixedWidthFormat,
    FixedWidthRecords,
    GenericFormat,
    check_rows,
)


class SpanningRecordDeserializer:
    """Per-channel record reassembly for a generic or a fixed-width format."""

    __slots__ = ("format", "_fixed", "_pending", "_parsed")

    def __init__(self, record_format: GenericFormat | FixedWidthFormat) -> None:
        self.format = record_format
        #: The format if fixed-width (None: generic), told apart once, not per buffer.
        self._fixed = record_format if isinstance(record_format, FixedWidthFormat) else None
        self._pending = bytearray()  # start of a record that continues in the next buffer
        self._parsed: list[Any] = []  # generic: (value, timestamp); fixed: FixedWidthRecords

    @property
    def has_unfinished_data(self) -> bool:
        """True while a record is split and waits for its next buffer."""
        return bool(self._pending)

    def unconsumed_bytes(self) -> bytes:
        """The start of a record that continues in the next buffer (persisted by unaligned
        checkpoints as the first in-flight bytes of the channel)."""
        return bytes(self._pending)

    def add_buffer(self, data: bytes | bytearray | memoryview) -> None:
        """Parse the records `data` completes; keeps no reference to `data` afterwards."""
        with memoryview(data) as raw, raw.cast("B") as view:
            if self._fixed is not None:
                self._add_fixed(view, self._fixed)
            else:
                self._add_generic(view)

    def read(self) -> list[tuple[Any, int]] | FixedWidthRecords:
        """Records parsed since the last read: a list of `(value, timestamp)` for the generic
        format, one `FixedWidthRecords` batch (possibly empty) for the fixed-width format."""
        parsed, self._parsed = self._parsed, []
        if self._fixed is not None:
            return FixedWidthRecords.concat(parsed) if parsed else FixedWidthRecords.empty(self._fixed)
        return parsed

    def _add_fixed(self, view: memoryview, record_format: FixedWidthFormat) -> None:
        row_size = record_format.wire_size
        pending = self._pending
        start = 0
        if pending:
            start = min(row_size - len(pending), len(view))
            pending += view[:start]
            if len(pending) < row_size:
                return
        end = start + (len(view) - start) // row_size * row_size
        if pending:
            data = pending + view[start:end]  # a new bytearray: the rows' own memory
            pending.clear()
        else:
            data = bytearray(view[start:end])
        pending += view[end:]
        if data:
            rows = np.frombuffer(data, dtype=record_format.dtype)
            check_rows(rows, record_format)
            self._parsed.append(FixedWidthRecords.of_rows(rows, record_format))

    def _add_generic(self, view: memoryview) -> None:
        pending = self._pending
        pos = 0
        n = len(view)
        if pending:
            if len(pending) < LENGTH_FIELD_SIZE:
                pos = min(LENGTH_FIELD_SIZE - len(pending), n)
                pending += view[:pos]
                if len(pending) < LENGTH_FIELD_SIZE:
                    return
            (length,) = LENGTH_FIELD.unpack_from(pending)
            take = min(LENGTH_FIELD_SIZE + length - len(pending), n - pos)
            pending += view[pos : pos + take]
            pos += take
            if len(pending) < LENGTH_FIELD_SIZE + length:
                return
            record = bytes(pending)
            pending.clear()
            self._decode(memoryview(record)[LENGTH_FIELD_SIZE:])
        while n - pos >= LENGTH_FIELD_SIZE:
            (length,) = LENGTH_FIELD.unpack_from(view, pos)
            end = pos + LENGTH_FIELD_SIZE + length
            if end > n:
                break
            self._decode(view[pos + LENGTH_FIELD_SIZE : end])
            pos = end
        pending += view[pos:]

    def _decode(self, element: memoryview) -> None:
        if len(element) < ELEMENT_HEADER_SIZE:
            raise ValueError(f"corrupt record: length {len(element)} is shorter than a stream record header")
        tag, timestamp = ELEMENT_HEADER.unpack_from(element)
        if tag != STREAM_RECORD_TAG:
            raise ValueError(f"unsupported stream element tag {tag} (only 0, record with timestamp)")
        self._parsed.append((self.format.decode_value(element[ELEMENT_HEADER_SIZE:]), timestamp))
