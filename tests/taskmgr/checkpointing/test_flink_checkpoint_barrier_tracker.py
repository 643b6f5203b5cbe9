"""Flink's CheckpointBarrierTrackerTest (at-least-once), case by case: which checkpoints
trigger or abort, in which order, and what the tracker measures. Each test names the Flink
case whose behaviour it ports."""

from __future__ import annotations

from taskmgr.checkpointing.checkpoint_barrier_tracker import CheckpointBarrierTracker

from barrier_fakes import ALIGNED, Setup


def tracker(channels: int, enable_checkpoint_after_tasks_finished: bool = True) -> Setup:
    return Setup(lambda task, gates, n, clock, timers, **kw: CheckpointBarrierTracker(task, n, clock, **kw),
                 channels, enable_checkpoint_after_tasks_finished=enable_checkpoint_after_tasks_finished)


def sequence(s: Setup) -> list[int]:
    """Flink's CheckpointSequenceValidator: triggers as ids, aborts as negative ids, in order."""
    return [entry[1] if entry[0] == "trigger" else -entry[1] for entry in s.log if entry[0] in ("trigger", "abort")]


def test_one_channel_triggers_every_barrier_skipped_ones_too():
    # testSingleChannelWithBarriers, testSingleChannelWithSkippedBarriers
    s = tracker(1)
    for checkpoint_id in (1, 3, 4, 6, 7, 10):
        s.feed(("data", 0, 1), ("barrier", checkpoint_id, 0))
    assert sequence(s) == [1, 3, 4, 6, 7, 10] and s.gate.blocked == set()


def test_several_channels_never_block():
    # testMultiChannelWithBarriers
    s = tracker(3)
    s.feed(("data", 0, 1), ("barrier", 1, 1), ("barrier", 1, 2), ("data", 2, 1), ("barrier", 1, 0),
           ("barrier", 2, 0), ("barrier", 2, 1), ("barrier", 2, 2), ("barrier", 3, 2), ("data", 2, 1),
           ("barrier", 3, 0), ("barrier", 3, 1), ("barrier", 4, 1), ("barrier", 4, 2), ("barrier", 4, 0))
    assert sequence(s) == [1, 2, 3, 4] and s.log == [e for e in s.log if e[0] in ("trigger", "inputs_finished")]


def test_a_completed_later_checkpoint_drops_the_earlier_incomplete_one():
    # testMultiChannelSkippingCheckpoints
    s = tracker(3)
    s.feed(("barrier", 1, 1), ("barrier", 1, 2), ("barrier", 1, 0), ("barrier", 2, 0), ("barrier", 2, 1),
           ("barrier", 2, 2), ("barrier", 3, 2), ("barrier", 4, 0), ("barrier", 4, 1), ("barrier", 4, 2))
    assert sequence(s) == [1, 2, 4]


def test_late_barriers_still_complete_their_checkpoints():
    # testCompleteCheckpointsOnLateBarriers
    s = tracker(3)
    s.feed(("barrier", 2, 1), ("barrier", 2, 0), ("barrier", 2, 2),
           ("barrier", 3, 1), ("barrier", 3, 2), ("barrier", 4, 2), ("barrier", 4, 1), ("barrier", 3, 0),
           ("barrier", 4, 0), ("barrier", 5, 1), ("barrier", 5, 0), ("barrier", 5, 2),
           ("barrier", 6, 1), ("barrier", 6, 0),
           ("barrier", 7, 1), ("barrier", 7, 2), ("barrier", 8, 2), ("barrier", 8, 1), ("barrier", 9, 1),
           ("barrier", 7, 0), ("barrier", 9, 2), ("barrier", 10, 2), ("barrier", 8, 0), ("barrier", 9, 0),
           ("barrier", 10, 0), ("barrier", 10, 1))
    assert sequence(s) == [2, 3, 4, 5, 7, 8, 9, 10]


def test_one_channel_cancellation_markers():
    # testSingleChannelAbortCheckpoint
    s = tracker(1)
    s.feed(("barrier", 1, 0), ("barrier", 2, 0), ("cancel", 4, 0), ("barrier", 5, 0), ("cancel", 6, 0))
    assert sequence(s) == [1, 2, -4, 5, -6]


def test_cancellation_markers_among_several_channels():
    # testMultiChannelAbortCheckpoint
    s = tracker(3)
    s.feed(("barrier", 1, 1), ("barrier", 1, 2), ("barrier", 1, 0),
           ("barrier", 2, 0), ("barrier", 2, 2), ("cancel", 2, 1),
           ("barrier", 3, 1), ("barrier", 3, 2), ("barrier", 3, 0),
           ("cancel", 4, 1), ("barrier", 4, 2), ("barrier", 4, 0),
           ("barrier", 5, 2), ("barrier", 5, 1), ("barrier", 5, 0),
           ("cancel", 6, 1), ("cancel", 6, 2), ("barrier", 6, 0))
    assert sequence(s) == [1, -2, 3, -4, 5, -6]


def test_interleaved_cancellation_markers_abort_each_checkpoint_once():
    # testInterleavedCancellationBarriers
    s = tracker(3)
    s.feed(("barrier", 1, 0), ("cancel", 2, 0), ("cancel", 1, 1), ("cancel", 2, 1), ("cancel", 1, 2),
           ("cancel", 2, 2))
    assert sequence(s) == [-1, -2] and not s.handler.pending


def test_metrics():
    # testMetrics, testSingleChannelMetrics
    s = tracker(3)
    s.clock.now = 10.01
    s.feed(("data", 0, 100), ("barrier", 1, 1, ALIGNED, 10.0), ("data", 0, 100),
           ("data", 2, 100), ("barrier", 1, 0, ALIGNED, 10.0), ("data", 2, 100))
    s.clock.now = 10.03
    s.feed(("barrier", 1, 2, ALIGNED, 10.0), ("data", 0, 100))
    m = s.task.metrics[1]
    assert (m.start_delay_ns, m.alignment_duration_ns, m.bytes_processed_during_alignment) == (
        10_000_000, 20_000_000, 300)
    s = tracker(1)
    s.clock.now = 10.01
    s.feed(("data", 0, 100), ("barrier", 1, 0, ALIGNED, 10.0), ("data", 0, 100))
    m = s.task.metrics[1]
    assert (m.start_delay_ns, m.alignment_duration_ns, m.bytes_processed_during_alignment) == (10_000_000, 0, 0)


def test_end_of_partition_completes_the_newest_checkpoint_it_can():
    # testTriggerCheckpointsWithEndOfPartition
    s = tracker(3)
    s.feed(("barrier", 1, 0), ("barrier", 2, 0), ("barrier", 2, 1), ("barrier", 3, 0), ("barrier", 4, 0),
           ("barrier", 4, 1), ("barrier", 5, 1), ("eop", 2))
    assert sequence(s) == [4]
    assert [p.checkpoint_id for p in s.handler.pending] == [5] and s.handler.num_open_channels == 2


def test_a_channel_with_barrier_and_end_of_partition_counts_once():
    # testDeduplicateChannelsWithBothBarrierAndEndOfPartition
    s = tracker(3)
    s.feed(("barrier", 2, 0), ("barrier", 2, 1), ("eop", 1))
    assert sequence(s) == []
    s.feed(("barrier", 2, 2))
    assert sequence(s) == [2]


def test_checkpoints_after_channels_ended_wait_for_the_open_ones_only():
    # testTriggerCheckpointsAfterReceivedEndOfPartition
    s = tracker(3)
    s.feed(("eop", 2), ("barrier", 5, 0), ("barrier", 6, 0), ("barrier", 6, 1), ("eop", 1), ("barrier", 7, 0))
    assert sequence(s) == [6, 7]


def test_no_fast_path_for_a_checkpoint_pending_when_a_channel_ended():
    # testNoFastPathWithChannelFinishedDuringCheckpoints, ...Cancel
    s = tracker(2)
    s.feed(("barrier", 1, 0), ("eop", 0), ("barrier", 1, 1))
    assert sequence(s) == [1] and not s.handler.pending
    s = tracker(2)
    s.feed(("barrier", 1, 0), ("eop", 0), ("cancel", 1, 1))
    assert sequence(s) == [-1] and not s.handler.pending


def test_an_aborted_checkpoint_completed_by_end_of_partition_is_dropped():
    # testCompleteAndRemoveAbortedCheckpointWithEndOfPartition
    s = tracker(3)
    s.feed(("cancel", 4, 0), ("barrier", 4, 1), ("barrier", 5, 1), ("eop", 2))
    assert sequence(s) == [-4]
    assert [p.checkpoint_id for p in s.handler.pending] == [5] and s.handler.num_open_channels == 2


def test_cancellations_after_channels_ended():
    # testAbortCheckpointsAfterEndOfPartitionReceived
    s = tracker(3)
    s.feed(("eop", 2), ("barrier", 5, 0), ("barrier", 6, 0), ("cancel", 6, 1), ("eop", 1), ("cancel", 7, 0))
    assert sequence(s) == [-5, -6, -7]


def test_the_alignment_of_the_latest_checkpoint_when_an_older_one_completes_late():
    # testTwoLastBarriersOneByOne, testNextFirstCheckpointBarrierOvertakesCancellationBarrier
    for late_of_first in (("barrier", 1, 0), ("cancel", 1, 0)):
        s = tracker(2)
        for item in (("barrier", 1, 1), ("barrier", 2, 1), late_of_first, ("barrier", 2, 0)):
            s.feed(item)
            s.clock.now += 1
        assert s.task.metrics[2].alignment_duration_ns == 2_000_000_000
