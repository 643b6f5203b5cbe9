"""A task's side of a checkpoint (Flink's `SubtaskCheckpointCoordinatorImpl`, spec 5.1).

`checkpoint_state` runs on the task's thread when the task takes a checkpoint (a source on
the coordinator's trigger, other tasks when their barrier handler decides): it broadcasts
the barrier through the task's outputs (a priority event if unaligned, which captures the
overtaken output data; an output whose edge does not support unaligned checkpoints forces
it to align, see `RecordWriterOutput.broadcast_event`), arms the output-side alignment
timer of a timeoutable barrier, and takes the synchronous snapshot. A task that aligned on
such forced barriers takes the checkpoint as it was before (Flink's
`withUnalignedSupported`). The asynchronous part waits until the in-flight data is complete
(all barriers in; every timeoutable barrier sent or timed out), uploads state and in-flight
data at the configured bandwidth and acknowledges to the JobManager. A checkpoint aborted
before its barrier came is answered with a CancelCheckpointMarker downstream instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shuffle import kernel
from shuffle.api.events import AbstractEvent, AlignmentType, CancelCheckpointMarker, CheckpointBarrier
from shuffle.channel_state import ChannelStateSnapshot, ChannelStateWriter
from shuffle.trace import Tracer
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.checkpointing.single_checkpoint_barrier_handler import CheckpointMetrics, alignment_timer_delay
from taskmgr.operators.base import RecordWriterOutput


def elapsed_millis(start: float, end: float) -> int:
    """Flink's `(System.nanoTime() - started) / 1_000_000` between two times (s)."""
    return round((end - start) * 1e9) // 1_000_000


@dataclass
class SubtaskCheckpointAck:
    """What a subtask acknowledges for one checkpoint."""

    checkpoint_id: int
    metrics: CheckpointMetrics
    #: Managed and raw, keyed and operator state (the `state_size` cost).
    operator_state_bytes: int
    channel_state: ChannelStateSnapshot
    #: Operator state as the verifying accounting needs it (source positions, sink seqs).
    operator_state: dict[str, Any] = field(default_factory=dict)
    #: Flink's sync and async durations: elapsed nanoseconds in whole milliseconds, truncated.
    sync_duration_ms: int = 0
    async_duration_ms: int = 0
    #: Record format per consumed partition id (to read the persisted input data back).
    formats: dict[str, Any] = field(default_factory=dict)

    @property
    def persisted_bytes(self) -> int:
        return self.channel_state.persisted_bytes

    @property
    def unaligned_checkpoint(self) -> bool:
        """Flink's `CheckpointMetrics.getUnalignedCheckpoint()`: in-flight data was persisted
        (`bytesPersistedDuringAlignment > 0`), however the barrier came."""
        return self.persisted_bytes > 0

    @property
    def state_bytes(self) -> int:
        """Flink's `OperatorSubtaskState.getStateSize()`: the operator state plus the
        persisted in-flight data (input channel and result subpartition state)."""
        return self.operator_state_bytes + self.persisted_bytes


class SubtaskCheckpointCoordinator:
    def __init__(self, task_name: str, outputs: Sequence[RecordWriterOutput], costs: CheckpointCosts,
                 writer: ChannelStateWriter, snapshot_state: Callable[[], dict[str, Any]],
                 prepare_input_snapshot: Callable[[int], None],
                 run_in_mailbox: Callable[[Callable[[], Awaitable[None]]], None],
                 spawn: Callable[[Callable[[], Awaitable[None]]], None],
                 acknowledge: Callable[[SubtaskCheckpointAck], Awaitable[None]],
                 decline: Callable[[int, str], Awaitable[None]],
                 job_time: Callable[[], float], tracer: Tracer, formats: dict[str, Any] | None = None) -> None:
        self.task_name = task_name
        self.formats = formats or {}
        self.outputs = list(outputs)
        self.partitions = [output.writer.partition for output in self.outputs]
        self.costs = costs
        self.writer = writer
        self.snapshot_state = snapshot_state
        self.prepare_input_snapshot = prepare_input_snapshot
        self.run_in_mailbox = run_in_mailbox
        self.spawn = spawn
        self.acknowledge = acknowledge
        self.decline = decline
        self.job_time = job_time
        self.tracer = tracer
        self.aborted: set[int] = set()
        self.last_checkpoint_id = -1
        self._inputs_done: dict[int, kernel.Event] = {}
        #: Checkpoints taken whose in-flight input data will never be complete, and why.
        self._inputs_failures: dict[int, str] = {}
        #: Checkpoints taken whose asynchronous part has not ended yet.
        self._pending: set[int] = set()
        self._pending_changed = kernel.Event()
        for partition in self.partitions:
            partition.set_channel_state_writer(writer)

    # -- from the barrier handler -----------------------------------------------------------

    def init_inputs_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """A checkpoint that may persist in-flight data starts at this task: open it, and
        if it is unaligned persist the unread input (Flink's `initInputsCheckpoint`)."""
        if barrier.options.is_unaligned or barrier.options.is_timeoutable:
            self.writer.start(barrier.id)
        if barrier.options.is_unaligned:
            self.prepare_input_snapshot(barrier.id)

    def inputs_finished(self, checkpoint_id: int) -> None:
        """All barriers of `checkpoint_id` are in (or it was aborted): input data is complete."""
        self._inputs_event(checkpoint_id).set()

    def inputs_failed(self, checkpoint_id: int, reason: str) -> None:
        """The barrier handler stopped waiting for the barriers of `checkpoint_id` (Flink
        completes its allBarriersReceivedFuture exceptionally). If the task took it (an
        unaligned checkpoint, triggered on its first barrier), Flink aborts its channel state
        with that exception, so its asynchronous part fails and declines it for `reason`
        (AsyncCheckpointRunnable). One the handler aborted itself is declined already."""
        if checkpoint_id not in self._pending or checkpoint_id in self.aborted:
            return
        self._inputs_failures[checkpoint_id] = reason
        self.writer.abort(checkpoint_id)
        self.inputs_finished(checkpoint_id)

    def _inputs_event(self, checkpoint_id: int) -> kernel.Event:
        event = self._inputs_done.get(checkpoint_id)
        if event is None:
            event = self._inputs_done[checkpoint_id] = kernel.Event()
        return event

    # -- taking the checkpoint ----------------------------------------------------------------

    def checkpoint_state(self, barrier: CheckpointBarrier, metrics: CheckpointMetrics,
                         wait_for_inputs: bool) -> None:
        """Run steps 1-6 of spec 5.1 for this task (on the task's thread)."""
        checkpoint_id = barrier.id
        self.last_checkpoint_id = max(self.last_checkpoint_id, checkpoint_id)
        if checkpoint_id in self.aborted:
            self._broadcast(CancelCheckpointMarker(checkpoint_id))
            return
        if barrier.options.alignment is AlignmentType.FORCED_ALIGNED:
            # aligned on inputs that forced it; its own outputs may take it as it was
            barrier = barrier.with_options(barrier.options.with_unaligned_supported())
            self.init_inputs_checkpoint(barrier)
        options = barrier.options
        if options.is_unaligned or options.is_timeoutable:  # Flink's needsChannelState()
            self.writer.start(checkpoint_id)
        self._broadcast(barrier, is_priority=options.is_unaligned)
        if self.tracer.enabled:
            self.tracer.emit("barrier_sent", task=self.task_name, checkpoint=checkpoint_id,
                             unaligned=options.is_unaligned)
        if options.is_timeoutable:
            delay = alignment_timer_delay(self.job_time(), barrier)
            self.spawn(lambda: self._output_alignment_timer(checkpoint_id, delay))
        operator_state = self.snapshot_state()
        if not wait_for_inputs:
            self.inputs_finished(checkpoint_id)
        sync_start = self.job_time()
        self._pending.add(checkpoint_id)

        async def synchronous_part() -> None:
            await kernel.sleep(self.costs.sync_snapshot)
            sync_ms = elapsed_millis(sync_start, self.job_time())
            self.spawn(lambda: self._asynchronous_part(checkpoint_id, metrics, operator_state, sync_ms))

        self.run_in_mailbox(synchronous_part)

    def _broadcast(self, event: AbstractEvent, is_priority: bool = False) -> None:
        for output in self.outputs:
            partition = output.writer.partition
            if not partition.is_finished and not partition.is_released:
                output.broadcast_event(event, is_priority)

    async def _output_alignment_timer(self, checkpoint_id: int, delay: float) -> None:
        await kernel.sleep(delay)
        for partition in self.partitions:
            if not partition.is_released:
                partition.aligned_barrier_timeout(checkpoint_id)

    async def wait_for_pending_checkpoints(self) -> None:
        """Flink's `waitForPendingCheckpoints`: until every checkpoint the task took has
        been acknowledged (or given up), before a finishing task ends."""
        while self._pending:
            await self._pending_changed.wait()

    async def _asynchronous_part(self, checkpoint_id: int, metrics: CheckpointMetrics,
                                 operator_state: dict[str, Any], sync_ms: int) -> None:
        try:
            await self._acknowledge(checkpoint_id, metrics, operator_state, sync_ms)
        finally:
            self._pending.discard(checkpoint_id)
            self._pending_changed.set()
            self._pending_changed = kernel.Event()

    async def _acknowledge(self, checkpoint_id: int, metrics: CheckpointMetrics,
                           operator_state: dict[str, Any], sync_ms: int) -> None:
        start = self.job_time()
        await self._inputs_event(checkpoint_id).wait()
        del self._inputs_done[checkpoint_id]
        await self.writer.wait_outputs(checkpoint_id)
        reason = self._inputs_failures.pop(checkpoint_id, None)
        if reason is not None:
            await self.decline(checkpoint_id, reason)
            return
        if checkpoint_id in self.aborted:
            return
        channel_state = self.writer.take(checkpoint_id)
        ack = SubtaskCheckpointAck(checkpoint_id, metrics, self.costs.state_size, channel_state, operator_state,
                                   sync_ms, formats=self.formats)
        await kernel.sleep(self.costs.upload_time(ack.state_bytes))
        ack.async_duration_ms = elapsed_millis(start, self.job_time())
        await self.acknowledge(ack)

    # -- aborts ---------------------------------------------------------------------------------

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: str) -> None:
        """The handler gave up on `checkpoint_id`: tell downstream and the JobManager."""
        self.notify_checkpoint_aborted(checkpoint_id)
        self._broadcast(CancelCheckpointMarker(checkpoint_id))
        self.spawn(lambda: self.decline(checkpoint_id, reason))

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.aborted.add(checkpoint_id)
        self.writer.abort(checkpoint_id)
        self.inputs_finished(checkpoint_id)
