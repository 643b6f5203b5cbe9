"""Flink's UnalignedCheckpointsTest, the handler's side of its cases (Flink's also check the
buffers a real gate persists, which the channel and persister tests cover): when inputs
start and stop persisting, and how cancellation markers abort. Each test names the Flink
case whose behaviour it ports."""

from __future__ import annotations

import pytest

from shuffle.api.events import AlignmentType, CheckpointOptions
from taskmgr.checkpointing.single_checkpoint_barrier_handler import SingleCheckpointBarrierHandler

from barrier_fakes import Setup

UNALIGNED_HANDLER = SingleCheckpointBarrierHandler.unaligned
UNALIGNED = CheckpointOptions(alignment=AlignmentType.UNALIGNED)


def kinds(s: Setup) -> list[tuple]:
    return [entry for entry in s.log if entry[0] in ("started", "stopped", "trigger", "abort")]


def test_each_checkpoint_starts_on_its_first_barrier_and_stops_on_its_last():
    # testMultiChannelWithBarriers, testSingleChannelWithBarriers
    s = Setup(UNALIGNED_HANDLER, 3)
    s.feed(("barrier", 1, 1, UNALIGNED), ("barrier", 1, 2, UNALIGNED), ("data", 0, 100))
    assert kinds(s) == [("started", 1), ("trigger", 1, "unaligned")]
    s.feed(("barrier", 1, 0, UNALIGNED))
    assert kinds(s)[-1] == ("stopped", 1)
    s = Setup(UNALIGNED_HANDLER, 1)
    s.feed(*[("barrier", i, 0, UNALIGNED) for i in range(1, 4)])
    assert [e for e in kinds(s) if e[0] == "trigger"] == [("trigger", i, "unaligned") for i in range(1, 4)]


def test_a_cancellation_marker_before_any_barrier_starts_and_stops_nothing():
    # testMultiChannelAbortCheckpoint (checkpoints 4 and 6: "don't start a checkpoint at all")
    s = Setup(UNALIGNED_HANDLER, 3)
    s.feed(("barrier", 3, 1, UNALIGNED), ("barrier", 3, 2, UNALIGNED), ("barrier", 3, 0, UNALIGNED))
    s.log.clear()
    s.feed(("cancel", 4, 1), ("barrier", 4, 2, UNALIGNED), ("barrier", 4, 0, UNALIGNED))
    s.feed(("cancel", 6, 1), ("cancel", 6, 2), ("barrier", 6, 0, UNALIGNED))
    assert kinds(s) == [("abort", 4, "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER"),
                        ("abort", 6, "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER")]


def test_a_cancellation_marker_after_the_first_barrier_aborts_and_stops_persisting():
    # testMultiChannelAbortCheckpoint (checkpoint 2), testProcessCancellationBarrierAfterProcessBarrier
    for cancelled in (0, 1):
        s = Setup(UNALIGNED_HANDLER, 2)
        s.feed(("barrier", 0, 0, UNALIGNED))
        assert s.handler.is_checkpoint_pending and s.handler.current_checkpoint_id == 0
        s.feed(("cancel", cancelled, 0))
        assert not s.handler.is_checkpoint_pending and s.handler.current_checkpoint_id == cancelled
        assert s.task.aborted() == [cancelled] and ("stopped", cancelled) in s.log
        s.feed(("cancel", cancelled + 1, 0))
        assert s.handler.current_checkpoint_id == cancelled + 1 and s.task.aborted() == [cancelled, cancelled + 1]


def test_a_barrier_after_its_cancellation_marker_triggers_nothing():
    # testProcessCancellationBarrierBeforeProcessAndReceiveBarrier
    s = Setup(UNALIGNED_HANDLER, 1)
    s.feed(("cancel", 0, 0))
    assert not s.handler.is_checkpoint_pending and s.task.aborted() == [0]
    s.feed(("barrier", 0, 0, UNALIGNED))
    assert s.task.triggered() == [] and s.handler.current_checkpoint_id == 0


def test_end_of_partition_completes_an_unaligned_checkpoint():
    # testEndOfStreamWhileCheckpoint, testStartAlignmentWithClosedChannels
    s = Setup(UNALIGNED_HANDLER, 3)
    s.feed(("barrier", 2, 2, UNALIGNED), ("barrier", 2, 0, UNALIGNED), ("data", 1, 100), ("eop", 2), ("eop", 1))
    assert kinds(s) == [("started", 2), ("trigger", 2, "unaligned"), ("stopped", 2)]
    s = Setup(UNALIGNED_HANDLER, 4)
    s.feed(("eop", 2), ("eop", 1), ("barrier", 2, 3, UNALIGNED), ("barrier", 2, 0, UNALIGNED))
    assert kinds(s)[-1] == ("stopped", 2)


def test_a_newer_cancellation_marker_fails_the_taken_checkpoint_awaiting_its_barriers():
    # SingleCheckpointBarrierHandler.abortInternal completes the allBarriersReceivedFuture of
    # the checkpoint being aligned exceptionally, whichever checkpoint it aborts (Flink 2.3
    # bytecode); testProcessCancellationBarrierAfterProcessBarrier aborts the newer one
    s = Setup(UNALIGNED_HANDLER, 2)
    s.feed(("barrier", 1, 0, UNALIGNED), ("cancel", 2, 1))
    assert [e for e in s.log if e[0] in ("abort", "inputs_failed", "inputs_finished")] == [
        ("abort", 2, "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER"),
        ("inputs_failed", 1, "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER")]
    s.feed(("barrier", 1, 1, UNALIGNED), ("barrier", 2, 0, UNALIGNED))  # late: nothing more
    assert s.task.triggered() == [1] and len([e for e in s.log if e[0] == "inputs_failed"]) == 1


def test_a_newer_barrier_fails_the_subsumed_checkpoint_awaiting_its_barriers():
    # cancelSubsumedCheckpoint: abortInternal of the older checkpoint, CHECKPOINT_DECLINED_SUBSUMED
    s = Setup(UNALIGNED_HANDLER, 2)
    s.feed(("barrier", 1, 0, UNALIGNED), ("barrier", 2, 1, UNALIGNED))
    subsumed = "CHECKPOINT_DECLINED_SUBSUMED"
    assert [e for e in s.log if e[0] in ("abort", "inputs_failed")] == [
        ("abort", 1, subsumed), ("inputs_failed", 1, subsumed)]
    s.feed(("barrier", 2, 0, UNALIGNED))
    assert ("inputs_finished", 2) in s.log


def test_a_savepoint_barrier_is_refused_by_the_unaligned_states():
    # AlternatingWaitingForFirstBarrierUnaligned.barrierReceived calls CheckpointBarrier.asUnaligned,
    # whose CheckpointOptions.unaligned refuses a savepoint (IllegalArgumentException). Only the
    # unaligned-only handler reaches it: a job's tasks use the aligned or alternating one, whose
    # unaligned states are left (aborted) before a savepoint's newer barrier is processed
    s = Setup(UNALIGNED_HANDLER, 2)
    with pytest.raises(ValueError, match="^Savepoints can not be unaligned$"):
        s.feed(("barrier", 1, 0, CheckpointOptions("SAVEPOINT")))
    assert s.task.triggered() == []
    alternating = Setup(SingleCheckpointBarrierHandler.alternating, 2)
    timeoutable = CheckpointOptions(aligned_checkpoint_timeout=0.01)
    alternating.feed(("barrier", 1, 0, timeoutable))
    alternating.clock.advance(alternating.clock.now + 0.02)  # checkpoint 1 went unaligned
    savepoint = CheckpointOptions("SAVEPOINT")
    alternating.feed(("barrier", 2, 0, savepoint), ("barrier", 2, 1, savepoint))
    assert alternating.task.triggered() == [1, 2] and alternating.task.options[2].is_savepoint
