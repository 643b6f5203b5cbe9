"""Rebalance's random start channel (and shuffle's random choices) are drawn anew by each
attempt of a restarted job, as Flink's `ThreadLocalRandom` in a new task, and the same for
the same seed and attempt (determinism)."""

from types import SimpleNamespace

from shuffle.partitioner.channel_selectors import RebalancePartitioner
from taskmgr.operators.base import OperatorContext
from taskmgr.task import Task


def _start_channel(attempt: int, seed: int = 7, channels: int = 64) -> int:
    ctx = OperatorContext(task_name="Gen (1/1)", vertex_name="Gen", subtask_index=0, parallelism=1, origin=0,
                          seed=seed, run=None, io=None, services=None)  # type: ignore[arg-type]
    task = SimpleNamespace(descriptor=SimpleNamespace(job=SimpleNamespace(attempt=attempt)))
    partitioner = RebalancePartitioner(Task._partitioner_rng(task, "ds-1", ctx))  # type: ignore[arg-type]
    partitioner.setup(channels)
    return partitioner._next


def test_each_attempt_draws_its_own_start_channel_and_the_same_attempt_the_same():
    starts = [_start_channel(attempt) for attempt in range(6)]
    assert len(set(starts)) > 1  # 64 channels: six equal draws would be a 1 in 10^10 chance
    assert starts == [_start_channel(attempt) for attempt in range(6)]
