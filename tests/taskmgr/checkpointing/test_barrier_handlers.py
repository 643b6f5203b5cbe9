"""The barrier handlers as spec 5.3-5.6 describe them: which channels block and when, when
the checkpoint is triggered, which inputs start and stop persisting, cancellation by a
newer checkpoint and by CancelCheckpointMarker, alignment timeouts, end of partition."""

from __future__ import annotations

import math

from shuffle.api.events import AlignmentType, CancelCheckpointMarker, CheckpointOptions
from taskmgr.checkpointing.checkpoint_barrier_tracker import CheckpointBarrierTracker
from taskmgr.checkpointing.single_checkpoint_barrier_handler import (
    CHECKPOINT_DECLINED_INPUT_END_OF_STREAM,
    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER,
    CHECKPOINT_DECLINED_SUBSUMED,
    SingleCheckpointBarrierHandler,
    checkpoint_start_delay_ns,
)
from taskmgr.checkpointing.subtask_checkpoint_coordinator import elapsed_millis
from taskmgr.processing_time import absolute_time_millis

from barrier_fakes import Clock, FakeGate, FakeTask, barrier, ch, make

ALIGNED = CheckpointOptions()
UNALIGNED = CheckpointOptions(alignment=AlignmentType.UNALIGNED)
TIMEOUTABLE = CheckpointOptions(aligned_checkpoint_timeout=0.5)


def test_aligned_blocks_each_channel_until_the_last_barrier_then_triggers_and_resumes_all():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned, channels=3)
    clock.now = 10.25
    handler.process_barrier(barrier(1), ch(0))
    clock.now = 10.5
    handler.process_barrier(barrier(1), ch(2))
    assert log == [("block", 0), ("block", 2)]  # no trigger before all are in
    clock.now = 11.0
    handler.process_barrier(barrier(1), ch(1))
    assert log[2:] == [("block", 1), ("trigger", 1, "aligned"), ("resume", 0), ("resume", 1), ("resume", 2),
                       ("inputs_finished", 1)]
    metrics = task.metrics[1]
    assert metrics.start_delay_ns == 250_000_000 and metrics.alignment_duration_ns == 750_000_000
    assert not handler.is_checkpoint_pending


def test_one_channel_aligns_at_once_and_the_queueing_shows_as_start_delay():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned, channels=1)
    clock.now = 161.0
    handler.process_barrier(barrier(1), ch(0))
    assert ("trigger", 1, "aligned") in log
    assert task.metrics[1].alignment_duration_ns == 0
    assert task.metrics[1].start_delay_ns == 151_000_000_000


def test_start_delay_is_whole_milliseconds_of_the_clock_and_alignment_nanoseconds():
    """Flink: `1_000_000 * max(0, absoluteTimeMillis() - timestamp)`; the alignment runs on
    the nanosecond clock."""
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned, channels=2)
    clock.now = 10.0309  # 30.9 ms after the barrier's timestamp (10,000 ms): 30 ms
    handler.process_barrier(barrier(1), ch(0))
    clock.now = 10.0312
    handler.process_barrier(barrier(1), ch(1))
    assert task.metrics[1].start_delay_ns == 30_000_000
    assert task.metrics[1].alignment_duration_ns == 300_000
    assert handler.latest_start_delay_ns == 30_000_000
    clock.now = 9.9995  # a clock behind the coordinator's: no negative delay
    handler.process_barrier(barrier(2), ch(0))
    assert handler.latest_start_delay_ns == 0


def test_aligned_data_bytes_during_alignment_are_counted():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned)
    handler.add_processed_bytes(100)  # before: not counted
    handler.process_barrier(barrier(1), ch(0))
    for _ in range(3):
        handler.add_processed_bytes(100)
    handler.process_barrier(barrier(1), ch(1))
    assert task.metrics[1].bytes_processed_during_alignment == 300


def test_unaligned_first_barrier_starts_persisting_everywhere_and_triggers_at_once():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.alternating)
    handler.process_barrier(barrier(1, UNALIGNED), ch(1))
    assert log == [("init", 1), ("started", 1), ("trigger", 1, "unaligned")]
    handler.process_barrier(barrier(1, UNALIGNED), ch(0))
    assert log[3:] == [("stopped", 1), ("inputs_finished", 1)]


def test_a_newer_barrier_subsumes_the_pending_checkpoint():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned)
    handler.process_barrier(barrier(1), ch(0))
    handler.process_barrier(barrier(2), ch(1))
    assert ("abort", 1, CHECKPOINT_DECLINED_SUBSUMED) in log
    assert log.index(("resume", 0)) < log.index(("abort", 1, CHECKPOINT_DECLINED_SUBSUMED))
    # the late barrier of checkpoint 1 is obsolete: its producer blocked itself, resume it at once
    log.clear()
    handler.process_barrier(barrier(1), ch(0))
    assert log == [("resume", 0)]
    handler.process_barrier(barrier(2), ch(0))
    assert ("trigger", 2, "aligned") in log


def test_cancel_checkpoint_marker_aborts_and_later_barriers_are_stale():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned)
    handler.process_barrier(barrier(1), ch(0))
    handler.process_cancellation_barrier(CancelCheckpointMarker(1), ch(1))
    assert log == [("block", 0), ("resume", 0), ("abort", 1, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER),
                   ("inputs_failed", 1, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)]
    log.clear()
    handler.process_barrier(barrier(1), ch(1))
    assert log == [("resume", 1)]
    handler.process_cancellation_barrier(CancelCheckpointMarker(1), ch(0))  # stale: ignored
    assert log == [("resume", 1)]


def test_alignment_timeout_prioritizes_announced_barriers_and_goes_unaligned():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.alternating, channels=3)
    timed = barrier(1, TIMEOUTABLE, ts_s=10.0)
    clock.now = 10.1
    handler.process_barrier(timed, ch(0))
    handler.process_barrier_announcement(timed, 42, ch(2))
    assert log == [("block", 0)]
    # the timeout counts from the barrier's creation, in whole ms; Flink's timer service fires 1 ms late
    assert clock.timers[0][0] == 10.501
    clock.advance(10.501)
    assert log[1:] == [("prioritize", 2, 42), ("init", 1), ("started", 1), ("trigger", 1, "unaligned")]
    handler.process_barrier(timed, ch(2))  # the prioritized, formerly aligned barrier
    handler.process_barrier(barrier(1, UNALIGNED), ch(1))  # upstream timed out too
    assert log[5:] == [("block", 2), ("stopped", 1), ("resume", 0), ("resume", 2), ("inputs_finished", 1)]


def test_a_timeout_before_any_barrier_prioritizes_the_announced_ones_and_the_first_of_them_triggers():
    """Flink's AlternatingWaitingForFirstBarrier.alignmentTimeout: only announcements seen,
    the timer prioritizes them and waits; the checkpoint starts when the first barrier is
    processed, which is also when its start delay is measured."""
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.alternating, channels=2)
    handler.process_barrier(barrier(1), ch(0))  # an earlier checkpoint: its figures must not leak
    handler.process_barrier(barrier(1), ch(1))
    log.clear()
    timed = barrier(2, TIMEOUTABLE, ts_s=13.0)
    clock.now = 13.2
    handler.process_barrier_announcement(timed, 7, ch(1))
    clock.advance(13.501)
    assert log == [("prioritize", 1, 7)]  # no checkpoint yet
    clock.now = 13.6
    handler.process_barrier(timed, ch(1))
    assert log[1:] == [("block", 1), ("init", 2), ("started", 2), ("trigger", 2, "unaligned")]
    assert task.metrics[2].checkpoint_id == 2 and task.metrics[2].start_delay_ns == 600_000_000
    clock.now = 13.7
    handler.process_barrier(barrier(2, UNALIGNED, ts_s=13.0), ch(0))
    assert log[5:] == [("stopped", 2), ("resume", 1), ("inputs_finished", 2)]
    assert task.metrics[2].alignment_duration_ns == 100_000_000


def test_a_timeoutable_barrier_times_out_by_whole_milliseconds():
    """Flink's isTimedOut: `timeout < absoluteTimeMillis() - timestamp`."""
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.alternating)
    clock.now = 10.5009  # 500.9 ms after creation: 500 ms, not more than the 500 ms timeout
    handler.process_barrier(barrier(1, TIMEOUTABLE, ts_s=10.0), ch(0))
    assert log == [("block", 0)]


def test_an_announcement_of_an_aborted_checkpoint_is_obsolete():
    """Flink's processBarrierAnnouncement ignores announcements of a checkpoint that is no
    longer pending; a later timeout prioritizes only the current checkpoint's."""
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.alternating, channels=3)
    handler.process_barrier(barrier(1, TIMEOUTABLE), ch(0))
    handler.process_cancellation_barrier(CancelCheckpointMarker(1), ch(1))
    handler.process_barrier_announcement(barrier(1, TIMEOUTABLE), 5, ch(2))  # late: 1 was aborted
    log.clear()
    second = barrier(2, TIMEOUTABLE, ts_s=13.0)
    clock.now = 13.1
    handler.process_barrier(second, ch(0))
    handler.process_barrier_announcement(second, 9, ch(1))
    clock.advance(13.501)
    assert [entry for entry in log if entry[0] == "prioritize"] == [("prioritize", 1, 9)]


def test_an_aborted_alignment_leaves_no_alignment_time():
    """Flink's resetAlignment: checkpointAlignmentTime reads 0 after the current checkpoint
    is aborted, not the last completed alignment."""
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned)
    handler.process_barrier(barrier(1), ch(0))
    clock.now = 10.75
    handler.process_barrier(barrier(1), ch(1))
    assert handler.alignment_time_ns == 750_000_000
    handler.process_barrier(barrier(2, ts_s=12.0), ch(0))
    handler.process_cancellation_barrier(CancelCheckpointMarker(2), ch(1))
    assert handler.alignment_time_ns == 0


def test_alternating_completes_aligned_before_the_timeout_and_cancels_the_timer():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.alternating)
    handler.process_barrier(barrier(1, TIMEOUTABLE), ch(0))
    handler.process_barrier(barrier(1, TIMEOUTABLE), ch(1))
    assert ("trigger", 1, "aligned") in log
    clock.advance(20.0)
    assert not any(entry[0] == "started" for entry in log)


def test_an_already_late_timeoutable_barrier_switches_at_once():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.alternating)
    clock.now = 11.0  # 1 s after creation, the timeout is 0.5 s
    handler.process_barrier(barrier(1, TIMEOUTABLE, ts_s=10.0), ch(0))
    assert ("trigger", 1, "unaligned") in log


def test_end_of_partition_during_alignment_counts_as_aligned():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned)
    handler.process_barrier(barrier(1), ch(0))
    handler.process_end_of_partition(ch(1))
    assert ("trigger", 1, "aligned") in log and ("resume", 0) in log
    log.clear()
    handler.process_barrier(barrier(2), ch(0))  # one channel left open
    assert ("trigger", 2, "aligned") in log


def test_without_checkpoints_after_tasks_finish_end_of_partition_aborts_the_alignment():
    """Flink before FLIP-147 (checkpoints_after_tasks_finish = false)."""
    log, clock = [], Clock()
    task = FakeTask(log)
    handler = SingleCheckpointBarrierHandler.aligned(task, [FakeGate(log)], 3, clock, clock.register,
                                                     enable_checkpoint_after_tasks_finished=False)
    handler.process_barrier(barrier(1), ch(0))
    handler.process_end_of_partition(ch(1))
    assert log == [("block", 0), ("resume", 0), ("abort", 1, CHECKPOINT_DECLINED_INPUT_END_OF_STREAM),
                   ("inputs_failed", 1, CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)]
    log.clear()
    handler.process_barrier(barrier(2), ch(0))
    handler.process_barrier(barrier(2), ch(2))  # two channels left open
    assert ("trigger", 2, "aligned") in log


def test_a_barrier_the_coordinator_triggered_stands_in_for_the_open_channels_without_blocking_them():
    """Flink's triggerUnfinishedChannelsCheckpoint: the task's predecessors finished, their
    channels will never deliver the barrier, so the task processes it for each of them."""
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.aligned, channels=2)
    handler.process_barrier(barrier(1), ch(0), is_rpc_triggered=True)
    assert log == []  # waiting for the other channel, nothing blocked
    handler.process_barrier(barrier(1), ch(1), is_rpc_triggered=True)
    assert log == [("trigger", 1, "aligned"), ("inputs_finished", 1)]  # nothing to resume


def test_unaligned_end_of_partition_stops_persisting_when_the_rest_is_in():
    handler, log, clock, task = make(SingleCheckpointBarrierHandler.unaligned)
    handler.process_barrier(barrier(1, UNALIGNED), ch(0))
    handler.process_end_of_partition(ch(1))
    assert log[-2:] == [("stopped", 1), ("inputs_finished", 1)]


def tracker(channels=2):
    log, clock = [], Clock()
    task = FakeTask(log)
    return CheckpointBarrierTracker(task, channels, clock), log, clock, task


def test_tracker_never_blocks_and_triggers_on_the_last_barrier():
    handler, log, clock, task = tracker()
    handler.process_barrier(barrier(1), ch(0))
    assert log == []
    clock.now = 10.3
    handler.process_barrier(barrier(1), ch(1))
    assert log == [("trigger", 1, "aligned"), ("inputs_finished", 1)]
    assert task.metrics[1].alignment_duration_ns == 300_000_000


def test_tracker_start_delay_is_whole_milliseconds_too():
    handler, log, clock, task = tracker(channels=1)
    clock.now = 10.0047
    handler.process_barrier(barrier(1), ch(0))
    assert task.metrics[1].start_delay_ns == 4_000_000


def test_tracker_drops_older_checkpoints_a_newer_one_completes_before():
    handler, log, clock, task = tracker()
    handler.process_barrier(barrier(1), ch(0))
    handler.process_barrier(barrier(2), ch(0))
    handler.process_barrier(barrier(2), ch(1))
    handler.process_barrier(barrier(1), ch(1))  # late: checkpoint 1 was dropped
    assert [entry for entry in log if entry[0] == "trigger"] == [("trigger", 2, "aligned")]


def test_tracker_cancellation_marks_aborted_once():
    handler, log, clock, task = tracker()
    handler.process_barrier(barrier(1), ch(0))
    handler.process_cancellation_barrier(CancelCheckpointMarker(1), ch(1))
    handler.process_cancellation_barrier(CancelCheckpointMarker(1), ch(0))
    handler.process_barrier(barrier(1), ch(1))
    assert log == [("abort", 1, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)]


def test_tracker_an_older_checkpoint_completing_late_gets_no_figures_and_leaves_the_newer_alignment_running():
    """Flink: only the latest checkpoint's alignment is measured (`markAlignmentEnd` for the
    latest pending id only), and `notifyCheckpoint` reports zeros for any other checkpoint."""
    handler, log, clock, task = tracker()
    handler.process_barrier(barrier(1), ch(0))
    clock.now = 13.0
    handler.process_barrier(barrier(2, ts_s=12.9), ch(0))  # channel 0 runs ahead
    clock.now = 13.5
    handler.process_barrier(barrier(1), ch(1))
    assert task.metrics[1].checkpoint_id == 1
    assert task.metrics[1].start_delay_ns == 0 and task.metrics[1].alignment_duration_ns == 0
    clock.now = 14.0
    handler.process_barrier(barrier(2, ts_s=12.9), ch(1))
    assert task.metrics[2].start_delay_ns == 100_000_000
    assert task.metrics[2].alignment_duration_ns == 1_000_000_000


def test_tracker_waits_for_every_channel_open_when_the_checkpoint_began():
    """Flink's CheckpointBarrierCount keeps its target channel count; a channel that ends
    after delivering the barrier does not let the checkpoint trigger early."""
    handler, log, clock, task = tracker(channels=3)
    handler.process_barrier(barrier(1), ch(0))
    handler.process_end_of_partition(ch(0))
    handler.process_barrier(barrier(1), ch(1))
    assert log == []
    handler.process_barrier(barrier(1), ch(2))
    assert log == [("trigger", 1, "aligned"), ("inputs_finished", 1)]


def test_tracker_end_of_partition_counts_as_the_barrier_of_the_newest_checkpoint_it_completes():
    handler, log, clock, task = tracker(channels=2)
    handler.process_barrier(barrier(1), ch(0))
    handler.process_end_of_partition(ch(1))
    assert log == [("trigger", 1, "aligned"), ("inputs_finished", 1)]


def test_tracker_without_checkpoints_after_tasks_finish_end_of_partition_aborts_what_is_pending():
    log, clock = [], Clock()
    task = FakeTask(log)
    handler = CheckpointBarrierTracker(task, 3, clock, enable_checkpoint_after_tasks_finished=False)
    handler.process_barrier(barrier(1), ch(0))
    handler.process_end_of_partition(ch(1))
    assert log == [("abort", 1, CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)]
    handler.process_barrier(barrier(1), ch(2))  # late
    assert len(log) == 1


def test_tracker_a_newer_cancellation_aborts_the_older_pending_checkpoints():
    handler, log, clock, task = tracker()
    handler.process_barrier(barrier(1), ch(0))
    handler.process_cancellation_barrier(CancelCheckpointMarker(2), ch(0))
    assert log == [("abort", 1, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER),
                   ("abort", 2, CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)]


def test_timeoutable_options_are_what_the_coordinator_derives():
    options = CheckpointOptions.for_config("CHECKPOINT", is_exactly_once_mode=True, is_unaligned_enabled=True,
                                           aligned_checkpoint_timeout=0.5)
    assert options.is_timeoutable and not options.is_unaligned
    assert CheckpointOptions.for_config("CHECKPOINT", is_exactly_once_mode=True, is_unaligned_enabled=True,
                                        aligned_checkpoint_timeout=math.inf).is_unaligned


def test_the_millisecond_clock_floors_and_does_not_lose_a_millisecond_to_float_sums():
    assert absolute_time_millis(1.0309) == 1030
    assert absolute_time_millis(0.1 + 0.2) == 300
    assert absolute_time_millis(1.001) == 1001  # 1.001 * 1000 is 1000.9999999999999
    assert checkpoint_start_delay_ns(1.0309, 1027) == 3_000_000
    assert checkpoint_start_delay_ns(1.0265, 1027) == 0


def test_sync_and_async_durations_are_elapsed_nanoseconds_truncated_to_milliseconds():
    assert elapsed_millis(1.0, 1.0002) == 0
    assert elapsed_millis(1.0, 1.0029) == 2
    assert elapsed_millis(5.001, 5.003) == 2  # not 1 for 1999999.9999997797 ns
