"""RecordWriter's grouping of a fixed-width batch by target channel: the Python path for
small batches gives the same runs as the numpy path."""

import numpy as np
import pytest

from shuffle.serialization.records import FixedWidthRecords
from shuffle.writer.record_writer import SMALL_BATCH, _small_runs


def numpy_runs(targets: np.ndarray, batch: FixedWidthRecords) -> list[tuple[int, bytes]]:
    """Reference: a stable sort of the rows by target, one run per target in ascending order."""
    order = np.argsort(targets, kind="stable")
    rows = batch.rows[order]
    return [(int(t), rows[targets[order] == t].tobytes()) for t in np.unique(targets)]


@pytest.mark.parametrize("seed", range(20))
def test_small_batches_group_as_the_numpy_path(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, SMALL_BATCH + 1))
    batch = FixedWidthRecords.make(rng.integers(0, 100, n), np.arange(n), 7, 32)
    targets = rng.integers(0, int(rng.integers(1, 6)), n)
    runs = [(target, bytes(data)) for target, data in _small_runs(targets.tolist(), batch.to_wire(), batch.format.wire_size)]
    assert runs == numpy_runs(targets, batch)
