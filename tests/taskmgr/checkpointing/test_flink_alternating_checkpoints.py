"""Flink's AlternatingCheckpointsTest, case by case, on the alternating handler (aligned with
a timeout that switches to unaligned; announcements; savepoints align). Flink's cases check
the order a real gate then returns buffers in; here the handler's side of them is checked
(what it prioritizes, blocks, starts, triggers). Each test names the Flink case it ports."""

from __future__ import annotations

from shuffle.api.events import AlignmentType, CheckpointOptions
from taskmgr.checkpointing.single_checkpoint_barrier_handler import (
    CHECKPOINT_DECLINED_SUBSUMED,
    SingleCheckpointBarrierHandler,
)

from barrier_fakes import Setup

ALTERNATING = SingleCheckpointBarrierHandler.alternating
ALIGNED = CheckpointOptions()
SAVEPOINT = CheckpointOptions("SAVEPOINT")
UNALIGNED = CheckpointOptions(alignment=AlignmentType.UNALIGNED)
NEVER = CheckpointOptions(aligned_checkpoint_timeout=1e6)  # Flink's Integer.MAX_VALUE ms


def timeout(seconds: float) -> CheckpointOptions:
    return CheckpointOptions(aligned_checkpoint_timeout=seconds)


def entries(s: Setup, kind: str) -> list[tuple]:
    return [entry for entry in s.log if entry[0] == kind]


def test_an_unaligned_barrier_from_upstream_after_an_announcement_triggers_unaligned():
    # testSwitchToUnalignedByUpstream
    s = Setup(ALTERNATING, 2)
    s.feed(("announce", 1, 0, 0, NEVER))
    assert s.task.triggered() == []
    s.feed(("barrier", 1, 1, UNALIGNED))
    assert s.log[:4] == [("prioritize", 0, 0), ("init", 1), ("started", 1), ("trigger", 1, "unaligned")]


def test_unaligned_checkpoints_trigger_on_the_first_barrier_savepoints_on_the_last():
    # testCheckpointHandling, testSavepointHandling
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 123, 0, UNALIGNED))
    assert s.task.triggered() == [123]
    s.feed(("barrier", 123, 1, UNALIGNED))
    assert s.task.triggered() == [123] and s.gate.blocked == set()
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 123, 0, SAVEPOINT))
    assert s.task.triggered() == [] and s.gate.blocked == {0}
    s.feed(("barrier", 123, 1, SAVEPOINT))
    assert s.log[-5:] == [("block", 1), ("trigger", 123, "aligned"), ("resume", 0), ("resume", 1),
                          ("inputs_finished", 123)]
    assert s.gate.blocked == set()


def test_checkpoints_and_savepoints_alternate():
    # testAlternation (123 x 123 in Flink)
    s = Setup(ALTERNATING, 7)
    for checkpoint_id in range(9):
        options = ALIGNED if checkpoint_id % 2 == 0 else SAVEPOINT
        s.feed(*[("barrier", checkpoint_id, c, options) for c in range(7)])
    assert s.task.triggered() == list(range(9)) and s.gate.blocked == set()


def test_after_a_timed_out_checkpoint_the_next_one_aligns():
    # testAlignedAfterTimedOut
    s = Setup(ALTERNATING, 1)
    s.feed(("announce", 1, 0, 0, timeout(0.1)))
    s.clock.advance(s.clock.now + 0.101 + 0.001)
    assert s.log == [("prioritize", 0, 0)]
    s.feed(("barrier", 1, 0, timeout(0.1), 10.0))
    assert s.task.triggered() == [1] and s.task.options[1].is_unaligned
    s.feed(("announce", 2, 0, 1, timeout(0.1)), ("barrier", 2, 0, timeout(0.1)))
    assert s.task.triggered() == [1, 2] and s.task.options[2] == timeout(0.1)


def test_a_barrier_that_cannot_time_out_aligns():
    # testAlignedNeverTimeoutableCheckpoint
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 1, 0, NEVER), ("data", 1, 1000))
    assert s.task.triggered() == []
    s.feed(("barrier", 1, 1, NEVER))
    assert s.log[1:3] == [("block", 1), ("trigger", 1, "aligned")]


def test_the_timeout_prioritizes_the_announced_barriers_and_later_announcements_at_once():
    # testTimeoutAlignment / testTimeoutBarrierOnTwoChannels, testTimeoutAlignmentOnFirstBarrier
    s = Setup(ALTERNATING, 2)
    s.feed(("announce", 1, 0, 2, timeout(0.01)))
    s.clock.advance(s.clock.now + 0.02)
    assert s.log == [("prioritize", 0, 2)] and s.task.triggered() == []
    s.feed(("announce", 1, 1, 1, timeout(0.01), 10.0))  # unaligned already: prioritized at once
    assert s.log[-1] == ("prioritize", 1, 1)
    s.feed(("barrier", 1, 0, timeout(0.01), 10.0), ("barrier", 1, 1, timeout(0.01), 10.0))
    assert s.task.triggered() == [1] and s.task.options[1] == UNALIGNED
    assert s.gate.blocked == set() and entries(s, "stopped") == [("stopped", 1)]


def test_the_timer_of_the_first_barrier_times_out_the_checkpoint():
    # testTimeoutAlignmentAfterProcessingBarrier
    s = Setup(ALTERNATING, 3)
    s.feed(("barrier", 1, 2, NEVER))
    s.feed(("announce", 1, 0, 2, NEVER, 10.0), ("announce", 1, 1, 1, NEVER, 10.0))
    assert s.task.triggered() == []
    s.clock.advance(s.clock.now + 2e6)
    assert entries(s, "prioritize") == [("prioritize", 0, 2), ("prioritize", 1, 1)]
    assert s.task.triggered() == [1] and s.task.options[1] == UNALIGNED
    s.feed(("barrier", 1, 0, NEVER, 10.0), ("barrier", 1, 1, NEVER, 10.0))
    assert s.gate.blocked == set() and entries(s, "trigger") == [("trigger", 1, "unaligned")]


def test_a_late_first_barrier_switches_before_its_timer_fires():
    # testActiveTimeoutAfterBarrierPassiveTimeout
    s = Setup(ALTERNATING, 2)
    s.feed(("announce", 1, 0, 2, timeout(0.01)), ("data", 0, 100), ("data", 0, 100))
    s.clock.now += 0.011  # the timer has not fired yet
    s.feed(("barrier", 1, 0, timeout(0.01), 10.0))
    assert s.task.triggered() == [1] and s.task.options[1] == UNALIGNED
    s.clock.run_timers()
    s.feed(("announce", 1, 1, 1, timeout(0.01), 10.0))
    assert s.log[-1] == ("prioritize", 1, 1)
    s.feed(("barrier", 1, 1, timeout(0.01), 10.0))
    assert entries(s, "trigger") == [("trigger", 1, "unaligned")] and s.gate.blocked == set()


def test_the_last_barrier_after_the_timeout_but_before_the_timer_still_aligns():
    # testPassiveTimeoutAlignmentOnAnnouncement: every barrier in, the checkpoint is aligned
    s = Setup(ALTERNATING, 2)
    s.feed(("announce", 1, 0, 0, timeout(0.1)), ("barrier", 1, 0, timeout(0.1)))
    s.clock.now += 0.4
    s.feed(("announce", 1, 1, 0, timeout(0.1), 10.0), ("barrier", 1, 1, timeout(0.1), 10.0))
    assert entries(s, "trigger") == [("trigger", 1, "aligned")]


def test_every_channel_is_unblocked_after_a_timed_out_alignment():
    # testAllChannelsUnblockedAfteralignedCheckpointTimeout
    s = Setup(ALTERNATING, 2)
    s.feed(("announce", 1, 0, 0, timeout(0.1)), ("barrier", 1, 0, timeout(0.1)))
    assert s.gate.blocked == {0}
    s.clock.advance(s.clock.now + 0.102)
    s.feed(("announce", 1, 1, 0, timeout(0.1), 10.0), ("barrier", 1, 1, timeout(0.1), 10.0))
    assert entries(s, "trigger") == [("trigger", 1, "unaligned")]
    assert s.gate.blocked == set()


def test_no_timeout_after_the_last_barrier_or_an_abort():
    # testNoActiveTimeoutAlignmentAfterLastBarrier, testNoActiveTimeoutAlignmentAfterAbort
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 1, 0, timeout(0.1)), ("barrier", 1, 1, timeout(0.1)))
    s.clock.advance(s.clock.now + 1)
    assert entries(s, "trigger") == [("trigger", 1, "aligned")]
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 1, 0, timeout(0.1)), ("cancel", 1, 0), ("cancel", 1, 1))
    s.clock.advance(s.clock.now + 1)
    assert s.task.triggered() == []


def test_end_of_partition_after_the_timeout_switches_to_unaligned():
    # testTimeoutAlignmentAfterReceivedEndOfPartition: the timer has not fired, but the
    # alignment is past its timeout when another channel ends
    s = Setup(ALTERNATING, 3)
    s.feed(("announce", 1, 0, 0, timeout(0.1)), ("barrier", 1, 0, timeout(0.1)))
    s.clock.now += 0.101 + 0.001
    s.feed(("data", 1, 100), ("eop", 1))
    assert entries(s, "trigger") == [("trigger", 1, "unaligned")]
    s.feed(("data", 2, 100), ("eop", 2))
    assert entries(s, "trigger") == [("trigger", 1, "unaligned")]
    assert s.gate.blocked == set() and entries(s, "stopped") == [("stopped", 1)]


def test_an_announcement_starts_the_alignment_an_end_of_partition_measures():
    # testStartNewCheckpointViaAnnouncement (FLINK-24068)
    s = Setup(ALTERNATING, 3)
    s.feed(("announce", 1, 0, 0, timeout(10)), ("eop", 1))
    s.clock.now += 0.5
    assert s.handler.alignment_time_ns == 500_000_000  # the alignment runs
    s.feed(("barrier", 1, 0, timeout(10), 10.0))
    s.feed(("announce", 1, 2, 0, timeout(10), 10.0), ("barrier", 1, 2, timeout(10), 10.0))
    assert s.task.triggered() == [1]


def test_metrics_of_aligned_savepoint_and_unaligned_checkpoints():
    # testMetricsAlternation
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 1, 0, ALIGNED, 9.99), ("data", 0, 1000), ("data", 1, 1000))
    s.clock.now += 0.006
    s.feed(("barrier", 1, 1, ALIGNED, 9.99), ("data", 0, 1000))
    m = s.task.metrics[1]
    assert (m.alignment_duration_ns, m.start_delay_ns, m.bytes_processed_during_alignment) == (
        6_000_000, 10_000_000, 2000)
    created = s.clock.now - 0.005
    s.feed(("barrier", 2, 0, SAVEPOINT, created), ("data", 1, 1000))
    assert s.handler.latest_start_delay_ns == 5_000_000
    s.clock.now += 0.005
    s.feed(("barrier", 2, 1, SAVEPOINT, created), ("data", 0, 1000))
    m = s.task.metrics[2]
    assert (m.alignment_duration_ns, m.start_delay_ns, m.bytes_processed_during_alignment) == (
        5_000_000, 5_000_000, 1000)
    created = s.clock.now - 0.007
    s.feed(("barrier", 3, 0, UNALIGNED, created), ("data", 0, 1000), ("data", 1, 1000))
    m = s.task.metrics[3]  # triggered on the first barrier: the alignment still runs
    assert m.start_delay_ns == 7_000_000 and m.alignment_duration_ns == 0
    s.clock.now += 0.01
    s.feed(("barrier", 3, 1, UNALIGNED, created))
    assert (m.alignment_duration_ns, m.bytes_processed_during_alignment) == (10_000_000, 2000)


def test_metrics_of_one_channel():
    # testMetricsSingleChannel
    s = Setup(ALTERNATING, 1)
    s.feed(("data", 0, 1000), ("barrier", 1, 0, ALIGNED, 9.99), ("data", 0, 1000))
    s.clock.now += 0.006
    m = s.task.metrics[1]
    assert (m.alignment_duration_ns, m.start_delay_ns, m.bytes_processed_during_alignment) == (
        0, 10_000_000, 0)
    s.feed(("data", 0, 1000), ("barrier", 2, 0, SAVEPOINT, s.clock.now - 0.005), ("data", 0, 1000))
    m = s.task.metrics[2]
    assert (m.alignment_duration_ns, m.start_delay_ns, m.bytes_processed_during_alignment) == (
        0, 5_000_000, 0)


def test_each_new_checkpoint_subsumes_the_pending_one_and_resumes_its_channel():
    # testPreviousHandlerReset, testHasInflightDataBeforeProcessBarrier
    s = Setup(ALTERNATING, 2)
    for checkpoint_id in range(4):
        channel = checkpoint_id % 2
        s.feed(("barrier", checkpoint_id, channel, SAVEPOINT if channel == 0 else ALIGNED))
        assert s.gate.blocked == {channel}
        assert s.handler.is_checkpoint_pending and ("inputs_finished", checkpoint_id) not in s.log
    assert [entry[1] for entry in entries(s, "abort")] == [0, 1, 2]


def test_an_out_of_order_savepoint_barrier_is_ignored_and_its_channel_resumed():
    # testOutOfOrderBarrier
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 10, 0), ("barrier", 5, 1, SAVEPOINT))
    assert s.handler.current_checkpoint_id == 10 and s.log[-1] == ("resume", 1)


def test_the_alignment_of_a_checkpoint_that_overtook_a_cancellation_marker():
    # testNextFirstCheckpointBarrierOvertakesCancellationBarrier
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 1, 0, timeout(10)))
    s.clock.advance(s.clock.now + 1)
    s.feed(("barrier", 2, 0, timeout(10)))
    s.clock.advance(s.clock.now + 1)
    s.feed(("cancel", 1, 1))
    s.clock.advance(s.clock.now + 1)
    s.feed(("barrier", 2, 1, timeout(10), 11.0))
    assert s.task.metrics[2].alignment_duration_ns == 2_000_000_000


def test_an_unaligned_barrier_subsuming_an_aligned_savepoint_starts_persisting():
    # testChannelResetOnNewBarrier
    s = Setup(ALTERNATING, 2)
    s.feed(("barrier", 0, 0, SAVEPOINT), ("barrier", 1, 1, UNALIGNED))
    assert entries(s, "abort") == [("abort", 0, CHECKPOINT_DECLINED_SUBSUMED)]
    assert ("started", 1) in s.log and s.task.options[1] == UNALIGNED


def test_an_unaligned_barrier_during_an_alignment_switches_it():
    # testTimeoutAlignmentOnUnalignedCheckpoint
    s = Setup(ALTERNATING, 3)
    s.feed(("announce", 1, 0, 0, NEVER), ("barrier", 1, 0, NEVER))
    s.feed(("data", 1, 100), ("barrier", 1, 1, UNALIGNED))
    assert s.log[-3:] == [("init", 1), ("started", 1), ("trigger", 1, "unaligned")]


def test_a_barrier_without_announcement_starts_the_timeout_of_its_checkpoint():
    # testTimeoutAlignmentWhenLocalBarrierFirst (channel 0 local: no announcement)
    s = Setup(ALTERNATING, 3)
    s.feed(("barrier", 1, 0, timeout(0.1)), ("announce", 1, 1, 0, timeout(0.1)),
           ("announce", 1, 2, 0, timeout(0.1)), ("barrier", 1, 1, timeout(0.1)), ("barrier", 1, 2, timeout(0.1)))
    assert s.task.triggered() == [1]
    s.clock.advance(s.clock.now + 0.101)
    s.feed(("barrier", 2, 0, timeout(0.1)))
    assert s.task.triggered() == [1]
    s.clock.advance(s.clock.now + 0.102)
    assert s.task.triggered() == [1, 2] and s.task.options[2] == UNALIGNED


def test_an_announcement_whose_barrier_was_processed_is_not_prioritized():
    # Flink's AbstractAlternatingAlignedBarrierHandlerState.barrierReceived forgets the
    # channel's announcement (removeSeenAnnouncement): its barrier is no longer queued
    s = Setup(ALTERNATING, 3)
    s.feed(("announce", 1, 0, 4, timeout(0.1)), ("announce", 1, 1, 7, timeout(0.1)), ("barrier", 1, 0, timeout(0.1)))
    s.clock.advance(s.clock.now + 0.102)
    assert entries(s, "prioritize") == [("prioritize", 1, 7)]


def test_an_abort_before_any_barrier_of_a_timed_out_checkpoint_stops_no_persisting():
    # Flink's AlternatingWaitingForFirstBarrierUnaligned.abort: nothing was started, so the
    # inputs are not told to stop (only CollectingBarriersUnaligned stops them)
    s = Setup(ALTERNATING, 2)
    s.feed(("announce", 1, 0, 3, timeout(0.1)))
    s.clock.advance(s.clock.now + 0.102)
    s.feed(("cancel", 2, 1))  # a newer checkpoint's (checkpoint 1 has no barrier to cancel)
    assert [entry[0] for entry in s.log] == ["prioritize", "abort", "inputs_failed"]
    s.feed(("barrier", 3, 0, timeout(0.1)))  # aligned again
    assert s.gate.blocked == {0}


def test_channels_ending_before_any_barrier_trigger_nothing():
    # Flink's (Alternating)WaitingForFirstBarrier.endOfPartitionReceived: a checkpoint pending
    # by an announcement only is not triggered by ends of partition alone
    s = Setup(ALTERNATING, 2)
    s.feed(("announce", 1, 0, 0, timeout(10)), ("eop", 1), ("eop", 0))
    assert s.task.triggered() == [] and not s.handler.is_checkpoint_pending
