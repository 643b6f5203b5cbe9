"""Sources: how `from_sequence` splits its range over the subtasks (Flink's NumberSequenceSource)."""

from __future__ import annotations

import pytest

from graph import CollectSink, StreamExecutionEnvironment
from taskmgr.cluster import execute
from taskmgr.operators.sources import sequence_split


@pytest.mark.parametrize("start, end, splits, sizes", [
    (1, 10, 3, [4, 3, 3]),  # NumberSequenceIterator.split: the remainder to the first splits
    (0, 6, 4, [2, 2, 2, 1]),
    (5, 6, 4, [1, 1, 0, 0]),
    (1, 8, 2, [4, 4]),
])
def test_sequence_split_gives_the_remainder_to_the_first_splits(start, end, splits, sizes):
    parts = [sequence_split(start, end, i, splits) for i in range(splits)]
    assert [len(p) for p in parts] == sizes
    assert [n for p in parts for n in p] == list(range(start, end + 1))  # in order, each once


def test_each_subtask_of_from_sequence_emits_its_split():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 10).set_parallelism(3).rebalance().sink_to(CollectSink("out"))
    result = execute(env, duration=10, task_managers=1, slots_per_task_manager=3).raise_for_status()
    assert sorted(result.collected["out"]) == list(range(1, 11))
    out = {}
    for row in result.metrics.to_pylist():
        if row["vertex"].startswith("Source") and row["metric"] == "numRecordsOut":
            out[row["subtask"]] = max(out.get(row["subtask"], 0), row["value"])
    assert out == {0: 4, 1: 3, 2: 3}
