"""End-to-end latency: log-linear histograms (HdrHistogram-style) of nanosecond values.

Values below 2^SUB_BITS ns are counted exactly; above, each power of two is split into
2^SUB_BITS linear sub-buckets, so a bucket is never wider than 1/64 of its values (a
percentile is within ~1.6 % of the true value) and a histogram is a fixed array of
counts, whatever the number of records. Values are kept as they come and bucketed and
counted in with a few vectorized operations per 16,384 values.

A sink subtask keeps two: one per sample period (`LatencyMetrics`, sampled into
metrics.parquet as `latencyP50Ms`, ...) and one over the steady state, the second half of
the run, that the JobManager merges per sink vertex for summary.json's `latency_ms`. Each
period's histogram is also kept (compacted, by sample time): a run that ends before its
duration takes its latency from those of the second half of what ran instead.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

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
    """The bucket of each value (int64 ns, >= 0)."""
    # bucket = shift * _SUB + (v >> shift), shift = max(bit length - 1 - SUB_BITS, 0); the
    # exponent field of v as a float64 is bit length - 1 (as frexp's exponent; v < _SUB: shift 0)
    shift = np.maximum((values.astype(np.float64).view(np.int64) >> 52) - (1023 + SUB_BITS), 0)
    return (shift << SUB_BITS) + (values >> shift)


#: Values a histogram keeps before it buckets them and adds them to its counts (128 KiB of
#: them): bucketing costs a dozen numpy calls, so it is done per ~16,000 values, not per batch.
_MAX_PENDING = 1 << 14
#: Batches up to this many values are kept as Python ints (numpy's per-call overhead
#: dominates them: a sink of a paced job sees a few records per buffer).
_SMALL = 16


def bucket_upper_bounds() -> np.ndarray:
    """The largest value (ns) of each bucket, for percentiles (HdrHistogram's highest equivalent value)."""
    index = np.arange(NUM_BUCKETS, dtype=np.int64)
    shift = np.maximum(index // _SUB - 1, 0)
    low = np.where(index < _SUB, index, (index - shift * _SUB) << shift)
    return low + (np.int64(1) << shift) - 1


_UPPER = bucket_upper_bounds()


class LatencyHistogram:
    """Counts of latency values (ns; negatives count as 0) with their exact count, sum and max.

    Values are kept as they come and counted into the bucket array many at once (`_fold`):
    bucketing and counting a sink's batch of a few hundred values one by one cost more than
    the rest of its path.
    """

    __slots__ = ("_counts", "_pending", "_pending_arrays", "_num_pending", "count", "_total", "_max")

    def __init__(self) -> None:
        #: Made on the first values (30 KB: a sink idle for a sample period never needs it).
        self._counts: np.ndarray | None = None
        #: Values not yet in `_counts`: small batches' in one list, larger ones' arrays as they came.
        self._pending: list[int] = []
        self._pending_arrays: list[np.ndarray] = []
        self._num_pending = 0
        self.count = 0
        self._total = 0.0
        self._max = 0

    @property
    def counts(self) -> np.ndarray:
        """The count of each bucket."""
        if self._num_pending:
            self._fold()
        if self._counts is None:
            self._counts = np.zeros(NUM_BUCKETS, dtype=np.int64)
        return self._counts

    @property
    def total(self) -> float:
        """The sum of the values (ns)."""
        if self._num_pending:
            self._fold()
        return self._total

    @property
    def max(self) -> int:
        """The largest value (ns)."""
        if self._num_pending:
            self._fold()
        return self._max

    def _fold(self) -> None:
        parts = self._pending_arrays
        if self._pending:
            parts.append(np.asarray(self._pending, dtype=np.int64))
        values = np.maximum(np.concatenate(parts) if len(parts) > 1 else parts[0], 0)
        added = np.bincount(bucket_indices(values), minlength=NUM_BUCKETS).astype(np.int64, copy=False)
        if self._counts is None:
            self._counts = added
        else:
            self._counts += added
        self._total += float(values.sum())
        self._max = max(self._max, int(values.max()))
        self._pending.clear()
        self._pending_arrays = []
        self._num_pending = 0

    def record(self, values_ns: np.ndarray | list[int]) -> None:
        """Count `values_ns` (ns; an array is kept, not copied: it must not be written after)."""
        n = len(values_ns)
        if not n:
            return
        if isinstance(values_ns, list):
            self._pending.extend(values_ns)
        else:
            self._pending_arrays.append(np.asarray(values_ns, dtype=np.int64))
        self._num_pending += n
        self.count += n
        if self._num_pending >= _MAX_PENDING:
            self._fold()

    def merge(self, other: LatencyHistogram) -> None:
        counts = self.counts
        counts += other.counts
        self.count += other.count
        self._total += other.total
        self._max = max(self._max, other.max)

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
        """The non-empty buckets, for a job report (arrays: a sink keeps one of each sample period)."""
        nonzero = np.flatnonzero(self.counts)
        return {"buckets": nonzero.astype(np.int32), "counts": self.counts[nonzero], "count": self.count,
                "total": self.total, "max": self.max}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> LatencyHistogram:
        histogram = cls()
        histogram.counts[np.asarray(message["buckets"], dtype=np.int64)] = message["counts"]
        histogram.count, histogram._total, histogram._max = message["count"], message["total"], message["max"]
        return histogram


#: Metric names in metrics.parquet (per sink subtask and sample period).
PERIOD_METRICS = {"latencyMeanMs": "mean", "latencyP50Ms": "p50", "latencyP90Ms": "p90",
                  "latencyP99Ms": "p99", "latencyMaxMs": "max"}


#: A histogram of one sample period: (sample time in job time, `LatencyHistogram.to_message()`).
PeriodEntry = tuple[float, dict[str, Any]]


class LatencyMetrics:
    """A sink subtask's latency: per sample period (a metric source) and over the steady state."""

    counters: tuple[str, ...] = ()
    per_period = True

    def __init__(self, steady: LatencyHistogram, periods: list[PeriodEntry], clock: Callable[[], float]) -> None:
        self.period = LatencyHistogram()
        self.steady = steady  # shared by the vertex's subtasks in this TaskManager
        #: Each period with records, as it ends (`clock`: the job time, whose samples it ends),
        #: from half the job time of the last snapshot but one on: a run that ends at T takes
        #: those from T/2 on, and T is not before now (so the list holds half the run).
        self.periods = periods
        self._clock = clock
        self._last_snapshot = 0.0

    def record(self, values_ns: np.ndarray | list[int], in_steady_state: bool) -> None:
        """Into the period's histogram and, in the steady state, the steady one (`values_ns`
        is kept by both: it must not be written after)."""
        self.period.record(values_ns)
        if in_steady_state:
            self.steady.record(values_ns)

    def record_since(self, now_ns: int, created_ns: np.ndarray, spacing_ns: int, in_steady_state: bool) -> None:
        """`record` of the latencies of records created at `created_ns` and done one after the
        other, `spacing_ns` apart, the last at `now_ns` (a sink's batch: for a few records,
        computed in plain Python)."""
        n = len(created_ns)
        first_ns = now_ns - (n - 1) * spacing_ns
        if n > _SMALL:
            done = np.arange(first_ns, now_ns + 1, spacing_ns, dtype=np.int64) if spacing_ns else now_ns
            self.record(done - created_ns.astype(np.int64), in_steady_state)
        else:
            self.record([first_ns + i * spacing_ns - created for i, created in enumerate(created_ns.tolist())],
                        in_steady_state)

    def snapshot(self) -> dict[str, float]:
        """The period's percentiles (nothing if no record arrived), then a fresh period."""
        summary = self.period.summary_ms()
        now = round(self._clock(), 9)
        if summary is not None:
            self.periods.append((now, self.period.to_message()))
        # one period's margin: a TaskManager's job time may run ahead of the JobManager's
        del self.periods[:bisect_left(self.periods, self._last_snapshot / 2, key=lambda entry: entry[0])]
        self._last_snapshot = now
        self.period = LatencyHistogram()
        if summary is None:
            return {}
        return {metric: summary[key] for metric, key in PERIOD_METRICS.items()}
