"""The CheckpointCoordinator on its own (sim kernel, one source that acknowledges when told):
the periodic scheduler, Flink's CheckpointRequestDecider (queued requests, the min pause),
plans that fail before a checkpoint gets an id, and the figures it reports."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from graph.api.environment import CheckpointConfig
from shuffle import kernel
from shuffle.api.events import CheckpointBarrier, CheckpointOptions
from shuffle.channel_state import ChannelStateSnapshot
from taskmgr.checkpointing.checkpoint_coordinator import (
    CHECKPOINT_COORDINATOR_SUSPEND,
    CHECKPOINT_SUBSUMED,
    MAX_QUEUED_REQUESTS,
    CheckpointCoordinator,
    PendingCheckpoint,
)
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.checkpointing.checkpoint_plan import NOT_ALL_REQUIRED_TASKS_RUNNING, CheckpointPlan, CheckpointPlanError
from taskmgr.checkpointing.single_checkpoint_barrier_handler import CheckpointMetrics
from taskmgr.checkpointing.subtask_checkpoint_coordinator import SubtaskCheckpointAck

SOURCE = "source#0"
FAST = 0.01


class OneSourcePlan:
    """Every checkpoint triggers and waits for the one source, unless `fail` says no."""

    def __init__(self, fail: Callable[[int], bool] = lambda call: False) -> None:
        self.fail = fail
        self.calls = 0

    def calculate_checkpoint_plan(self, finished: object) -> CheckpointPlan:
        self.calls += 1
        if self.fail(self.calls):
            raise CheckpointPlanError(f"{NOT_ALL_REQUIRED_TASKS_RUNNING}: a task is not running")
        return CheckpointPlan((SOURCE,), (SOURCE,), (), ())


def run_coordinator(config: CheckpointConfig, until: float, takes: Callable[[int], float],
                    plan: OneSourcePlan | None = None, declined: frozenset[int] = frozenset(),
                    during: Callable[[CheckpointCoordinator], object] = lambda c: None,
                    then: float = 0.0) -> CheckpointCoordinator:
    """Run the scheduler from t = 0 until `until`; checkpoint n is acknowledged (declined if in
    `declined`) `takes(n)` s after its trigger. `during(coordinator)` runs at `until`, and the
    run goes on for `then` s."""

    async def main() -> CheckpointCoordinator:
        async with kernel.open_nursery() as nursery:
            async def acknowledge(barrier: CheckpointBarrier) -> None:
                await kernel.sleep(takes(barrier.id))
                if barrier.id in declined:
                    coordinator.receive_decline(SOURCE, barrier.id, "CHECKPOINT_DECLINED")
                    return
                coordinator.receive_acknowledge(SOURCE, SubtaskCheckpointAck(
                    barrier.id, CheckpointMetrics(barrier.id), 0, ChannelStateSnapshot()))

            async def send_trigger(execution_id: str, barrier: CheckpointBarrier) -> None:
                nursery.start_soon(acknowledge, barrier)

            async def nothing(checkpoint_id: int) -> None:
                pass

            costs = CheckpointCosts(trigger_delay=0.0, ack_latency=0.0)
            coordinator = CheckpointCoordinator(config, costs, plan or OneSourcePlan(), set, send_trigger,
                                                nothing, nothing, kernel.current_time, np.random.default_rng(3))
            await nursery.start(coordinator.run)
            coordinator.start_checkpoint_scheduler()
            await kernel.sleep(until)
            during(coordinator)
            await kernel.sleep(then)
            nursery.cancel_scope.cancel()
        return coordinator

    return kernel.run(main, mode="sim")


def triggers(coordinator: CheckpointCoordinator) -> list[float]:
    return [c.trigger_time for c in coordinator.checkpoints]


def test_requests_queue_while_a_checkpoint_is_pending_and_the_backlog_fires_back_to_back():
    """Checkpoint 1 takes 3.5 intervals: the three ticks meanwhile queue, and each checkpoint
    that completes lets the next queued one go, at once (Flink's chooseQueuedRequestToExecute)."""
    coordinator = run_coordinator(CheckpointConfig(interval=1.0), 8.0, lambda n: 3.5 if n == 1 else FAST)
    t0 = triggers(coordinator)[0]
    assert triggers(coordinator)[:6] == pytest.approx([t0, t0 + 3.5, t0 + 3.51, t0 + 3.52, t0 + 4, t0 + 5])
    assert all(c.status == "COMPLETED" for c in coordinator.checkpoints)


def test_a_completed_checkpoint_subsumes_the_older_pending_ones():
    """Flink's completePendingCheckpoint -> dropSubsumedCheckpoints: with two checkpoints at
    once, the second completing first fails the first (it would never be of use)."""
    config = CheckpointConfig(interval=1.0, max_concurrent=2)
    coordinator = run_coordinator(config, 2.5, lambda n: 5.0 if n == 1 else FAST)
    first, second = coordinator.checkpoints[:2]
    assert second.status == "COMPLETED"
    assert first.status == "FAILED" and first.failure == CHECKPOINT_SUBSUMED
    assert first.end_time == second.end_time


def test_at_most_a_thousand_requests_queue():
    config = CheckpointConfig(interval=0.01)
    seen = []
    run_coordinator(config, 10.5, lambda n: 20.0 if n == 1 else FAST,
                    during=lambda c: seen.append((c.num_queued_requests, len(c.pending))))
    assert seen == [(MAX_QUEUED_REQUESTS, 1)]  # ~1,050 ticks while checkpoint 1 runs


def test_before_the_min_pause_a_request_is_dropped_and_the_ticks_start_again_after_it():
    """Flink: the request is failed (MINIMUM_TIME_BETWEEN_CHECKPOINTS) and rescheduleTrigger
    starts a new schedule after the rest of the pause; later ticks keep that phase."""
    config = CheckpointConfig(interval=1.0, min_pause=0.6)
    coordinator = run_coordinator(config, 4.5, lambda n: 0.7 if n == 1 else FAST)
    t0 = triggers(coordinator)[0]
    # 1 completes at t0 + 0.7: the tick at t0 + 1 comes 0.3 s early, so the next are t0 + 1.3, 2.3, ...
    assert triggers(coordinator) == pytest.approx([t0, t0 + 1.3, t0 + 2.3, t0 + 3.3], abs=0.002)


def test_the_min_pause_runs_from_the_last_completed_checkpoint_not_a_failed_one():
    config = CheckpointConfig(interval=1.0, min_pause=0.6)
    # 1 is declined 0.7 s after its trigger: the next tick (0.3 s later) goes at once
    coordinator = run_coordinator(config, 3.0, lambda n: 0.7 if n == 1 else FAST, declined=frozenset({1}))
    t0 = triggers(coordinator)[0]
    assert [c.status for c in coordinator.checkpoints[:3]] == ["FAILED", "COMPLETED", "COMPLETED"]
    assert triggers(coordinator)[:3] == pytest.approx([t0, t0 + 1, t0 + 2])


def test_the_ticks_come_every_min_pause_when_it_is_longer_than_the_interval():
    """Flink's base interval is max(interval, min pause); the first tick is in [min pause, base
    interval]."""
    config = CheckpointConfig(interval=1.0, min_pause=2.0)
    queued = []
    slow = run_coordinator(config, 4.5, lambda n: 3.0, during=lambda c: queued.append(c.num_queued_requests))
    assert triggers(slow) == [2.0] and queued == [1]  # one tick (at 4 s) while checkpoint 1 runs
    # each tick comes 10 ms (a checkpoint's duration) before the pause since the last
    # completion is over: it is dropped and the ticks start again after the pause
    fast = run_coordinator(config, 6.5, lambda n: FAST)
    assert triggers(fast) == pytest.approx([2.0, 4.01, 6.02], abs=0.002)


def test_a_plan_that_fails_uses_no_checkpoint_id():
    """Flink's plan fails before checkpointIdCounter.getAndIncrement(): the request counts as
    a failed checkpoint (reportFailedCheckpointsWithoutInProgress), with no id."""
    coordinator = run_coordinator(CheckpointConfig(interval=1.0), 3.5, lambda n: FAST,
                                  plan=OneSourcePlan(fail=lambda call: call == 2))
    stats = [c.stats() for c in coordinator.checkpoints]
    assert [(s["id"], s["status"]) for s in stats] == [(1, "COMPLETED"), (None, "FAILED"), (2, "COMPLETED"),
                                                      (3, "COMPLETED")]
    assert stats[1]["failure"].startswith(NOT_ALL_REQUIRED_TASKS_RUNNING) and stats[1]["duration_ms"] is None


def test_stopping_the_scheduler_fails_what_is_pending_and_queued_and_ends_the_ticks():
    seen = []

    def stop(coordinator: CheckpointCoordinator) -> None:
        seen.append(coordinator.num_queued_requests)
        coordinator.stop_checkpoint_scheduler()

    coordinator = run_coordinator(CheckpointConfig(interval=1.0), 3.5, lambda n: 10.0, during=stop, then=3.0)
    assert seen == [3]
    [checkpoint] = coordinator.checkpoints  # no more after the stop
    assert checkpoint.status == "FAILED" and checkpoint.failure == CHECKPOINT_COORDINATOR_SUSPEND
    assert coordinator.num_queued_requests == 0


def test_end_to_end_duration_is_whole_milliseconds_of_the_jobmanagers_clock():
    """Flink: the latest acknowledgement's (or the failure's) timestamp minus the trigger
    timestamp, both `System.currentTimeMillis()`; a checkpoint in progress shows it too
    (PendingCheckpointStats), -1 (here None) before any acknowledgement."""
    pending = PendingCheckpoint(1, 1.0266, CheckpointBarrier(1, 1026, CheckpointOptions()), {"a"})
    assert pending.end_to_end_duration_ms is None
    pending.latest_ack_time = 1.0405  # 13.9 ms later, 14 ms apart on the millisecond clock
    assert pending.end_to_end_duration_ms == 14
    assert pending.stats()["duration_ms"] == 14
    pending.status, pending.end_time = "FAILED", 1.5
    assert pending.end_to_end_duration_ms == 474


def test_the_figures_of_a_checkpoint_are_the_subtasks_largest_times_and_summed_bytes():
    """Flink's checkpoint statistics: processed_data sums bytesProcessedDuringAlignment of
    the subtasks (persisted_data their in-flight data); times are per-task maxima here."""
    pending = PendingCheckpoint(1, 1.0, CheckpointBarrier(1, 1000, CheckpointOptions()), set())

    def ack(processed: int, sync_ms: int, async_ms: int) -> SubtaskCheckpointAck:
        metrics = CheckpointMetrics(1, bytes_processed_during_alignment=processed)
        return SubtaskCheckpointAck(1, metrics, 0, ChannelStateSnapshot(), sync_duration_ms=sync_ms,
                                    async_duration_ms=async_ms)

    pending.acks = {"a": ack(300, 0, 4), "b": ack(200, 1, 2)}
    stats = pending.stats()
    assert (stats["processed_bytes"], stats["sync_ms"], stats["async_ms"]) == (500, 1, 4)


def test_a_checkpoint_is_unaligned_in_the_statistics_once_a_subtask_persisted_in_flight_data():
    """Flink (FLINK-31588, FLINK-31959): a subtask's unalignedCheckpoint is
    bytesPersistedDuringAlignment > 0, and the checkpoint's type is unaligned if any
    subtask's is, whatever the options of its barrier."""
    unaligned = CheckpointOptions.for_config("CHECKPOINT", is_exactly_once_mode=True, is_unaligned_enabled=True,
                                             aligned_checkpoint_timeout=0.0)
    pending = PendingCheckpoint(1, 1.0, CheckpointBarrier(1, 1000, unaligned), set())
    empty = SubtaskCheckpointAck(1, CheckpointMetrics(1), 0, ChannelStateSnapshot())
    pending.acks = {"a": empty}
    assert pending.stats()["type"] == "CHECKPOINT"  # nothing was in flight: Flink shows it aligned
    pending.acks["b"] = SubtaskCheckpointAck(1, CheckpointMetrics(1), 0, ChannelStateSnapshot(inputs={"c": [b"x"]}))
    assert pending.stats()["type"] == "UNALIGNED_CHECKPOINT"
