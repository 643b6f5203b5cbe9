"""TargetGroups: the records of a batch grouped by target subpartition.

A record writer groups a fixed-width batch by target twice: to find where Flink's
per-record loop would stop (`ResultPartition.records_before_unavailable_to`) and to write
each subpartition's records as one run (`RecordWriter.emit_batch`). Both read the same
counts and the same stable order, computed once per batch (the order only if needed), and
a cut batch's groups come from its drawn batch's (`prefix`).
"""

from __future__ import annotations

import numpy as np


class TargetGroups:
    """The target subpartition of each record of a batch, grouped: how many records go to
    each subpartition, and (when asked) the batch positions ordered by target, ascending
    within each target (a stable sort: every subpartition gets its records in order)."""

    __slots__ = ("targets", "num_subpartitions", "counts", "channels", "_order")

    def __init__(self, targets: np.ndarray, num_subpartitions: int, order: np.ndarray | None = None) -> None:
        self.targets = targets
        self.num_subpartitions = num_subpartitions
        counts = np.bincount(targets, minlength=num_subpartitions)
        #: Records per subpartition (a list: read one at a time).
        self.counts: list[int] = counts.tolist()
        #: The subpartitions that get records, ascending.
        self.channels: list[int] = counts.nonzero()[0].tolist()
        self._order = order

    def __len__(self) -> int:
        return len(self.targets)

    @property
    def order(self) -> np.ndarray:
        """Batch positions grouped by target (ascending targets, each target's in batch order)."""
        if self._order is None:
            # A stable sort of small integers is a radix sort.
            keys = self.targets.astype(np.uint16) if self.num_subpartitions <= 65536 else self.targets
            self._order = keys.argsort(kind="stable")
        return self._order

    def starts(self) -> list[int]:
        """Where each subpartition's records start in `order`."""
        starts, at = [0] * self.num_subpartitions, 0
        for channel in self.channels:
            starts[channel] = at
            at += self.counts[channel]
        return starts

    def prefix(self, n: int) -> TargetGroups:
        """The groups of the batch's first `n` records (this one if n is its length): the
        order, if already sorted, filtered to them (still grouped and stable)."""
        if n >= len(self.targets):
            return self
        order = self._order
        return TargetGroups(self.targets[:n], self.num_subpartitions, None if order is None else order[order < n])
