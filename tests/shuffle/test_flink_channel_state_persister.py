"""Flink's ChannelStatePersisterTest, case by case: which buffers of one input channel become
in-flight data of which checkpoint, when barriers come late or early. Each test names the
Flink case whose behaviour it ports."""

from __future__ import annotations

import pytest

from shuffle.api.events import CheckpointBarrier, CheckpointOptions
from shuffle.buffer.buffer import Buffer
from shuffle.buffer.data_type import DataType
from shuffle.channel_state import ChannelStatePersister, ChannelStateWriter
from shuffle.errors import CheckpointException

CHANNEL = (0, 0)


def data() -> Buffer:
    return Buffer.of_event(b"x" * 8, DataType.DATA_BUFFER)


def barrier(checkpoint_id: int) -> CheckpointBarrier:
    return CheckpointBarrier(checkpoint_id, 1, CheckpointOptions())


def persisted(writer: ChannelStateWriter, checkpoint_id: int) -> int:
    return len(writer.take(checkpoint_id).inputs.get(CHANNEL, []))


def test_a_newer_barrier_is_not_forgotten_when_the_older_checkpoint_stops():
    # testNewBarrierNotOverwrittenByStopPersisting
    writer = ChannelStateWriter()
    writer.start(1)
    persister = ChannelStatePersister(CHANNEL, writer)
    persister.check_for_barrier(barrier(1))
    persister.start_persisting(1, [data()])
    persister.maybe_persist(data())  # behind the barrier: not in-flight data
    persister.check_for_barrier(barrier(2))  # checkpoint 1 timed out, 2 started upstream
    persister.maybe_persist(data())
    persister.stop_persisting(1)
    persister.maybe_persist(data())
    assert persisted(writer, 1) == 1 and persister.has_barrier_received


def test_an_older_barrier_does_not_overwrite_a_newer_started_checkpoint():
    # testNewBarrierNotOverwrittenByCheckForBarrier
    persister = ChannelStatePersister(CHANNEL, ChannelStateWriter())
    persister.start_persisting(1, [])
    persister.start_persisting(2, [])
    assert persister.check_for_barrier(barrier(1)) is None
    assert not persister.has_barrier_received


@pytest.mark.parametrize("start_late, cancel_late", [(True, True), (False, True), (False, False)])
def test_a_late_barrier_of_an_older_checkpoint(start_late, cancel_late):
    # testLateBarrierOnStartedAndCancelledCheckpoint, testLateBarrierOnCancelledCheckpoint,
    # testLateBarrierOnNotYetCancelledCheckpoint
    writer = ChannelStateWriter()
    persister = ChannelStatePersister(CHANNEL, writer)
    if start_late:
        persister.start_persisting(1, [])
    if cancel_late:
        persister.stop_persisting(1)
    persister.check_for_barrier(barrier(1))
    writer.start(2)
    persister.start_persisting(2, [data()])
    persister.maybe_persist(data())
    persister.check_for_barrier(barrier(2))
    persister.maybe_persist(data())
    assert persister.has_barrier_received and persisted(writer, 2) == 2


def test_a_checkpoint_started_after_a_newer_barrier_is_refused():
    # testLateBarrierTriggeringCheckpoint: a CheckpointException, CHECKPOINT_SUBSUMED (it
    # declines the checkpoint; the task goes on)
    persister = ChannelStatePersister(CHANNEL, ChannelStateWriter())
    persister.check_for_barrier(barrier(2))
    with pytest.raises(CheckpointException, match="Barrier for newer checkpoint 2 has already been received "
                       "compared to the requested checkpoint 1") as info:
        persister.start_persisting(1, [])
    assert info.value.reason == "CHECKPOINT_SUBSUMED"
