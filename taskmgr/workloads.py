"""Synthetic data of generator sources: vectorized keys, record batches and rate schedules.

Keys are drawn in numpy batches from a `graph.KeyDistribution` with one random generator
per source subtask (`subtask_rng`, seeded from the run's seed), so a run is reproducible.
Records are `FixedWidthRecords` whose sequence numbers start at 0 and increase by one per
record of a subtask, so sinks can check loss, duplication and order.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from shuffle.serialization.records import FixedWidthRecords

if TYPE_CHECKING:
    from graph import GeneratorSource, KeyDistribution


#: Keys a generator draws at a time (see `GeneratorState._peek_keys`).
KEY_BLOCK = 1024


def subtask_rng(seed: int, vertex: str, subtask: int) -> np.random.Generator:
    """The random generator of one source subtask: a function of (seed, vertex name, index)."""
    entropy = [seed & 0xFFFF_FFFF_FFFF_FFFF, zlib.crc32(vertex.encode()), subtask]
    return np.random.default_rng(np.random.SeedSequence(entropy))


class KeySampler:
    """Draws int64 keys in [0, num_keys) from a `KeyDistribution`.

    - uniform: every key equally likely;
    - zipf: key k (rank k + 1) with weight 1 / (k + 1) ** zipf_exponent, bounded to num_keys;
    - hot_key: key 0 with probability hot_key_fraction, else uniform over the other keys
      (so key 0's share is exactly the fraction).
    """

    def __init__(self, distribution: KeyDistribution) -> None:
        self.distribution = distribution
        self._zipf_cdf: np.ndarray | None = None
        if distribution.kind == "zipf":
            weights = np.arange(1, distribution.num_keys + 1, dtype=np.float64) ** -distribution.zipf_exponent
            cdf = np.cumsum(weights)
            self._zipf_cdf = cdf / cdf[-1]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` keys, each from one value of `rng`'s stream (a uniform double, or a bounded
        integer), so that n draws equal the concatenation of draws that add up to n: which
        key a record gets does not depend on how its source batches its records."""
        num_keys = self.distribution.num_keys
        if self._zipf_cdf is not None:
            keys = np.searchsorted(self._zipf_cdf, rng.random(n), side="right")
            return np.minimum(keys, num_keys - 1).astype(np.int64)
        if self.distribution.kind == "hot_key" and num_keys > 1:
            hot = self.distribution.hot_key_fraction
            u = rng.random(n)
            if hot >= 1.0:
                return np.zeros(n, dtype=np.int64)
            # below `hot`: key 0; above, the rest of [0, 1) spread evenly over keys 1..num_keys-1
            others = 1 + ((u - hot) / (1.0 - hot) * (num_keys - 1)).astype(np.int64)
            return np.where(u < hot, 0, np.minimum(others, num_keys - 1))
        return rng.integers(0, num_keys, n, dtype=np.int64)


#: Records drawn at once when a restored source skips what it emitted before its checkpoint.
SKIP_CHUNK = 1 << 20


@dataclass
class GeneratorState:
    """What one generator source subtask has emitted; hands out the next batches."""

    keys: KeySampler
    rng: np.random.Generator
    record_size: int
    #: Records this subtask still emits; None: unbounded.
    remaining: int | None = None
    next_seq: int = 0
    #: Keys drawn ahead: a block at a time (the same keys as drawn batch by batch), and
    #: those of records peeked but not handed out yet.
    _ahead: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64), init=False, repr=False,
                               compare=False)
    _ahead_pos: int = field(default=0, init=False, repr=False, compare=False)

    @classmethod
    def for_subtask(cls, source: GeneratorSource, seed: int, vertex: str, subtask: int) -> GeneratorState:
        """The state of subtask `subtask` of generator source `source` (`StreamNode.source`)."""
        rng = subtask_rng(seed, vertex, subtask)
        return cls(KeySampler(source.keys), rng, source.record_size, source.count)

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0

    def skip(self, n: int) -> None:
        """Advance past the next `n` records as if they had been emitted (a restore)."""
        while n > 0:
            step = min(n, SKIP_CHUNK)
            self.next_batch(step, 0)
            n -= step

    def next_batch(self, n: int, timestamp_ns: int | np.ndarray) -> FixedWidthRecords:
        """The next `n` records, stamped `timestamp_ns` (one for all, or one each), fewer at the
        end of a bounded source."""
        batch = self.peek_batch(n, timestamp_ns)
        self.advance(len(batch))
        return batch

    def peek_batch(self, n: int, timestamp_ns: int | np.ndarray) -> FixedWidthRecords:
        """`next_batch` without moving past the records: until `advance`, the same records
        (keys and sequence numbers) come again."""
        if self.remaining is not None:
            n = min(n, self.remaining)
            if isinstance(timestamp_ns, np.ndarray):
                timestamp_ns = timestamp_ns[:n]
        seqs = np.arange(self.next_seq, self.next_seq + n, dtype=np.int64)
        return FixedWidthRecords.make(self._peek_keys(n), seqs, timestamp_ns, self.record_size)

    def advance(self, n: int) -> None:
        """Move past the next `n` records (handed out)."""
        if self.remaining is not None:
            self.remaining -= n
        self.next_seq += n
        self._ahead_pos += n

    def _peek_keys(self, n: int) -> np.ndarray:
        """The next n keys, drawn KEY_BLOCK at a time (the same keys as drawn batch by batch,
        `KeySampler.sample`), since a paced source asks for a few keys per wakeup and a draw
        costs ~7 us however small."""
        start = self._ahead_pos
        missing = start + n - len(self._ahead)
        if missing > 0:
            rest = self._ahead[start:]
            block = max(KEY_BLOCK, missing)
            self._ahead = np.concatenate([rest, self.keys.sample(self.rng, block)])
            self._ahead_pos = start = 0
        return self._ahead[start:start + n]


@dataclass(frozen=True)
class RateSchedule:
    """Records due at `rate` records/s from time `start`: the n-th record is due at start + n / rate.

    A throttled source emits `records_due(now) - emitted` records, then sleeps until
    `time_due(emitted + 1)`; both come from the same formula, so it never drifts or spins.
    """

    rate: float
    start: float

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 records/s, got {self.rate!r}")

    def time_due(self, n: int) -> float:
        """When a total of `n` records is due."""
        return self.start + n / self.rate

    def records_due(self, now: float) -> int:
        """How many records are due by `now` in total: the largest n with time_due(n) <= now."""
        n = max(0, math.floor((now - self.start) * self.rate))
        if self.time_due(n + 1) <= now:
            n += 1
        elif n > 0 and self.time_due(n) > now:
            n -= 1
        return n
