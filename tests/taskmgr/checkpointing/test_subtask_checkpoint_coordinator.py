"""A task's side of a checkpoint (SubtaskCheckpointCoordinator) behind a real exactly-once
barrier handler: what becomes of a checkpoint the task took whose barriers never all come."""

from __future__ import annotations

from shuffle import kernel
from shuffle.api.events import AlignmentType, CheckpointOptions
from shuffle.channel_state import ChannelStateWriter
from shuffle.trace import NULL_TRACER
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.checkpointing.single_checkpoint_barrier_handler import SingleCheckpointBarrierHandler
from taskmgr.checkpointing.subtask_checkpoint_coordinator import SubtaskCheckpointCoordinator

from barrier_fakes import Clock, Driver, FakeGate

UNALIGNED = CheckpointOptions(alignment=AlignmentType.UNALIGNED)
CANCELLED = "CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER"


class CoordinatorTask:
    """The task a handler talks to: the coordinator, which takes each checkpoint triggered."""

    def __init__(self, coordinator: SubtaskCheckpointCoordinator) -> None:
        self.coordinator = coordinator

    def __getattr__(self, name):
        return getattr(self.coordinator, name)

    def alignment_started(self, checkpoint_id, start_delay_ns) -> None:
        pass

    def trigger_checkpoint_on_barrier(self, barrier, metrics) -> None:
        self.coordinator.checkpoint_state(barrier, metrics, wait_for_inputs=True)


def run_unaligned(*items) -> tuple[list, list, bool]:
    """Feed `items` to an unaligned handler over two channels of a task with a coordinator;
    (acknowledged ids, declines, whether wait_for_pending_checkpoints returned)."""
    acks, declines = [], []

    async def main() -> bool:
        async with kernel.open_nursery() as nursery:
            async def run_now(fn):
                await fn()

            async def acknowledge(ack):
                acks.append(ack.checkpoint_id)

            async def decline(checkpoint_id, reason):
                declines.append((checkpoint_id, reason))

            coordinator = SubtaskCheckpointCoordinator(
                "task", [], CheckpointCosts(), ChannelStateWriter(), snapshot_state=dict,
                prepare_input_snapshot=lambda cid: None,
                run_in_mailbox=lambda fn: nursery.start_soon(run_now, fn),
                spawn=lambda fn: nursery.start_soon(run_now, fn), acknowledge=acknowledge, decline=decline,
                job_time=kernel.current_time, tracer=NULL_TRACER)
            clock = Clock()
            handler = SingleCheckpointBarrierHandler.unaligned(CoordinatorTask(coordinator), [FakeGate([])], 2,
                                                              clock, clock.register)
            Driver(handler, FakeGate([]), clock).feed(*items)
            returned = False
            with kernel.move_on_after(60):
                await coordinator.wait_for_pending_checkpoints()
                returned = True
            nursery.cancel_scope.cancel()
        return returned

    return acks, declines, kernel.run(main)


def test_a_taken_unaligned_checkpoint_whose_alignment_a_newer_cancellation_ends_is_declined():
    # SingleCheckpointBarrierHandler.abortInternal fails checkpoint 1's allBarriersReceivedFuture;
    # SubtaskCheckpointCoordinatorImpl.prepareInflightDataSnapshot then aborts its channel state
    # and AsyncCheckpointRunnable declines it with the reason found in the failure
    acks, declines, returned = run_unaligned(("barrier", 1, 0, UNALIGNED), ("cancel", 2, 1))
    assert returned, "a finishing task would wait for checkpoint 1 forever"
    assert acks == [] and sorted(declines) == [(1, CANCELLED), (2, CANCELLED)]


def test_a_taken_unaligned_checkpoint_completes_when_its_barriers_are_in():
    acks, declines, returned = run_unaligned(("barrier", 1, 0, UNALIGNED), ("barrier", 1, 1, UNALIGNED))
    assert returned and acks == [1] and declines == []


def test_a_subsumed_unaligned_checkpoint_is_declined_once():
    # cancelSubsumedCheckpoint declines it on the task's thread; the JobManager ignores the
    # second decline Flink's failing asynchronous part sends, so ours sends none
    acks, declines, returned = run_unaligned(("barrier", 1, 0, UNALIGNED), ("barrier", 2, 1, UNALIGNED),
                                             ("barrier", 2, 0, UNALIGNED))
    assert returned and acks == [2] and declines == [(1, "CHECKPOINT_DECLINED_SUBSUMED")]
