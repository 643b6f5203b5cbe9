"""Workload descriptions for the simulator: modelled operator cost, key distributions and
the source descriptions a StreamNode carries (``StreamNode.source``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.units import parse_duration

KEY_DISTRIBUTIONS = ("uniform", "zipf", "hot_key")
MIN_RECORD_SIZE = 8  # a Long, as Flink's fromSequence emits: the sequence number, its own key
KEYED_RECORD_SIZE = 16  # from here on a row holds a key (int64) besides the sequence number


@dataclass(frozen=True)
class Cost:
    """Modelled processing time per record, in seconds.

    ``changes`` are ``(start, end, per_record)`` windows of simulated time in which the cost
    differs: ``Cost(0.005, ((10.0, 20.0, 0.05),))`` is 5 ms per record except 50 ms between
    t=10 s and t=20 s. Windows must not overlap.
    """

    per_record: float
    changes: tuple[tuple[float, float, float], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.per_record, (int, float)) or self.per_record < 0:
            raise ValueError(f"Cost per_record must be a number >= 0, got {self.per_record!r}")
        windows = sorted(tuple(change) for change in self.changes)
        for start, end, cost in windows:
            if not 0 <= start < end or cost < 0:
                raise ValueError(f"invalid Cost change {(start, end, cost)!r}")
        for (_, end, _), (start, _, _) in zip(windows, windows[1:]):
            if start < end:
                raise ValueError(f"Cost changes overlap: {self.changes!r}")
        object.__setattr__(self, "changes", tuple(windows))

    def at(self, t: float) -> float:
        """Cost per record (seconds) at simulated time ``t``."""
        for start, end, cost in self.changes:
            if start <= t < end:
                return cost
        return self.per_record

    @classmethod
    def of(cls, value: "Cost | str | float | int") -> "Cost":
        """A Cost from a Cost, a duration string ("5ms") or seconds."""
        if isinstance(value, Cost):
            return value
        return cls(parse_duration(value))


@dataclass(frozen=True)
class KeyDistribution:
    """How synthetic records pick keys out of ``num_keys``.

    ``uniform``; ``zipf`` (rank r drawn with weight 1/r**zipf_exponent); ``hot_key`` (key 0
    gets ``hot_key_fraction`` of the records, the rest are uniform).
    """

    kind: str = "uniform"
    num_keys: int = 1024
    zipf_exponent: float = 1.1
    hot_key_fraction: float = 0.5

    def __post_init__(self) -> None:
        if self.kind not in KEY_DISTRIBUTIONS:
            raise ValueError(f"KeyDistribution kind must be one of {KEY_DISTRIBUTIONS}, got {self.kind!r}")
        if isinstance(self.num_keys, bool) or not isinstance(self.num_keys, int) or self.num_keys < 1:
            raise ValueError(f"KeyDistribution num_keys must be an int >= 1, got {self.num_keys!r}")
        if not isinstance(self.zipf_exponent, (int, float)) or self.zipf_exponent <= 0:
            raise ValueError(f"KeyDistribution zipf_exponent must be > 0, got {self.zipf_exponent!r}")
        if not isinstance(self.hot_key_fraction, (int, float)) or not 0 <= self.hot_key_fraction <= 1:
            raise ValueError(
                f"KeyDistribution hot_key_fraction must be in [0, 1], got {self.hot_key_fraction!r}"
            )


@dataclass(frozen=True)
class GeneratorSource:
    """Synthetic fixed-width rows: ``rate`` records/s per subtask (0 = as fast as downstream
    allows), ``record_size`` bytes each, keys from ``keys``, ``count`` records per subtask
    (None = unbounded)."""

    rate: float = 0
    record_size: int = KEYED_RECORD_SIZE
    keys: KeyDistribution = KeyDistribution()
    count: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or self.rate < 0:
            raise ValueError(f"from_generator: rate must be a number >= 0, got {self.rate!r}")
        if (isinstance(self.record_size, bool) or not isinstance(self.record_size, int)
                or self.record_size < MIN_RECORD_SIZE):
            raise ValueError(
                f"from_generator: record_size must be an int >= {MIN_RECORD_SIZE}, got {self.record_size!r}"
            )
        if not isinstance(self.keys, KeyDistribution):
            raise TypeError(f"from_generator: keys must be a KeyDistribution, got {self.keys!r}")
        if self.record_size < KEYED_RECORD_SIZE and self.keys != KeyDistribution():
            raise ValueError(
                f"from_generator: a record of {self.record_size} bytes is its own key (a Long); "
                f"keys need record_size >= {KEYED_RECORD_SIZE}"
            )
        if self.count is not None and (isinstance(self.count, bool) or not isinstance(self.count, int)
                                       or self.count < 0):
            raise ValueError(f"from_generator: count must be None or an int >= 0, got {self.count!r}")

    @property
    def bounded(self) -> bool:
        """Flink's Boundedness: a generator without a count never ends."""
        return self.count is not None


@dataclass(frozen=True)
class SequenceSource:
    """``from_sequence(start, end)``: the numbers start..end (inclusive), split over subtasks."""

    start: int
    end: int
    bounded = True


@dataclass(frozen=True)
class CollectionSource:
    """``from_collection(elements)``: a non-parallel source of the given elements."""

    elements: tuple[Any, ...]
    bounded = True
