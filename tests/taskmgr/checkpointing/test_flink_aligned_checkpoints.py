"""Flink's AlignedCheckpointsTest, case by case, on the aligned handler: which channels are
blocked after each event, which checkpoints trigger or abort (and why), and what the
alignment gauges read. Each test names the Flink case whose behaviour it ports."""

from __future__ import annotations

from shuffle.api.events import CheckpointOptions
from taskmgr.checkpointing.single_checkpoint_barrier_handler import (
    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER,
    CHECKPOINT_DECLINED_SUBSUMED,
    SingleCheckpointBarrierHandler,
)

from barrier_fakes import Setup

ALIGNED = SingleCheckpointBarrierHandler.aligned


def aborts(s: Setup) -> list[tuple[int, str]]:
    return [(entry[1], entry[2]) for entry in s.log if entry[0] == "abort"]


def test_no_barriers_leave_no_alignment_time():
    # testSingleChannelNoBarriers, testMultiChannelNoBarriers
    for channels in (1, 4):
        s = Setup(ALIGNED, channels)
        s.feed(*[("data", c % channels, 100) for c in range(6)], *[("eop", c) for c in range(channels)])
        assert s.log == [] and s.handler.alignment_time_ns == 0


def test_one_channel_triggers_every_barrier_at_once():
    # testSingleChannelWithBarriers
    s = Setup(ALIGNED, 1)
    for checkpoint_id in range(1, 7):
        s.feed(("data", 0, 10), ("barrier", checkpoint_id, 0))
        assert s.gate.blocked == set() and s.handler.alignment_time_ns == 0
    assert s.task.triggered() == [1, 2, 3, 4, 5, 6] and not aborts(s)


def test_several_channels_align_each_checkpoint():
    # testMultiChannelWithBarriers
    s = Setup(ALIGNED, 3)
    s.feed(("data", 0, 1), ("data", 2, 1), ("barrier", 1, 1), ("barrier", 1, 2))
    assert s.gate.blocked == {1, 2} and s.task.triggered() == []
    s.clock.now = 10.25
    s.feed(("data", 0, 1), ("barrier", 1, 0))
    assert s.task.triggered() == [1] and s.gate.blocked == set()
    assert s.handler.alignment_time_ns == 250_000_000
    s.feed(("data", 1, 1), ("barrier", 2, 0), ("barrier", 2, 1), ("barrier", 2, 2))  # barriers together
    s.feed(("data", 2, 1), ("barrier", 3, 2), ("data", 0, 1), ("barrier", 3, 0), ("barrier", 3, 1))
    s.feed(("barrier", 4, 1), ("barrier", 4, 2), ("barrier", 4, 0))  # an empty checkpoint
    assert s.task.triggered() == [1, 2, 3, 4] and s.gate.blocked == set() and not aborts(s)


def test_a_barrier_of_a_later_checkpoint_on_an_unblocked_channel_skips_the_current_one():
    # testMultiChannelJumpingOverCheckpoint (checkpoints after tasks finish off)
    s = Setup(ALIGNED, 3, enable_checkpoint_after_tasks_finished=False)
    s.feed(("barrier", 1, 1), ("barrier", 1, 2), ("barrier", 1, 0))
    assert s.gate.blocked == set()
    s.feed(("barrier", 2, 1), ("data", 2, 1), ("barrier", 2, 0))
    assert s.handler.current_checkpoint_id == 2 and s.gate.blocked == {0, 1}
    s.feed(("barrier", 3, 2))
    assert s.handler.current_checkpoint_id == 3 and s.gate.blocked == {2}
    s.feed(("data", 1, 1), ("barrier", 3, 0))
    assert s.gate.blocked == {0, 2}
    s.feed(("barrier", 4, 1))
    assert s.handler.current_checkpoint_id == 4 and s.gate.blocked == {1}
    s.feed(("eop", 0))  # checkpoint 4 aborted by the end of the partition
    assert s.gate.blocked == set()
    s.feed(("eop", 2), ("eop", 1))
    assert s.task.triggered() == [1] and [cid for cid, _ in aborts(s)] == [2, 3, 4]


def test_metrics_of_an_aligned_checkpoint():
    # testMetrics: start delay from the barrier's timestamp, alignment from its first barrier
    # to its last, and the bytes processed in between
    s = Setup(ALIGNED, 3)
    s.clock.now = 10.01  # the barrier was created at 10.0 s
    s.feed(("data", 0, 100), ("data", 1, 100), ("data", 2, 100), ("barrier", 1, 1, CheckpointOptions(), 10.0),
           ("data", 0, 100), ("data", 2, 100), ("barrier", 1, 0), ("data", 2, 100))
    s.clock.now = 10.03
    s.feed(("barrier", 1, 2), ("data", 0, 100), ("eop", 0), ("eop", 1), ("eop", 2))
    metrics = s.task.metrics[1]
    assert s.handler.current_checkpoint_id == 1
    assert s.handler.latest_start_delay_ns == metrics.start_delay_ns == 10_000_000
    assert metrics.alignment_duration_ns == 20_000_000
    assert metrics.bytes_processed_during_alignment == 300


def test_cancellation_markers_of_missing_checkpoints_leave_nothing_blocked():
    # testMissingCancellationBarriers
    s = Setup(ALIGNED, 2)
    s.feed(("barrier", 1, 0), ("cancel", 3, 1), ("cancel", 2, 0), ("cancel", 3, 0), ("data", 0, 1))
    assert s.gate.blocked == set() and s.task.triggered() == []
    assert aborts(s) == [(3, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)]


def test_alignment_starts_on_the_channels_still_open():
    # testStartAlignmentWithClosedChannels
    s = Setup(ALIGNED, 4)
    s.feed(("eop", 2), ("eop", 1), ("data", 0, 1), ("data", 3, 1), ("barrier", 2, 3), ("barrier", 2, 0))
    assert s.handler.current_checkpoint_id == 2 and s.gate.blocked == set()
    s.feed(("barrier", 3, 0), ("barrier", 3, 3))
    assert s.task.triggered() == [2, 3] and s.gate.blocked == set()
    s.feed(("data", 0, 1), ("data", 3, 1), ("eop", 0), ("data", 3, 1), ("barrier", 4, 3))
    assert s.task.triggered() == [2, 3, 4] and s.gate.blocked == set()


def test_end_of_partition_during_an_alignment_completes_it():
    # testEndOfStreamWhileCheckpoint (checkpoints after tasks finish on, Flink's default)
    s = Setup(ALIGNED, 3)
    s.feed(("barrier", 1, 0), ("barrier", 1, 1), ("barrier", 1, 2), ("data", 0, 1), ("data", 2, 1))
    s.feed(("barrier", 2, 2), ("barrier", 2, 0), ("data", 1, 1))
    assert s.gate.blocked == {0, 2}
    s.feed(("eop", 1))
    assert s.gate.blocked == set() and s.task.triggered() == [1, 2]
    s.feed(("eop", 2), ("data", 0, 1), ("eop", 0))
    assert not aborts(s)


def test_one_channel_cancellation_markers():
    # testSingleChannelAbortCheckpoint
    s = Setup(ALIGNED, 1)
    s.feed(("data", 0, 1), ("barrier", 1, 0), ("data", 0, 1), ("barrier", 2, 0), ("data", 0, 1))
    assert s.handler.alignment_time_ns == 0
    s.feed(("cancel", 4, 0))
    assert s.handler.current_checkpoint_id == 4 and s.handler.alignment_time_ns == 0
    assert aborts(s) == [(4, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)]
    s.feed(("barrier", 5, 0), ("data", 0, 1), ("cancel", 6, 0), ("data", 0, 1))
    assert s.handler.current_checkpoint_id == 6 and s.handler.alignment_time_ns == 0
    assert s.task.triggered() == [1, 2, 5] and [cid for cid, _ in aborts(s)] == [4, 6]
    assert s.gate.blocked == set()


def test_cancellation_markers_among_several_channels():
    # testMultiChannelAbortCheckpoint
    s = Setup(ALIGNED, 3)
    s.feed(("barrier", 1, 1))
    assert s.gate.blocked == {1}
    s.feed(("barrier", 1, 2), ("data", 0, 1))
    assert s.gate.blocked == {1, 2}
    s.clock.now = 10.5
    s.feed(("barrier", 1, 0))
    assert s.gate.blocked == set() and s.handler.alignment_time_ns == 500_000_000
    s.feed(("barrier", 2, 0), ("barrier", 2, 2), ("data", 1, 1))  # aborted on its last barrier
    assert s.gate.blocked == {0, 2}
    s.feed(("cancel", 2, 1))
    assert s.gate.blocked == set() and aborts(s) == [(2, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)]
    s.feed(("barrier", 3, 1), ("barrier", 3, 2))
    s.clock.now = 10.75
    s.feed(("barrier", 3, 0))
    assert s.task.triggered() == [1, 3] and s.handler.alignment_time_ns > 0
    s.feed(("cancel", 4, 1))  # aborted before its first barrier: no alignment measured
    assert aborts(s)[-1] == (4, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
    assert s.handler.alignment_time_ns == 0
    s.feed(("barrier", 4, 2), ("data", 2, 1), ("barrier", 4, 0))  # obsolete barriers block nothing
    assert s.gate.blocked == set()
    s.feed(("barrier", 5, 2), ("barrier", 5, 1), ("barrier", 5, 0), ("data", 0, 1))
    s.feed(("cancel", 6, 1), ("cancel", 6, 2))  # several markers, then a barrier after them
    assert s.handler.alignment_time_ns == 0
    s.feed(("barrier", 6, 0), ("data", 0, 1))
    assert s.gate.blocked == set()
    assert s.task.triggered() == [1, 3, 5] and [cid for cid, _ in aborts(s)] == [2, 4, 6]


def test_a_barrier_of_a_cancelled_checkpoint_is_ignored_and_its_channel_resumed():
    # testAbortOnCanceledBarriers
    s = Setup(ALIGNED, 3)
    s.feed(("data", 1, 1), ("barrier", 1, 1), ("data", 2, 1), ("data", 0, 1), ("cancel", 1, 0), ("data", 1, 1))
    assert aborts(s) == [(1, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)] and s.gate.blocked == set()
    s.feed(("barrier", 2, 1), ("data", 2, 1), ("data", 0, 1), ("barrier", 1, 2))
    assert s.gate.blocked == {1}
    s.feed(("data", 0, 1), ("barrier", 2, 0), ("barrier", 2, 2))
    assert s.gate.blocked == set() and s.task.triggered() == [2] and len(aborts(s)) == 1


def test_a_cancellation_marker_of_a_subsumed_checkpoint_is_ignored():
    # testIgnoreCancelBarrierIfCheckpointSubsumed
    s = Setup(ALIGNED, 3)
    s.feed(("data", 2, 1), ("barrier", 3, 1), ("barrier", 3, 0), ("data", 2, 1))
    assert s.gate.blocked == {0, 1}
    s.feed(("barrier", 5, 2))
    assert aborts(s) == [(3, CHECKPOINT_DECLINED_SUBSUMED)] and s.gate.blocked == {2}
    s.feed(("data", 1, 1), ("data", 0, 1), ("cancel", 3, 0), ("data", 0, 1))
    s.feed(("barrier", 5, 0), ("barrier", 5, 1))
    assert s.gate.blocked == set() and s.task.triggered() == [5] and len(aborts(s)) == 1


def test_end_of_partition_of_the_last_open_channel_triggers():
    # testTriggerCheckpointsWithEndOfPartition
    s = Setup(ALIGNED, 3)
    s.feed(("barrier", 1, 0), ("barrier", 1, 1), ("eop", 2))
    assert s.task.triggered() == [1] and not aborts(s) and not s.handler.is_checkpoint_pending


def test_a_channel_with_barrier_and_end_of_partition_counts_once():
    # testDeduplicateChannelsWithBothBarrierAndEndOfPartition
    s = Setup(ALIGNED, 3)
    s.feed(("barrier", 2, 0), ("barrier", 2, 1), ("eop", 1))
    assert s.task.triggered() == [] and not aborts(s)
    s.feed(("barrier", 2, 2))
    assert s.task.triggered() == [2] and not s.handler.is_checkpoint_pending


def test_checkpoints_after_channels_ended_wait_for_the_open_ones_only():
    # testTriggerCheckpointsAfterReceivedEndOfPartition
    s = Setup(ALIGNED, 3)
    s.feed(("eop", 2), ("barrier", 6, 0), ("barrier", 6, 1), ("eop", 1), ("barrier", 7, 0))
    assert s.task.triggered() == [6, 7] and not aborts(s) and not s.handler.is_checkpoint_pending
