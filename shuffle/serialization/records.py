"""Record formats on the wire, as Flink 2.3 writes stream records into network buffers.

A record is a 4-byte big-endian length (not counting itself), then Flink's stream
element: a tag byte (0 = record with timestamp) and an 8-byte big-endian timestamp, then
the value bytes. A record therefore costs its value size + 13 bytes (a Long record is
21 B in Flink 2.3). Timestamps are int64 (milliseconds, as Flink's).

Two value formats:

- `GenericFormat`: the value is msgpack. A tuple is packed as msgpack ext type 0 holding
  the packed list of its items, so tuples come back as tuples and lists as lists (other
  named tuples come back as plain tuples; other types must be msgpack-native). A
  `SyntheticRecord` (a fixed-width row as user functions see it) is ext type 1 with the
  same items and comes back as one, so a function downstream of another reads `r.key`.
- `FixedWidthFormat(record_size)`: synthetic rows of `record_size` bytes: key int64 BE,
  seq int64 BE, zero padding. A row of 8 to 15 bytes holds only the seq (a Long, what
  Flink's `fromSequence` emits: 21 B on the wire) and is its own key. Batches are `FixedWidthRecords`, one numpy structured array
  over the whole wire row, so a batch serializes with one memoryview and parses with one
  `frombuffer` plus a vectorized check of the length and tag fields.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, NamedTuple

import msgpack
import numpy as np

LENGTH_FIELD_SIZE = 4
STREAM_RECORD_TAG = 0
ELEMENT_HEADER_SIZE = 9  # tag byte + timestamp long
RECORD_OVERHEAD = LENGTH_FIELD_SIZE + ELEMENT_HEADER_SIZE

RECORD_HEADER = struct.Struct(">iBq")  # length, stream element tag, timestamp
LENGTH_FIELD = struct.Struct(">i")
ELEMENT_HEADER = struct.Struct(">Bq")

_TUPLE_EXT = 0
_SYNTHETIC_EXT = 1


class SyntheticRecord(NamedTuple):
    """One fixed-width row as user functions see it (its timestamp in milliseconds)."""

    key: int
    seq: int
    timestamp: int


def _pack_default(obj: Any) -> Any:
    """msgpack fallback under `strict_types`: synthetic records to ext 1, other tuples to
    ext 0, int/str/... subclasses to their base."""
    if isinstance(obj, SyntheticRecord):
        return msgpack.ExtType(_SYNTHETIC_EXT, _packb(list(obj)))
    if isinstance(obj, tuple):
        return msgpack.ExtType(_TUPLE_EXT, _packb(list(obj)))
    for base in (bool, int, float, str, bytes, list, dict):
        if isinstance(obj, base):
            return base(obj)
    raise TypeError(f"cannot serialize {type(obj).__name__} as a generic record value")


def _packb(value: Any) -> bytes:
    return msgpack.packb(value, default=_pack_default, strict_types=True, use_bin_type=True)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _TUPLE_EXT:
        return tuple(_unpackb(data))
    if code == _SYNTHETIC_EXT:
        items = _unpackb(data)
        if not isinstance(items, list) or len(items) != len(SyntheticRecord._fields):
            raise ValueError(f"corrupt synthetic record: {items!r}")
        return SyntheticRecord(*items)
    return msgpack.ExtType(code, data)


def _unpackb(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


@dataclass(frozen=True)
class GenericFormat:
    """Any msgpack-able Python value (tuples kept as tuples)."""

    def encode_value(self, value: Any) -> bytes:
        return _packb(value)

    def decode_value(self, data: bytes | memoryview) -> Any:
        return _unpackb(data)


#: Smallest fixed-width value: one Long (the sequence number, which is then also the key).
MIN_FIXED_WIDTH_SIZE = 8
#: Smallest fixed-width value with a key of its own next to the sequence number.
KEYED_FIXED_WIDTH_SIZE = 16


def row_dtype(record_size: int) -> np.dtype:
    """The numpy dtype of one whole wire row of a fixed-width record."""
    fields: list[tuple[str, str]] = [("len", ">i4"), ("tag", "u1"), ("ts", ">i8")]
    if record_size >= KEYED_FIXED_WIDTH_SIZE:
        fields.append(("key", ">i8"))
    fields.append(("seq", ">i8"))
    value_fields = 8 * (len(fields) - 3)
    if record_size > value_fields:
        fields.append(("pad", f"V{record_size - value_fields}"))
    return np.dtype(fields)


#: Bytes of blank rows `FixedWidthFormat.blank_rows` copies from a template (larger batches
#: are built: a restore skips 2^20 records at once).
BLANK_BYTES = 1 << 19


@dataclass(frozen=True)
class FixedWidthFormat:
    """Synthetic records of `record_size` value bytes: key int64, seq int64, padding."""

    record_size: int

    def __post_init__(self) -> None:
        if self.record_size < MIN_FIXED_WIDTH_SIZE:
            raise ValueError(f"record_size must be >= {MIN_FIXED_WIDTH_SIZE} (a Long), got {self.record_size}")

    @property
    def has_key(self) -> bool:
        """Whether rows carry a key of their own; if not, the sequence number is the key."""
        return self.record_size >= KEYED_FIXED_WIDTH_SIZE

    @property
    def wire_size(self) -> int:
        """Bytes of one record on the wire, length prefix included."""
        return self.record_size + RECORD_OVERHEAD

    @cached_property
    def dtype(self) -> np.dtype:
        return row_dtype(self.record_size)

    def blank_rows(self, n: int) -> np.ndarray:
        """`n` rows holding their length field and the record tag, zero elsewhere. Up to
        `BLANK_BYTES` they are copied from a template (one copy of bytes instead of zeroing
        and two strided field writes per batch); larger batches are built."""
        size = n * self.wire_size
        if size > BLANK_BYTES:
            rows = np.zeros(n, dtype=self.dtype)
            rows["len"] = self.record_size + ELEMENT_HEADER_SIZE
            rows["tag"] = STREAM_RECORD_TAG
            return rows
        return self._blank_template[:size].copy().view(self.dtype)

    @cached_property
    def _blank_template(self) -> np.ndarray:
        """The bytes of as many whole blank rows as fit `BLANK_BYTES` (read-only)."""
        n = BLANK_BYTES // self.wire_size
        template = self.blank_rows(n + 1)[:n].view(np.uint8)
        template.flags.writeable = False
        return template

    def encode_value(self, value: tuple[int, int]) -> bytes:
        """The value bytes of one `(key, seq)` record (the key is dropped if rows hold none)."""
        key, seq = value
        if not self.has_key:
            return struct.pack(">q", seq) + bytes(self.record_size - MIN_FIXED_WIDTH_SIZE)
        return struct.pack(">qq", key, seq) + bytes(self.record_size - KEYED_FIXED_WIDTH_SIZE)


@lru_cache(maxsize=None)
def _batch_format(record_size: int) -> FixedWidthFormat:
    """One format per record size for `FixedWidthRecords.make`, so a batch does not build its
    row dtype anew (sources make a batch per wakeup)."""
    return FixedWidthFormat(record_size)


class FixedWidthRecords:
    """A batch of fixed-width records held as their wire rows (immutable by convention)."""

    __slots__ = ("rows", "format")

    def __init__(self, rows: np.ndarray, record_format: FixedWidthFormat) -> None:
        if rows.dtype != record_format.dtype or rows.ndim != 1:
            raise ValueError("rows must be a 1-d array of the format's row dtype")
        self.rows = np.ascontiguousarray(rows)
        self.format = record_format

    @classmethod
    def of_rows(cls, rows: np.ndarray, record_format: FixedWidthFormat) -> FixedWidthRecords:
        """A batch of rows known to be a contiguous 1-d array of the format's dtype (a slice
        of another batch's rows, or rows parsed from a buffer): the constructor's checks,
        skipped on the per-buffer path."""
        batch = object.__new__(cls)
        batch.rows = rows
        batch.format = record_format
        return batch

    @classmethod
    def make(
        cls,
        keys: Sequence[int] | np.ndarray,
        seqs: Sequence[int] | np.ndarray,
        timestamps: Sequence[int] | np.ndarray | int,
        record_size: int,
    ) -> FixedWidthRecords:
        """A batch from key, sequence and timestamp columns (a scalar timestamp is broadcast)."""
        record_format = _batch_format(record_size)
        keys = np.asarray(keys, dtype=np.int64)
        rows = record_format.blank_rows(len(keys))
        rows["ts"] = timestamps
        if record_format.has_key:
            rows["key"] = keys
        rows["seq"] = seqs
        return cls.of_rows(rows, record_format)

    @classmethod
    def empty(cls, record_format: FixedWidthFormat) -> FixedWidthRecords:
        return cls(np.zeros(0, dtype=record_format.dtype), record_format)

    @classmethod
    def from_wire(cls, data: bytes | bytearray | memoryview | np.ndarray, record_format: FixedWidthFormat) -> FixedWidthRecords:
        """Parse whole rows (copied); `ValueError` if a length or tag field is not as expected."""
        rows = np.frombuffer(data, dtype=record_format.dtype).copy()
        check_rows(rows, record_format)
        return cls(rows, record_format)

    @staticmethod
    def concat(batches: Sequence[FixedWidthRecords]) -> FixedWidthRecords:
        """One batch with the records of `batches` in order (all of the same format)."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        if len(batches) == 1:
            return batches[0]
        record_format = batches[0].format
        if any(b.format != record_format for b in batches):
            raise ValueError("cannot concat batches of different record sizes")
        # concatenate the raw bytes: numpy would convert structured fields to native order
        flat = np.concatenate([b.rows.view(np.uint8) for b in batches])
        return FixedWidthRecords.of_rows(flat.view(record_format.dtype), record_format)

    def take(self, indices_or_mask: np.ndarray | Sequence[int]) -> FixedWidthRecords:
        """The records at the given indices, or where a boolean mask is true."""
        selector = np.asarray(indices_or_mask)
        # np.take/np.compress copy whole rows; indexing a structured array goes field by
        # field and is ~20x slower.
        rows = np.compress(selector, self.rows) if selector.dtype == bool else np.take(self.rows, selector)
        return FixedWidthRecords(rows, self.format)

    @property
    def record_size(self) -> int:
        return self.format.record_size

    @property
    def keys(self) -> np.ndarray:
        """Keys as native int64 (the sequence numbers for rows without a key)."""
        return self.rows["key" if self.format.has_key else "seq"].astype(np.int64)

    @property
    def seqs(self) -> np.ndarray:
        return self.rows["seq"].astype(np.int64)

    @property
    def timestamps(self) -> np.ndarray:
        return self.rows["ts"].astype(np.int64)

    @property
    def wire_size(self) -> int:
        """Bytes of the whole batch on the wire."""
        return self.rows.nbytes

    def to_wire(self) -> memoryview:
        """The batch's wire bytes, without copying."""
        return memoryview(self.rows.view(np.uint8))

    def __len__(self) -> int:
        # The shape, not len(rows): asked several times per buffer, and a call fewer each.
        return self.rows.shape[0]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FixedWidthRecords):
            return NotImplemented
        return self.format == other.format and self.rows.tobytes() == other.rows.tobytes()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FixedWidthRecords(n={len(self)}, record_size={self.record_size})"


def check_rows(rows: np.ndarray, record_format: FixedWidthFormat) -> None:
    """Vectorized check that every row has the format's length field and the record tag."""
    if len(rows) <= _FEW_ROWS:
        # A few rows (a flushed buffer of a paced source): their header bytes, without numpy passes.
        # A loop, not all() over a generator: a buffer's check, without a resumption per row.
        data, size, header = rows.tobytes(), rows.itemsize, _row_header(record_format.record_size)
        for offset in range(0, len(data), size):
            if not data.startswith(header, offset):
                break
        else:
            return
    bad = (rows["len"] != record_format.record_size + ELEMENT_HEADER_SIZE) | (rows["tag"] != STREAM_RECORD_TAG)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"corrupt fixed-width record at row {i}: length {int(rows['len'][i])}, tag {int(rows['tag'][i])} "
            f"(expected length {record_format.record_size + ELEMENT_HEADER_SIZE}, tag {STREAM_RECORD_TAG})"
        )


#: Row counts up to which `check_rows` compares header bytes in plain Python.
_FEW_ROWS = 8


@lru_cache(maxsize=None)
def _row_header(record_size: int) -> bytes:
    """The first bytes of every row of that size: the length field and the record tag."""
    return LENGTH_FIELD.pack(record_size + ELEMENT_HEADER_SIZE) + bytes([STREAM_RECORD_TAG])
