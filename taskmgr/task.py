"""Task: one deployed subtask in a TaskManager, from deployment to release (Flink's `Task`).

Creates the subtask's result partitions and input gates in the TaskManager's shuffle
environment (a channel is local when its producer runs in this TaskManager), builds the
operator chain and record writers, runs the StreamTask, and reports its state. A task
that finishes emits EndOfPartition and leaves its partitions to its consumers; a failed
or cancelled task releases them, a failed one with its failure cause, which cancels the
consumers that read on (Flink's ProducerFailedException); a task whose error has a
CancelTaskError among its causes ends CANCELED, not FAILED.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import numpy as np

from graph import JobGraph, JobVertex
from graph.execution_graph import subtask_name
from shuffle import kernel
from shuffle.api.events import CheckpointBarrier
from shuffle.channel_state import ChannelStateWriter
from shuffle.consumer.local_input_channel import LocalInputChannel
from shuffle.consumer.single_input_gate import SingleInputGate
from shuffle.environment import NettyShuffleEnvironment
from shuffle.errors import CancelTaskError, find_error
from shuffle.partition.result_partition import ResultPartition
from shuffle.partitioner.channel_selectors import create_channel_selector
from shuffle.serialization.record_serializer import RecordSerializer
from shuffle.writer.record_writer import RecordWriter
from taskmgr.deployment import TaskDeploymentDescriptor
from taskmgr.checkpointing.barrier_handlers import create_checkpoint_barrier_handler
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.checkpointing.checkpointed_input_gate import CheckpointedInputGate
from taskmgr.checkpointing.single_checkpoint_barrier_handler import (
    CheckpointBarrierHandler,
    CheckpointMetrics,
    checkpoint_start_delay_ns,
)
from taskmgr.checkpointing.subtask_checkpoint_coordinator import SubtaskCheckpointCoordinator
from taskmgr.checkpointing.task_state import TaskStateSnapshot, channel_key
from taskmgr.execution_state import ExecutionState
from taskmgr.input_processor import StreamInputProcessor
from taskmgr.metrics.mailbox_latency import MailboxLatency
from taskmgr.metrics.task_io_metrics import COUNTERS, INPUT_CHANNEL_COUNTERS, TaskIOMetricGroup
from taskmgr.operators import OperatorChain, build_operator_chain
from taskmgr.operators.base import MAX_CHUNK_TIME, PRIORITY_CHUNK_TIME, OperatorContext, RunControl
from taskmgr.operators.formats import output_format
from taskmgr.operators.records import reads_key_field, synthetic_records
from taskmgr.operators.sources import SourceOperator
from taskmgr.payloads import load_object
from taskmgr.stall_report import describe_wait
from taskmgr.stream_task import AUTO_WATERMARK_INTERVAL_MS, StreamTask
from taskmgr.task_services import TaskServices

#: Subtasks per vertex a source origin id leaves room for (see OperatorContext.origin).
MAX_ORIGIN_SUBTASKS = 1024


def root_cause(exc: BaseException) -> BaseException:
    """The exception itself, or the single exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _ratio(used: int, total: int) -> float:
    return used / total if total else 0.0


#: Flink's reasons for a task to decline a triggered checkpoint.
CHECKPOINT_DECLINED_TASK_NOT_READY = "CHECKPOINT_DECLINED_TASK_NOT_READY"
CHECKPOINT_DECLINED_TASK_CLOSING = "CHECKPOINT_DECLINED_TASK_CLOSING"


class TaskMetrics:
    """A subtask's metric source: Flink's task I/O metrics plus the buffer gauges (spec 7.3)."""

    counters = COUNTERS.union(INPUT_CHANNEL_COUNTERS)
    per_period = False

    def __init__(self, io: TaskIOMetricGroup, partitions: list[ResultPartition],
                 gates: list[SingleInputGate], barrier_handler: CheckpointBarrierHandler | None = None,
                 source_checkpoint_start_delay_ns: Callable[[], int] | None = None) -> None:
        """`source_checkpoint_start_delay_ns`: a source task's start delay of its last
        checkpoint (Flink's source tasks register `checkpointStartDelayNanos` on it).
        As Flink's, a task registers its checkpoint gauges whether or not the job
        checkpoints (`InputProcessorUtil.registerCheckpointMetrics` for a task with inputs,
        `SourceOperatorStreamTask.init`): without checkpoints, and before the first, they
        read 0. `barrier_handler` None: a task with inputs in a job without checkpoints."""
        self.io = io
        self.partitions = partitions
        self.gates = gates
        self.barrier_handler = barrier_handler
        self.source_checkpoint_start_delay_ns = source_checkpoint_start_delay_ns
        self.finished = False

    def on_finished(self) -> None:
        """The task ended: from now on it is idle and its buffers read as unused."""
        self.finished = True
        self.io.idle.mark_start()

    def snapshot(self) -> dict[str, float]:
        io = self.io
        io.num_bytes_out = sum(p.num_bytes_out for p in self.partitions)
        io.num_buffers_out = sum(p.num_buffers_out for p in self.partitions)
        values = io.snapshot()
        values["isBackPressured"] = float(self.is_back_pressured())
        values.update(self._input_channel_counters())
        values.update(self._gauges())
        values.update(self._debloat_gauges())
        return values

    def is_back_pressured(self) -> bool:
        """Flink's task gauge ``isBackPressured`` (`Task.isBackPressured`): some output
        partition has no buffer to give right now, whatever the task is doing (a task busy
        with a record whose output pool just ran dry reads true, before it waits)."""
        return not self.finished and any(not partition.is_available() for partition in self.partitions)

    def _input_channel_counters(self) -> dict[str, float]:
        """Flink's InputChannelMetrics of the task: its channels' counts, by kind."""
        counts = dict.fromkeys(INPUT_CHANNEL_COUNTERS, 0.0)
        for gate in self.gates:
            for channel in gate.channels:
                kind = "Local" if isinstance(channel, LocalInputChannel) else "Remote"
                counts[f"numBytesIn{kind}"] += channel.num_bytes_in
                counts[f"numBuffersIn{kind}"] += channel.num_buffers_in
        return counts

    def _debloat_gauges(self) -> dict[str, float]:
        """Flink registers these per input gate; a task reports its largest (one gate: that gate's)."""
        debloaters = [gate.buffer_debloater for gate in self.gates if gate.buffer_debloater is not None]
        if not debloaters:
            return {}
        return {
            "debloatedBufferSize": float(max(d.last_buffer_size for d in debloaters)),
            "estimatedTimeToConsumeBuffersMs": float(max(d.last_estimated_time_to_consume_ms for d in debloaters)),
        }

    def _gauges(self) -> dict[str, float]:
        if self.finished:
            return dict.fromkeys(("outPoolUsage", "outputQueueLength", "inputQueueLength", "inPoolUsage",
                                  "inputExclusiveBuffersUsage", "inputFloatingBuffersUsage",
                                  "outputQueueSize", "inputQueueSize"), 0.0)
        out_used = out_size = 0
        for partition in self.partitions:
            used, size = partition.out_pool_usage()
            out_used, out_size = out_used + used, out_size + size
        exclusive_used = exclusive_total = floating_used = floating_total = 0
        for gate in self.gates:
            used, total = gate.exclusive_buffers_usage()
            exclusive_used, exclusive_total = exclusive_used + used, exclusive_total + total
            used, total = gate.floating_buffers_usage()
            floating_used, floating_total = floating_used + used, floating_total + total
        handler, source_delay = self.barrier_handler, self.source_checkpoint_start_delay_ns
        checkpoint_gauges = {}
        if handler is not None:
            checkpoint_gauges = {
                "checkpointAlignmentTime": float(handler.alignment_time_ns),
                "checkpointStartDelayNanos": float(handler.latest_start_delay_ns),
            }
        elif source_delay is not None:
            checkpoint_gauges = {"checkpointStartDelayNanos": float(source_delay())}
        elif self.gates:
            checkpoint_gauges = {"checkpointAlignmentTime": 0.0, "checkpointStartDelayNanos": 0.0}
        return checkpoint_gauges | {
            "outPoolUsage": _ratio(out_used, out_size),
            "outputQueueLength": float(sum(p.output_queue_length for p in self.partitions)),
            "inputQueueLength": float(sum(g.input_queue_length for g in self.gates)),
            "inPoolUsage": _ratio(exclusive_used + floating_used, exclusive_total + floating_total),
            "inputExclusiveBuffersUsage": _ratio(exclusive_used, exclusive_total),
            "inputFloatingBuffersUsage": _ratio(floating_used, floating_total),
            "outputQueueSize": float(sum(p.output_queue_size for p in self.partitions)),
            "inputQueueSize": float(sum(g.input_queue_size for g in self.gates)),
        }


class Task:
    """One subtask; `run()` goes through its whole life and never raises (state tells)."""

    def __init__(self, descriptor: TaskDeploymentDescriptor, job_graph: JobGraph,
                 env: NettyShuffleEnvironment, services: TaskServices, run_control: RunControl,
                 on_state_change: Callable[[Task], None]) -> None:
        #: Kept without its channel descriptors: the gates made from them hold what they say
        #: (a 256 x 256 job would keep 65,536 of them).
        self.descriptor = replace(descriptor, input_gates=())
        self._gate_descriptors = descriptor.input_gates
        self.job_graph = job_graph
        self.vertex: JobVertex = job_graph.vertex(descriptor.vertex_id)
        self.name = subtask_name(self.vertex, descriptor.subtask_index)
        self.env = env
        self.services = services
        self.run_control = run_control
        self.on_state_change = on_state_change
        self.state = ExecutionState.DEPLOYING
        self.failure_cause: BaseException | None = None
        self.context: OperatorContext | None = None
        self._stream_task: StreamTask | None = None
        self._source: SourceOperator | None = None
        self._input_processor: StreamInputProcessor | None = None
        self._cancel_scope = kernel.CancelScope()
        #: Cancelled (Flink's cancelExecution); it takes effect once no user code ignores it.
        self.cancel_requested = False
        self._uninterruptible = 0
        #: Set when `run` has ended (its resources released).
        self.ended = kernel.Event()
        self._partitions: list[ResultPartition] = []
        self._gates: list[SingleInputGate] = []
        self._nursery: Any = None
        self._barrier_handler: CheckpointBarrierHandler | None = None
        self.checkpointing: SubtaskCheckpointCoordinator | None = None
        #: Flink's latestAsyncCheckpointStartDelayNanos: of the last checkpoint triggered by RPC.
        self.async_checkpoint_start_delay_ns = 0
        self.checkpoint_costs = CheckpointCosts(**descriptor.job.checkpoint_costs)

    @property
    def execution_id(self) -> str:
        return self.descriptor.execution_id

    def _transition(self, state: ExecutionState, cause: BaseException | None = None) -> None:
        if self.state.is_terminal:
            return
        self.state = state
        self.failure_cause = cause
        self.on_state_change(self)

    async def run(self) -> None:
        """The whole life, cancellable (`cancel`). One coroutine frame around `_run`: every
        time the task waits and resumes, each frame of its stack is resumed."""
        try:
            with self._cancel_scope:
                try:
                    await self._run()
                    self._transition(ExecutionState.FINISHED)
                except Exception as exc:
                    if find_error(exc, CancelTaskError) is not None:
                        # its resources went away or its producer failed (a cause of the error,
                        # as Flink's findThrowable looks): cancelled, not a failure
                        self._transition(ExecutionState.CANCELED)
                    else:
                        self._transition(ExecutionState.FAILED, root_cause(exc))
                finally:
                    self._release()
            if self._cancel_scope.cancelled_caught:
                self._transition(ExecutionState.CANCELED)
        finally:
            self.ended.set()

    def cancel(self) -> None:
        """Cancel the task (Flink's TaskCanceler: cancel, then interrupt the task thread): at
        once, unless user code that ignores interrupts runs; then when it returns."""
        self.cancel_requested = True
        if not self._uninterruptible:
            self._cancel_scope.cancel()

    async def run_uninterruptibly(self, seconds: float) -> None:
        """User code that ignores interrupts for `seconds` (a busy loop, a call that does not
        react to Thread.interrupt): a cancellation waits for it, as Flink's does."""
        self._uninterruptible += 1
        try:
            await kernel.sleep(seconds)
        finally:
            self._uninterruptible -= 1
            if self.cancel_requested and not self._uninterruptible:
                self._cancel_scope.cancel()

    def describe_wait(self) -> str:
        """What the task waits for now, in words (a job that cannot drain reports it)."""
        if self._stream_task is None:
            return f"not running its operators ({self.state.value})"
        return describe_wait(self._stream_task)

    def send_mail(self, action: Callable[[], Awaitable[None]], counted: bool = True) -> bool:
        """Run `action` in the task's mailbox loop; False if the task is not running or
        its mailbox is closed (it is finishing). `counted`: as `StreamTask.send_mail`."""
        if self._stream_task is None or self.state is not ExecutionState.RUNNING:
            return False
        return self._stream_task.send_mail(action, counted)

    # -- checkpoints (Flink's CheckpointableTask) -----------------------------------------------

    def trigger_checkpoint(self, barrier: CheckpointBarrier) -> str | None:
        """The coordinator's trigger (Flink's `triggerCheckpointAsync`), in the mailbox; the
        reason to decline it (Flink's) if the task cannot take it now, else None. A source,
        or a task whose inputs have all ended, checkpoints at once; a task with inputs still
        open (its predecessors finished, the barrier will not come through them) hands the
        barrier to its handler for each open channel."""
        async def trigger() -> None:
            processor = self._input_processor
            if processor is not None and not processor.is_finished:
                for channel in processor.unfinished_channels():
                    self._barrier_handler.process_barrier(barrier, channel, is_rpc_triggered=True)
                return
            start_delay = checkpoint_start_delay_ns(self.run_control.job_time(), barrier.timestamp)
            self.async_checkpoint_start_delay_ns = start_delay
            metrics = CheckpointMetrics(barrier.id, start_delay)
            self._perform_checkpoint(barrier, metrics, wait_for_inputs=False)
        if self.checkpointing is None or self._stream_task is None or self.state is not ExecutionState.RUNNING:
            return CHECKPOINT_DECLINED_TASK_NOT_READY
        if not self._stream_task.send_mail(trigger):
            return CHECKPOINT_DECLINED_TASK_CLOSING  # finishing: its mailbox is closed
        return None

    def _perform_checkpoint(self, barrier: CheckpointBarrier, metrics: CheckpointMetrics,
                            wait_for_inputs: bool) -> None:
        self._stream_task.checkpoint_performed(barrier.id)
        self.checkpointing.checkpoint_state(barrier, metrics, wait_for_inputs=wait_for_inputs)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed: it may be this task's final checkpoint.
        Flink's TaskExecutor.confirmCheckpoint then also notifies the task of the checkpoint
        it subsumed (or none yet), a mail of its own that changes nothing here."""
        stream_task = self._stream_task

        async def notify() -> None:
            stream_task.notify_checkpoint_complete(checkpoint_id)

        async def subsumed() -> None:
            """Operators would drop state kept for the subsumed checkpoint: ours keep none."""
        if stream_task is not None:
            self.send_mail(notify)
            self.send_mail(subsumed)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if self.checkpointing is not None:
            self.checkpointing.notify_checkpoint_aborted(checkpoint_id)

    def init_inputs_checkpoint(self, barrier: CheckpointBarrier) -> None:
        self.checkpointing.init_inputs_checkpoint(barrier)

    def alignment_started(self, checkpoint_id: int, start_delay_ns: int) -> None:
        if self.env.tracer.enabled:
            self.env.tracer.emit("alignment_started", task=self.name, checkpoint=checkpoint_id,
                                 start_delay_ms=start_delay_ns / 1e6)

    def trigger_checkpoint_on_barrier(self, barrier: CheckpointBarrier, metrics: CheckpointMetrics) -> None:
        tracer = self.env.tracer
        if tracer.enabled:
            tracer.emit("alignment_completed", task=self.name, checkpoint=barrier.id,
                        alignment_ms=metrics.alignment_duration_ns / 1e6, start_delay_ms=metrics.start_delay_ns / 1e6,
                        unaligned=barrier.options.is_unaligned)
        self._perform_checkpoint(barrier, metrics, wait_for_inputs=True)

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: str) -> None:
        self.checkpointing.abort_checkpoint_on_barrier(checkpoint_id, reason)

    def inputs_finished(self, checkpoint_id: int) -> None:
        self.checkpointing.inputs_finished(checkpoint_id)

    def inputs_failed(self, checkpoint_id: int, reason: str) -> None:
        self.checkpointing.inputs_failed(checkpoint_id, reason)

    def _register_timer(self, delay: float, action: Callable[[], None]) -> Callable[[], None]:
        """Run `action` in the mailbox after `delay` (the handler's alignment timer)."""
        scope = kernel.CancelScope()

        async def timer() -> None:
            with scope:
                await kernel.sleep(delay)
                async def mail() -> None:
                    action()
                self.send_mail(mail)
        self._nursery.start_soon(timer)
        return scope.cancel

    def _create_checkpointing(self, chain: OperatorChain) -> None:
        checkpointing = self.job_graph.checkpointing
        if checkpointing is None or not checkpointing.enabled:
            return
        writer = ChannelStateWriter()
        for gate in self._gates:
            gate.set_channel_state_writer(writer)
        processor = self._input_processor
        responder = self.services.checkpoint_responder

        def snapshot_state() -> dict:
            return {k: v for op in chain.operators for k, v in op.snapshot_state().items()}

        self.checkpointing = SubtaskCheckpointCoordinator(
            self.name, chain.outputs, self.checkpoint_costs, writer,
            snapshot_state,
            prepare_input_snapshot=(lambda cid: processor.prepare_input_snapshot(writer, cid)) if processor else
            (lambda cid: None),
            run_in_mailbox=self._stream_task.run_later,
            spawn=lambda fn: self._nursery.start_soon(fn),
            acknowledge=lambda ack: responder.acknowledge(self, ack),
            decline=lambda cid, reason: responder.decline(self, cid, reason),
            job_time=self.run_control.job_time, tracer=self.env.tracer,
            formats={channel.partition_id: processor.formats[gate.gate_index]
                     for gate in self._gates for channel in gate.channels} if processor else {})
        self._stream_task.checkpoints_after_tasks_finish = checkpointing.config.checkpoints_after_tasks_finish
        self._stream_task.wait_for_pending_checkpoints = self.checkpointing.wait_for_pending_checkpoints

    def stop_source(self) -> None:
        """The run is over (the job drains): stop a source task's source. No checkpoint
        comes any more, so no task waits for a final one."""
        if self._stream_task is not None:
            self._stream_task.final_checkpoint_completed.set()
            self._stream_task.wake()
        if self._source is not None:
            self._source.stop()

    async def _create_input_gates(self) -> None:
        gate_descriptors, self._gate_descriptors = self._gate_descriptors, ()
        for gate_descriptor in gate_descriptors:
            gate = self.env.create_input_gate(gate_descriptor.gate_index, self.name, gate_descriptor.channels)
            self._gates.append(gate)
            await gate.setup()

    async def _run(self) -> None:
        self._transition(ExecutionState.INITIALIZING)
        descriptor, vertex, env = self.descriptor, self.vertex, self.env
        io = TaskIOMetricGroup()
        for produced in descriptor.produced_partitions:
            partition = env.create_result_partition(produced.partition_id, produced.num_subpartitions,
                                                    produced.partition_type, self.name)
            partition.hard_back_pressure_timer = io.hard_backpressure
            self._partitions.append(partition)
        await self._create_input_gates()
        ctx = OperatorContext(
            task_name=self.name, vertex_name=vertex.name, subtask_index=descriptor.subtask_index,
            parallelism=vertex.parallelism, origin=vertex.index * MAX_ORIGIN_SUBTASKS + descriptor.subtask_index,
            seed=descriptor.job.seed, run=self.run_control, io=io, services=self.services)
        self.context = ctx
        io.mailbox_latency = MailboxLatency(ctx.rng("mailbox-latency"))
        writers = [self._record_writer(partition, index, ctx)
                   for index, partition in zip((p.data_set_index for p in descriptor.produced_partitions),
                                               self._partitions)]
        timeouts = [writer.timeout for writer in writers if writer.timeout >= 0]
        ctx.flush_timeout = min(timeouts) if timeouts else -1.0
        chain = build_operator_chain(vertex, ctx, writers, env.config.buffer_size)
        self._source = chain.source
        ctx.max_step_time = self._max_step_time()
        if self._source is None:
            self._input_processor = self._create_input_processor(chain, io, ctx)
        task_input = self._source or self._input_processor
        self._stream_task = StreamTask(task_input, writers, io, priority=self._input_processor, steps=ctx)
        self._create_checkpointing(chain)
        restore = self._task_restore()
        if restore is not None:
            for operator in chain.operators:
                operator.restore_state(restore.operator_state)
            if self._input_processor is not None:
                self._input_processor.restore_input_state(restore.input_state)
        source_delay = (lambda: self.async_checkpoint_start_delay_ns) if self._source is not None else None
        metrics = TaskMetrics(io, self._partitions, self._gates, self._barrier_handler, source_delay)
        self.services.register_metrics(vertex.name, descriptor.subtask_index, metrics)
        self._transition(ExecutionState.RUNNING)
        try:
            async with kernel.open_nursery() as nursery:
                self._nursery = nursery
                for gate in self._gates:
                    nursery.start_soon(gate.request_partitions)
                overshoot = env.config.flusher_sleep_overshoot if kernel.current_mode() == "sim" else 0.0
                # Flink's OutputFlusher thread starts as its task is built, so the flushers of
                # a job deployed at once are as far apart as their tasks' starts; where that
                # falls against the records is arbitrary: one draw for the job
                flush_phase = float(ctx.job_rng("output-flusher").random())
                for writer in writers:
                    nursery.start_soon(writer.run_output_flusher, flush_phase * max(writer.timeout, 0), overshoot)
                if restore is not None:
                    await self._restore_output_state(restore)
                if env.config.debloat and self._gates:
                    nursery.start_soon(self._stream_task.run_buffer_debloater, self._gates, env.config.debloat_period)
                nursery.start_soon(self._stream_task.run_mailbox_latency_measurement, ctx)
                if self._source is not None and self.job_graph.job_type == "STREAMING":
                    nursery.start_soon(self._stream_task.run_periodic_watermark_emits, AUTO_WATERMARK_INTERVAL_MS)
                self._stream_task.restore(len(self._gates))
                await self._stream_task.invoke()
                for partition in self._partitions:
                    partition.finish()
                nursery.cancel_scope.cancel()
        finally:
            metrics.on_finished()

    def _task_restore(self) -> TaskStateSnapshot | None:
        """The checkpoint state this subtask starts from (None: it starts from the beginning)."""
        data = self.descriptor.task_restore
        return None if data is None else load_object(data, "task restore")

    async def _restore_output_state(self, restore: TaskStateSnapshot) -> None:
        """The in-flight output data of the restored checkpoint goes out before any record."""
        for partition in self._partitions:
            for index in range(partition.num_subpartitions):
                chunks = restore.output_state.get(channel_key(partition.partition_id, index))
                if chunks:
                    await partition.add_recovered_state(index, chunks)

    def _record_writer(self, partition: ResultPartition, data_set_index: int, ctx: OperatorContext) -> RecordWriter:
        data_set = self.vertex.produced_data_sets[data_set_index]
        producer = data_set.consumers[0].stream_edges[0].source
        spec = data_set.partitioner
        views = None if reads_key_field(spec.key_selector) else synthetic_records
        selector = create_channel_selector(spec.name, key_selector=spec.key_selector,
                                           max_parallelism=spec.max_parallelism,
                                           custom_partitioner=spec.custom_partitioner,
                                           rng=self._partitioner_rng(data_set.id, ctx), record_views=views)
        # the producing operator's timeout, as the compiler resolved it (Flink's per-output one)
        return RecordWriter(partition, selector, RecordSerializer(output_format(producer)), producer.buffer_timeout)

    def _partitioner_rng(self, data_set_id: str, ctx: OperatorContext) -> np.random.Generator:
        """Rebalance's start channel and shuffle's choices: drawn anew by each attempt, as
        Flink's `ThreadLocalRandom` in a restarted task (the same for the same seed here; the
        first attempt keeps the draws runs had before restarts drew their own)."""
        attempt = self.descriptor.job.attempt
        return ctx.rng(f"partitioner-{data_set_id}" + (f"-attempt-{attempt}" if attempt else ""))

    def _max_step_time(self) -> float:
        """How long a step of this task may take: short where a checkpoint would otherwise
        wait for it (Flink waits for the record in hand): a source's trigger is a mail, at
        every checkpoint; an unaligned barrier overtakes a task's input."""
        checkpointing = self.job_graph.checkpointing
        if checkpointing is None or not checkpointing.enabled:
            return MAX_CHUNK_TIME
        if self._source is not None or checkpointing.config.unaligned:
            return PRIORITY_CHUNK_TIME
        return MAX_CHUNK_TIME

    def _create_input_processor(self, chain: OperatorChain, io: TaskIOMetricGroup,
                                ctx: OperatorContext) -> StreamInputProcessor:
        by_input: dict[int, list[SingleInputGate]] = {}
        formats = {}
        for gate, edge in zip(self._gates, self.vertex.inputs, strict=True):
            by_input.setdefault(edge.type_number, []).append(gate)
            formats[gate.gate_index] = output_format(edge.stream_edges[0].source)
        checkpointing = self.job_graph.checkpointing
        if checkpointing is not None and checkpointing.enabled:
            config = checkpointing.config
            self._barrier_handler = create_checkpoint_barrier_handler(
                config, self, self._gates, sum(gate.num_channels for gate in self._gates),
                self.run_control.job_time, self._register_timer)
        inputs = [CheckpointedInputGate(gates, input_index, self._barrier_handler, self.env.tracer, self.name)
                  for input_index, gates in by_input.items()]
        return StreamInputProcessor(inputs, formats, chain.head, io, ctx)

    def release_partitions(self, cause: BaseException | None = None) -> None:
        """Release what this task produced (consumers that still read it are cancelled);
        `cause`: the task failed with it, which its remote consumers are sent."""
        for partition in self._partitions:
            partition.release(cause)

    def _release(self) -> None:
        if self._source is not None:
            self._source.close()
        if self._input_processor is not None:
            self._input_processor.close()
        for gate in self._gates:
            gate.close()
        if self.state is not ExecutionState.FINISHED:
            # Flink's failAllResultPartitions: with the task's failure cause (none if cancelled)
            self.release_partitions(self.failure_cause)
        for partition in self._partitions:
            partition.close()
