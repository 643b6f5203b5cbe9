"""End-to-end latency: log-linear histograms (HdrHistogram-style) of nanosecond values.

Values below 2^SUB_BITS ns are counted exactly; above, each power of two is split into
2^SUB_BITS linear sub-buckets, so a bucket is never wider than 1/64 of its values (a
percentile is within ~1.6 % of the true value) and a histogram is a fixed array of
counts, whatever the number of records. Batches are bucketed with a few vectorized
operations and counted in with one `np.bincount` per 16,384 values.

A sink subtask keeps two: one per sample period (`LatencyMetrics`, sampled into
metrics.parquet as `latencyP50Ms`, ...) and one over the steady state, the second half of
the run, that the JobManager merges per sink vertex for summary.json's `latency_ms`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

SUB_BITS = 6
_SUB = 1 << SUB_BITS
_MAX_EXPONENT = 62  # values up to 2^63 ns
NUM_BUCKETS = _SUB + (_MAX_EXPONENT - SUB_BITS + 1) * _SUB

#: summary keys -> percentile (None: the mean / max)
SUMMARY_KEYS = ("mean", "p50", "p90", "p99", "p999", "max")
_PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
_NS_PER_MS = 1e6


def bucket_indices(values: np.ndarray) -> np.ndarray:
    """The bucket of each value (int64 ns, negatives count as 0)."""
    v = np.maximum(values.astype(np.int64, copy=False), 0)
    # bucket = shift * _SUB + (v >> shift), shift = max(bit length - 1 - SUB_BITS, 0); the
    # exponent field of v as a float64 is bit length - 1 (as frexp's exponent; v < _SUB: shift 0)
    shift = np.maximum((v.astype(np.float64).view(np.int64) >> 52) - (1023 + SUB_BITS), 0)
    return (shift << SUB_BITS) + (v >> shift)


def _bucket_index(v: int) -> int:
    """`bucket_indices` of one value >= 0 (below 2^53 ns, where float64 holds it exactly)."""
    if v < _SUB:
        return v
    shift = v.bit_length() - 1 - SUB_BITS
    return shift * _SUB + (v >> shift)


def _non_negative(values_ns: np.ndarray) -> np.ndarray:
    """Values as int64, negatives as 0."""
    return np.maximum(np.asarray(values_ns, dtype=np.int64), 0)


#: Bucket indices a histogram keeps before it adds them to its counts (128 KiB of them).
_MAX_PENDING = 1 << 14
#: Batches up to this many values are bucketed in plain Python (numpy's per-call overhead
#: dominates them: a sink of a paced job sees a few records per buffer).
_SMALL = 16


def bucket_upper_bounds() -> np.ndarray:
    """The largest value (ns) of each bucket, for percentiles (HdrHistogram's highest equivalent value)."""
    index = np.arange(NUM_BUCKETS, dtype=np.int64)
    shift = np.maximum(index // _SUB - 1, 0)
    low = np.where(index < _SUB, index, (index - shift * _SUB) << shift)
    return low + (np.int64(1) << shift) - 1


_UPPER = bucket_upper_bounds()


class _Bucketed(NamedTuple):
    """A batch of values (ns, >= 0) as a histogram adds them: the bucket of each value, a
    list for a small batch (plain Python is cheaper than numpy for a few), else an array."""

    buckets: list[int] | np.ndarray
    count: int
    total: int | float
    largest: int

    @staticmethod
    def of(values: np.ndarray | list[int]) -> _Bucketed:
        if len(values) <= _SMALL:
            plain = values if isinstance(values, list) else values.tolist()
            return _Bucketed([_bucket_index(value) for value in plain], len(plain), sum(plain), max(plain))
        return _Bucketed(bucket_indices(values), len(values), float(values.sum()), int(values.max()))


class LatencyHistogram:
    """Counts of latency values (ns) with their exact count, sum and max.

    Batches are counted into the bucket array lazily, many at once: one `np.bincount` over
    all the buckets (3,712) per batch of a few hundred values cost more than the values.
    """

    __slots__ = ("_counts", "_pending", "_pending_arrays", "_num_pending", "count", "total", "max")

    def __init__(self) -> None:
        #: Made on the first values (30 KB: a sink idle for a sample period never needs it).
        self._counts: np.ndarray | None = None
        #: Buckets of values not yet added to `_counts` (see `counts`): small batches' in
        #: one list, larger ones' arrays as they came.
        self._pending: list[int] = []
        self._pending_arrays: list[np.ndarray] = []
        self._num_pending = 0
        self.count = 0
        self.total = 0.0
        self.max = 0

    @property
    def counts(self) -> np.ndarray:
        """The count of each bucket."""
        if self._num_pending:
            self._fold_pending()
        if self._counts is None:
            self._counts = np.zeros(NUM_BUCKETS, dtype=np.int64)
        return self._counts

    def _fold_pending(self) -> None:
        parts = self._pending_arrays
        if self._pending:
            parts.append(np.asarray(self._pending, dtype=np.int64))
        added = np.bincount(np.concatenate(parts), minlength=NUM_BUCKETS).astype(np.int64, copy=False)
        if self._counts is None:
            self._counts = added
        else:
            self._counts += added
        self._pending.clear()
        self._pending_arrays = []
        self._num_pending = 0

    def record(self, values_ns: np.ndarray) -> None:
        if len(values_ns):
            self.add(_Bucketed.of(_non_negative(values_ns)))

    def add(self, values: _Bucketed) -> None:
        """Count values already bucketed (once for all the histograms they go to)."""
        if isinstance(values.buckets, list):
            self._pending.extend(values.buckets)
        else:
            self._pending_arrays.append(values.buckets)  # shared, never written
        self._num_pending += values.count
        if self._num_pending >= _MAX_PENDING:  # the steady histogram is read only at the end
            self._fold_pending()
        self.count += values.count
        self.total += float(values.total)
        if values.largest > self.max:
            self.max = values.largest

    def merge(self, other: LatencyHistogram) -> None:
        counts = self.counts
        counts += other.counts
        self.count += other.count
        self.total += other.total
        self.max = max(self.max, other.max)

    def percentile(self, q: float) -> int:
        """The value (ns) at or below which `q` % of the values lie (bucket upper bound, capped
        at the exact max)."""
        if not self.count:
            raise ValueError("no values recorded")
        rank = max(1, int(np.ceil(q / 100.0 * self.count)))
        index = int(np.searchsorted(np.cumsum(self.counts), rank))
        return min(int(_UPPER[index]), self.max)

    def summary_ms(self) -> dict[str, float] | None:
        """`{"mean", "p50", "p90", "p99", "p999", "max"}` in milliseconds (None if empty)."""
        if not self.count:
            return None
        summary = {"mean": self.total / self.count / _NS_PER_MS}
        summary.update({key: self.percentile(q) / _NS_PER_MS for key, q in _PERCENTILES.items()})
        summary["max"] = self.max / _NS_PER_MS
        return {key: summary[key] for key in SUMMARY_KEYS}

    def to_message(self) -> dict[str, Any]:
        """The non-empty buckets, for a job report."""
        nonzero = np.flatnonzero(self.counts)
        return {"buckets": nonzero.tolist(), "counts": self.counts[nonzero].tolist(), "count": self.count,
                "total": self.total, "max": self.max}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> LatencyHistogram:
        histogram = cls()
        histogram.counts[np.asarray(message["buckets"], dtype=np.int64)] = message["counts"]
        histogram.count, histogram.total, histogram.max = message["count"], message["total"], message["max"]
        return histogram


#: Metric names in metrics.parquet (per sink subtask and sample period).
PERIOD_METRICS = {"latencyMeanMs": "mean", "latencyP50Ms": "p50", "latencyP90Ms": "p90",
                  "latencyP99Ms": "p99", "latencyMaxMs": "max"}


class LatencyMetrics:
    """A sink subtask's latency: per sample period (a metric source) and over the steady state."""

    counters: tuple[str, ...] = ()

    def __init__(self, steady: LatencyHistogram) -> None:
        self.period = LatencyHistogram()
        self.steady = steady  # shared by the vertex's subtasks in this TaskManager

    def record(self, values_ns: np.ndarray, in_steady_state: bool) -> None:
        if len(values_ns):
            self._add(_Bucketed.of(_non_negative(values_ns)), in_steady_state)

    def record_since(self, now_ns: int, created_ns: np.ndarray, in_steady_state: bool) -> None:
        """`record` of the latencies `now_ns - created_ns` (a sink's batch: usually a few
        records, computed in plain Python)."""
        n = len(created_ns)
        if n > _SMALL:
            self.record(now_ns - created_ns.astype(np.int64), in_steady_state)
        elif n:
            values = [now_ns - created if created < now_ns else 0 for created in created_ns.tolist()]
            self._add(_Bucketed.of(values), in_steady_state)

    def _add(self, values: _Bucketed, in_steady_state: bool) -> None:
        """Into the period's histogram and, in the steady state, the steady one: bucketed once."""
        self.period.add(values)
        if in_steady_state:
            self.steady.add(values)

    def snapshot(self) -> dict[str, float]:
        """The period's percentiles (nothing if no record arrived), then a fresh period."""
        summary = self.period.summary_ms()
        self.period = LatencyHistogram()
        if summary is None:
            return {}
        return {metric: summary[key] for metric, key in PERIOD_METRICS.items()}
