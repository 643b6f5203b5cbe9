"""Partitioner descriptions (Flink's ``StreamPartitioner`` family, by name).

The compiler only names a partitioner and carries what the runtime needs to build it
(key selector, max parallelism, custom partitioner); ``shuffle/`` implements them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

# name -> (Flink class, pointwise, upstream state mapper, downstream state mapper)
_KINDS = {
    "FORWARD": ("ForwardPartitioner", True, "UNSUPPORTED", "UNSUPPORTED"),
    "RESCALE": ("RescalePartitioner", True, "UNSUPPORTED", "UNSUPPORTED"),
    "REBALANCE": ("RebalancePartitioner", False, "ARBITRARY", "ROUND_ROBIN"),
    "SHUFFLE": ("ShufflePartitioner", False, "ARBITRARY", "ROUND_ROBIN"),
    "BROADCAST": ("BroadcastPartitioner", False, "UNSUPPORTED", "UNSUPPORTED"),
    "GLOBAL": ("GlobalPartitioner", False, "ARBITRARY", "FIRST"),
    "HASH": ("KeyGroupStreamPartitioner", False, "ARBITRARY", "RANGE"),
    "CUSTOM": ("CustomPartitionerWrapper", False, "ARBITRARY", "FULL"),
}


@dataclass(frozen=True, eq=False)
class PartitionerSpec:
    """One partitioner: ``name`` is what Flink's ``toString`` shows (the ship strategy).

    ``forward_for_unspecified`` marks the FORWARD that BATCH (dynamic) graphs put where the
    program named no partitioner (Flink's ``ForwardForUnspecifiedPartitioner``).
    ``max_parallelism`` (HASH) is the consumer's resolved max parallelism: the number of
    key groups.
    """

    name: str
    key_selector: Any = None
    max_parallelism: int | None = None
    custom_partitioner: Any = None
    forward_for_unspecified: bool = False

    def __post_init__(self) -> None:
        if self.name not in _KINDS:
            raise ValueError(f"unknown partitioner {self.name!r}")

    @property
    def class_name(self) -> str:
        if self.forward_for_unspecified:
            return "ForwardForUnspecifiedPartitioner"
        return _KINDS[self.name][0]

    @property
    def is_pointwise(self) -> bool:
        return _KINDS[self.name][1]

    @property
    def is_broadcast(self) -> bool:
        return self.name == "BROADCAST"

    @property
    def upstream_subtask_state_mapper(self) -> str:
        return _KINDS[self.name][2]

    @property
    def downstream_subtask_state_mapper(self) -> str:
        return _KINDS[self.name][3]

    @property
    def supports_unaligned_checkpoints(self) -> bool:
        """Pointwise, broadcast and custom exchanges cannot be rescaled from in-flight data."""
        return not (self.is_pointwise or self.is_broadcast or self.name == "CUSTOM")

    def equivalent(self, other: "PartitionerSpec") -> bool:
        """Flink's ``StreamPartitioner.equals``: same kind, same key selector and partitioner."""
        return (self.class_name == other.class_name
                and self.key_selector == other.key_selector
                and self.custom_partitioner is other.custom_partitioner
                and self.max_parallelism == other.max_parallelism)

    def with_max_parallelism(self, max_parallelism: int) -> "PartitionerSpec":
        return replace(self, max_parallelism=max_parallelism)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"PartitionerSpec({self.class_name})"


def forward(unspecified: bool = False) -> PartitionerSpec:
    return PartitionerSpec("FORWARD", forward_for_unspecified=unspecified)


def simple(name: str) -> PartitionerSpec:
    """REBALANCE, RESCALE, SHUFFLE, BROADCAST or GLOBAL."""
    return PartitionerSpec(name)


def hash_by(key_selector: Any) -> PartitionerSpec:
    return PartitionerSpec("HASH", key_selector=key_selector)


def custom(partitioner: Any, key_selector: Any) -> PartitionerSpec:
    return PartitionerSpec("CUSTOM", key_selector=key_selector, custom_partitioner=partitioner)
