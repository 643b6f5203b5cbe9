"""The CheckpointCoordinator on its own: the figures it reports per checkpoint."""

from __future__ import annotations

from shuffle.api.events import CheckpointBarrier, CheckpointOptions
from taskmgr.checkpointing.checkpoint_coordinator import PendingCheckpoint


def test_end_to_end_duration_is_whole_milliseconds_of_the_jobmanagers_clock():
    """Flink: the last acknowledgement's (or the failure's) timestamp minus the trigger
    timestamp, both `System.currentTimeMillis()`."""
    pending = PendingCheckpoint(1, 1.0266, CheckpointBarrier(1, 1026, CheckpointOptions()), {"a"})
    assert pending.end_to_end_duration_ms is None
    pending.end_time = 1.0405  # 13.9 ms later, 14 ms apart on the millisecond clock
    assert pending.end_to_end_duration_ms == 14
    assert pending.stats()["duration_ms"] == 14
