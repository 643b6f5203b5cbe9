"""How records travel between operators of a task.

Fixed-width synthetic records stay `FixedWidthRecords` batches (vectorized on the hot
path); generic records are lists of `(value, timestamp)`. A user function never sees a
batch: each fixed-width row is handed over as a `SyntheticRecord(key, seq, timestamp)`.

A record's timestamp (the stream element's) is its creation time at the source in
nanoseconds since the job started (virtual in sim mode); operators keep it, sinks measure
end-to-end latency with it. Flink leaves the timestamp to the program's timestamp
assigner; we use the field for latency, and show user functions milliseconds
(`SyntheticRecord.timestamp`, `ctx.timestamp()`), as PyFlink does.
"""

from __future__ import annotations

import inspect
import operator
from typing import Any, Union

from shuffle.serialization.records import FixedWidthRecords, SyntheticRecord

GenericRecords = list[tuple[Any, int]]
NS_PER_MS = 1_000_000
Records = Union[FixedWidthRecords, GenericRecords]


def as_generic(records: Records) -> GenericRecords:
    """`records` as `(value, timestamp)` pairs (fixed-width rows become SyntheticRecords)."""
    if isinstance(records, FixedWidthRecords):
        keys, seqs, stamps = records.keys.tolist(), records.seqs.tolist(), records.timestamps.tolist()
        return [(SyntheticRecord(k, s, t // NS_PER_MS), t) for k, s, t in zip(keys, seqs, stamps)]
    return records


def split(records: Records, n: int) -> tuple[Records, Records]:
    """The first `n` records and the rest."""
    if isinstance(records, FixedWidthRecords):
        return (FixedWidthRecords.of_rows(records.rows[:n], records.format),
                FixedWidthRecords.of_rows(records.rows[n:], records.format))
    return records[:n], records[n:]


def synthetic_records(batch: FixedWidthRecords) -> list[SyntheticRecord]:
    """The rows of `batch` as user functions see them."""
    return [value for value, _ in as_generic(batch)]


_KEY_FIELD = (lambda record: record.key).__code__
_KEY_FIELD_METHOD = (lambda self, record: record.key).__code__


def reads_key_field(function: Any) -> bool:
    """Whether `function` returns its one argument's `key` and nothing else (as
    `lambda r: r.key`, `operator.attrgetter("key")`, or a `KeySelector` whose `get_key`
    does): on a synthetic record, the key column, which writers then hash vectorized."""
    if isinstance(function, operator.attrgetter):
        return repr(function) == "operator.attrgetter('key')"
    if inspect.ismethod(function):
        return _same_code(function.__func__, _KEY_FIELD_METHOD)
    return inspect.isfunction(function) and _same_code(function, _KEY_FIELD)


def _same_code(function: Any, expected: Any) -> bool:
    code = function.__code__
    return (code.co_code == expected.co_code and code.co_names == expected.co_names
            and code.co_argcount == expected.co_argcount)
