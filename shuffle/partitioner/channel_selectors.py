"""Stream partitioners: which subpartition a record goes to (Flink's `STR/runtime/partitioner/*.java`).

Each selector is stateful and belongs to one record writer: call `setup(num_channels)`
once, then `select_channel(record)` per record, or `select_channels(batch)` for a
fixed-width batch (vectorized; key-based selectors hash the batch's `keys` column as Java
Longs, unless given `record_views` to apply their key selector to each row; round-robin
selectors continue the same counter as the scalar path). Randomness
comes from a `numpy.random.Generator` the caller seeds, so runs are reproducible.
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

import numpy as np

from shuffle.partitioner.key_groups import KeyToOperatorTable, assign_key_to_parallel_operator
from shuffle.serialization.records import FixedWidthRecords

KeySelector = Callable[[Any], Any]
#: The rows of a fixed-width batch as a key selector sees them, one value per row.
RecordViews = Callable[[FixedWidthRecords], Iterable[Any]]


class Partitioner(Protocol):
    """A user partitioner object (Flink's `Partitioner`)."""

    def partition(self, key: Any, num_partitions: int) -> int: ...


class StreamPartitioner(ABC):
    """Base of all channel selectors."""

    name: ClassVar[str]
    is_broadcast: ClassVar[bool] = False
    is_pointwise: ClassVar[bool] = False

    num_channels: int = 0

    def setup(self, num_channels: int) -> None:
        """Bind to the writer's number of subpartitions."""
        if num_channels <= 0:
            raise ValueError(f"number of channels must be > 0, got {num_channels}")
        self.num_channels = num_channels

    @abstractmethod
    def select_channel(self, record: Any) -> int:
        """The channel of one record."""

    @abstractmethod
    def select_channels(self, batch: FixedWidthRecords) -> np.ndarray:
        """The channel of every record of a fixed-width batch (int64 array)."""

    def select_channel_list(self, batch: FixedWidthRecords) -> list[int]:
        """`select_channels` as a list, for a small batch (selectors may skip numpy for it)."""
        return self.select_channels(batch).tolist()

    def __repr__(self) -> str:
        return self.name


class ForwardPartitioner(StreamPartitioner):
    """Always channel 0: the one local downstream subtask."""

    name = "FORWARD"
    is_pointwise = True

    def select_channel(self, record: Any) -> int:
        return 0

    def select_channels(self, batch: FixedWidthRecords) -> np.ndarray:
        return np.zeros(len(batch), dtype=np.int64)


class GlobalPartitioner(StreamPartitioner):
    """Always channel 0: the first downstream subtask."""

    name = "GLOBAL"

    def select_channel(self, record: Any) -> int:
        return 0

    def select_channels(self, batch: FixedWidthRecords) -> np.ndarray:
        return np.zeros(len(batch), dtype=np.int64)


class _RoundRobinPartitioner(StreamPartitioner):
    """Channel `next = (next + 1) % n` per record; subclasses choose the start."""

    _next: int

    def select_channel(self, record: Any) -> int:
        self._next = (self._next + 1) % self.num_channels
        return self._next

    def select_channels(self, batch: FixedWidthRecords) -> np.ndarray:
        channels = (self._next + 1 + np.arange(len(batch), dtype=np.int64)) % self.num_channels
        if len(channels):
            self._next = int(channels[-1])
        return channels


class RebalancePartitioner(_RoundRobinPartitioner):
    """Round robin from a random start: the first record goes to `(start + 1) % n`."""

    name = "REBALANCE"

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def setup(self, num_channels: int) -> None:
        super().setup(num_channels)
        self._next = int(self._rng.integers(num_channels))


class RescalePartitioner(_RoundRobinPartitioner):
    """Round robin over the pointwise-connected channels, the first record to channel 0."""

    name = "RESCALE"
    is_pointwise = True

    def setup(self, num_channels: int) -> None:
        super().setup(num_channels)
        self._next = -1


class ShufflePartitioner(StreamPartitioner):
    """A uniformly random channel per record."""

    name = "SHUFFLE"

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def select_channel(self, record: Any) -> int:
        return int(self._rng.integers(self.num_channels))

    def select_channels(self, batch: FixedWidthRecords) -> np.ndarray:
        return self._rng.integers(self.num_channels, size=len(batch), dtype=np.int64)


class BroadcastPartitioner(StreamPartitioner):
    """Every record to every channel; the writer broadcasts, so selecting is unsupported."""

    name = "BROADCAST"
    is_broadcast = True

    def select_channel(self, record: Any) -> int:
        raise NotImplementedError("Broadcast partitioner does not support select channels.")

    def select_channels(self, batch: FixedWidthRecords) -> np.ndarray:
        raise NotImplementedError("Broadcast partitioner does not support select channels.")


class _KeyedPartitioner(StreamPartitioner):
    """A selector by the record's key. For a fixed-width batch, the key selector sees each
    row as `record_views` shows it; without `record_views` it reads the batch's key
    column (vectorized), which the caller vouches is what the key selector returns."""

    key_selector: KeySelector
    record_views: RecordViews | None = None

    def select_channels(self, batch: FixedWidthRecords) -> np.ndarray:
        if self.record_views is None:
            return self._key_column_channels(batch.keys)
        return np.fromiter(map(self.select_channel, self.record_views(batch)), dtype=np.int64, count=len(batch))

    def select_channel_list(self, batch: FixedWidthRecords) -> list[int]:
        if self.record_views is None:
            return self._key_column_channel_list(batch.keys.tolist())
        return [self.select_channel(view) for view in self.record_views(batch)]

    @abstractmethod
    def _key_column_channels(self, keys: np.ndarray) -> np.ndarray:
        """The channels of int64 keys."""

    def _key_column_channel_list(self, keys: list[int]) -> list[int]:
        return self._key_column_channels(np.asarray(keys, dtype=np.int64)).tolist()


class KeyGroupStreamPartitioner(_KeyedPartitioner):
    """The subtask owning the key group of the record's key (keyBy)."""

    name = "HASH"

    def __init__(self, key_selector: KeySelector, max_parallelism: int,
                 record_views: RecordViews | None = None) -> None:
        if max_parallelism <= 0:
            raise ValueError("Number of key-groups must be > 0!")
        self.key_selector = key_selector
        self.max_parallelism = max_parallelism
        self.record_views = record_views
        self._table: KeyToOperatorTable | None = None

    def select_channel(self, record: Any) -> int:
        key = _extract_key(self.key_selector, record)
        return assign_key_to_parallel_operator(key, self.max_parallelism, self.num_channels)

    def _key_column_channels(self, keys: np.ndarray) -> np.ndarray:
        return self._key_table().lookup(keys)

    def _key_column_channel_list(self, keys: list[int]) -> list[int]:
        return self._key_table().lookup_list(keys)

    def _key_table(self) -> KeyToOperatorTable:
        table = self._table
        if table is None or table.parallelism != self.num_channels:
            table = self._table = KeyToOperatorTable(self.max_parallelism, self.num_channels)
        return table


class CustomPartitionerWrapper(_KeyedPartitioner):
    """A user partitioner applied to the record's key: `partitioner(key, n)` or `.partition(key, n)`."""

    name = "CUSTOM"

    def __init__(self, partitioner: Partitioner | Callable[[Any, int], int], key_selector: KeySelector,
                 record_views: RecordViews | None = None) -> None:
        self._partition = partitioner.partition if hasattr(partitioner, "partition") else partitioner
        self.key_selector = key_selector
        self.record_views = record_views

    def select_channel(self, record: Any) -> int:
        return self._channel_of_key(_extract_key(self.key_selector, record))

    def _key_column_channels(self, keys: np.ndarray) -> np.ndarray:
        return np.fromiter(map(self._channel_of_key, keys.tolist()), dtype=np.int64, count=len(keys))

    def _channel_of_key(self, key: Any) -> int:
        """The user's channel; one out of range fails the task, as Flink's writer does
        (`ArrayIndexOutOfBoundsException`): a negative one is no index from the end."""
        n = self.num_channels
        channel = operator.index(self._partition(key, n))
        if not 0 <= channel < n:
            raise IndexError(f"Index {channel} out of bounds for length {n}")
        return channel


def _extract_key(key_selector: KeySelector, record: Any) -> Any:
    try:
        return key_selector(record)
    except Exception as e:
        raise RuntimeError(f"Could not extract key from {record}") from e


def create_channel_selector(
    name: str,
    *,
    key_selector: KeySelector | None = None,
    max_parallelism: int | None = None,
    custom_partitioner: Partitioner | Callable[[Any, int], int] | None = None,
    rng: np.random.Generator | None = None,
    record_views: RecordViews | None = None,
) -> StreamPartitioner:
    """A new selector for a ship strategy name (FORWARD, REBALANCE, ..., HASH, CUSTOM);
    `record_views`: how HASH and CUSTOM key selectors see the rows of a fixed-width batch
    (None: they read its key column)."""
    kind = name.upper()
    if kind == "FORWARD":
        return ForwardPartitioner()
    if kind == "GLOBAL":
        return GlobalPartitioner()
    if kind == "RESCALE":
        return RescalePartitioner()
    if kind == "BROADCAST":
        return BroadcastPartitioner()
    if kind in ("REBALANCE", "SHUFFLE"):
        if rng is None:
            raise ValueError(f"{kind} needs a seeded rng")
        return RebalancePartitioner(rng) if kind == "REBALANCE" else ShufflePartitioner(rng)
    if kind == "HASH":
        if key_selector is None or max_parallelism is None:
            raise ValueError("HASH needs key_selector and max_parallelism")
        return KeyGroupStreamPartitioner(key_selector, max_parallelism, record_views)
    if kind == "CUSTOM":
        if key_selector is None or custom_partitioner is None:
            raise ValueError("CUSTOM needs key_selector and custom_partitioner")
        return CustomPartitionerWrapper(custom_partitioner, key_selector, record_views)
    raise ValueError(f"unknown partitioner {name!r}")
