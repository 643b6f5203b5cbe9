"""Which barrier handler a task gets (Flink's `InputProcessorUtil.createCheckpointBarrierHandler`):
exactly-once without unaligned checkpoints aligns; with them it alternates (unaligned, or
aligned with a timeout; savepoints align); at-least-once tracks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskmgr.checkpointing.barrier_handler_states import CheckpointableInput
from taskmgr.checkpointing.checkpoint_barrier_tracker import CheckpointBarrierTracker
from taskmgr.checkpointing.single_checkpoint_barrier_handler import (
    CheckpointableTask,
    CheckpointBarrierHandler,
    Clock,
    SingleCheckpointBarrierHandler,
    TimerService,
)


def create_checkpoint_barrier_handler(config: Any, task: CheckpointableTask, gates: Sequence[CheckpointableInput],
                                      num_channels: int, clock: Clock,
                                      register_timer: TimerService) -> CheckpointBarrierHandler:
    """`config` is the job's `graph.CheckpointConfig` (checkpointing enabled). The handler
    finds a channel's gate by its gate index, so the gates are ordered by it (Flink sorts
    them the same way), whatever order they came in."""
    gates = sorted(gates, key=lambda gate: gate.gate_index)
    if config.mode.value == "AT_LEAST_ONCE":
        return CheckpointBarrierTracker(task, num_channels, clock,
                                        enable_checkpoint_after_tasks_finished=config.checkpoints_after_tasks_finish)
    factory = SingleCheckpointBarrierHandler.alternating if config.unaligned else SingleCheckpointBarrierHandler.aligned
    return factory(task, gates, num_channels, clock, register_timer,
                   enable_checkpoint_after_tasks_finished=config.checkpoints_after_tasks_finish)
