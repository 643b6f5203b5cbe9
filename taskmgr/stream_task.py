"""StreamTask: the mailbox loop of one task, and where its time goes (spec 7.1).

Each turn first checks the output: if a record writer is not available the task waits
for it (soft back-pressure), and only then takes the next input. When the input has
nothing, the task waits for it (idle). A writer blocked on a buffer inside a record is
hard back-pressure (timed by the partition). Everything else is busy time.
Sources run the same loop with the source operator as input.

The end, as Flink 2.x's (FLIP-147): at the end of data (`endData`) the task sends
EndOfData downstream; after the end of input, with checkpoints after tasks finish on
(`execution.checkpointing.checkpoints-after-tasks-finish`, default true), it keeps
taking mails (checkpoints, notifications) until its consumers have processed all its
records and a checkpoint it took after its end of data has completed (its final
checkpoint, `afterInvoke`); then it refuses new mails, runs those queued, and waits for
the acknowledgements of the checkpoints it started. The Task then sends EndOfPartition.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import numpy as np

from shuffle import kernel
from shuffle.api.events import EndOfData, StopMode
from shuffle.consumer.single_input_gate import SingleInputGate
from shuffle.writer.record_writer import RecordWriter
from taskmgr.metrics.mailbox_latency import rest_of_record
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.processing_time import absolute_time_millis, timer_delay
from taskmgr.task_input import InputStatus, TaskInput


#: Turns of the loop after which a task lets others run even if it never had to wait.
YIELD_EVERY = 32
#: Flink's `MailboxMetricsController.defaultLatencyMeasurementInterval` (ms).
MAILBOX_LATENCY_MEASUREMENT_INTERVAL_MS = 1000
#: Flink's `pipeline.auto-watermark-interval` default (ms): a streaming job's sources
#: emit periodic watermarks this often; a BATCH job's do not.
AUTO_WATERMARK_INTERVAL_MS = 200


class PriorityInput(Protocol):
    """Inputs whose priority events (unaligned barriers) the mailbox takes between records,
    also while the task is back-pressured (Flink's "process priority event" mail)."""

    @property
    def has_priority_events(self) -> bool: ...

    async def wait_priority_event(self) -> None: ...

    def process_priority_events(self) -> None: ...


class StepClock(Protocol):
    """The cost of a record of the task's current (or last) step through its chain (s;
    the head operator's `OperatorContext`), and the subtask's random draws."""

    step_cost: float

    def rng(self, purpose: str) -> np.random.Generator: ...


class StreamTask:
    def __init__(self, task_input: TaskInput, writers: Sequence[RecordWriter], io: TaskIOMetricGroup,
                 priority: PriorityInput | None = None, steps: StepClock | None = None) -> None:
        self.input = task_input
        self.priority = priority
        #: The task's steps (None: a mail counts as queued until it runs, `mailbox_size`).
        self._steps = steps
        self._mail_rng: np.random.Generator | None = None
        self.writers = list(writers)
        self.io = io
        self._wait_scope: kernel.CancelScope | None = None  # an idle or back-pressured wait
        #: Actions for the task's own thread, run between records: Flink's mails (True), and
        #: injected faults (False: none of Flink's), in the order they came, each with the
        #: time by which Flink's loop would have taken it (`_flink_takes_by`).
        self._mail: deque[tuple[Callable[[], Awaitable[None]], bool, float]] = deque()
        #: Follow-ups of the work in hand (a checkpoint's synchronous part), which Flink runs
        #: within the record or mail that started them: before any other mail.
        self._follow_ups: deque[Callable[[], Awaitable[None]]] = deque()
        #: Whether the loop runs mails now, and since when (the mailbox latency's measurement).
        self._running_mails = False
        self._mails_started = 0.0
        self._closed = False  # the mailbox refuses new mails (Flink's prepareClose)
        #: Flink's areCheckpointsWithFinishedTasksEnabled (checkpointing on, option on).
        self.checkpoints_after_tasks_finish = False
        #: Waits until the checkpoints the task started have been acknowledged.
        self.wait_for_pending_checkpoints: Callable[[], Awaitable[None]] | None = None
        self.end_of_data_received = False
        #: The first checkpoint taken after the end of data: one of its id or above must
        #: complete before the task finishes.
        self.final_checkpoint_min_id: int | None = None
        self.final_checkpoint_completed = kernel.Event()
        if io is not None:
            io.register_mailbox_size_supplier(self.mailbox_size)

    def mailbox_size(self) -> int:
        """Flink's `mailboxQueueSize`: the mails waiting to run (`TaskMailboxImpl.size()`),
        with the "process priority event" mail of a priority event not taken yet; neither a
        follow-up of the work in hand nor an injected fault is one of Flink's mails. A mail
        that came during a step of records counts until Flink's loop would have taken it,
        after the record in progress (`_flink_takes_by`), not until our step ends."""
        size = 0
        now = kernel.current_time()
        for _, is_mail, taken_by in self._mail:
            size += is_mail and now < taken_by
        priority = self.priority
        return size + (priority is not None and priority.has_priority_events)

    def restore(self, num_input_gates: int) -> None:
        """Flink's `restoreInternal` runs the mailbox loop until the task's state and inputs
        are recovered: a mail per input gate requests its partitions, and the control mail
        of `suspend()` ends the loop. Nothing is recovered here (the gates request their
        partitions as the task starts), but the mail counter counts those mails."""
        self.io.num_mails_processed += num_input_gates + 1

    def send_mail(self, action: Callable[[], Awaitable[None]], counted: bool = True) -> bool:
        """Run `action` in the mailbox loop before the next record (waking an idle task);
        False once the mailbox is closed (the task is finishing). `counted=False`: not one
        of Flink's mails (an injected fault), so `mailboxMails` does not count it."""
        if self._closed:
            return False
        self._queue(action, counted)
        return True

    def run_later(self, action: Callable[[], Awaitable[None]]) -> None:
        """Queue a follow-up of the task's own thread (a checkpoint's synchronous part,
        which Flink runs within the mail or record that started it, so no mail of its
        own): it runs as that record or mail ends, before any other mail, and also while a
        closed mailbox drains."""
        self._follow_ups.append(action)
        self.wake()

    def _queue(self, action: Callable[[], Awaitable[None]], is_mail: bool) -> None:
        self._mail.append((action, is_mail, self._flink_takes_by()))
        self.wake()

    def _in_step(self) -> bool:
        """Busy with a step of records: neither waiting (idle, back-pressured) nor running mails."""
        io = self.io
        return not (io.idle.is_measuring or io.soft_backpressure.is_measuring or self._running_mails)

    def _flink_takes_by(self) -> float:
        """When Flink's loop would take a mail sent now: a task busy with records takes it
        after the rest of the record in progress (drawn as for `mailboxLatencyMs`: ours run
        in steps of several records, each exactly its cost); one that waits, runs mails or
        is blocked mid-record on an output buffer, no sooner than ours does (infinity)."""
        steps = self._steps
        if steps is None or not self._in_step() or self.io.hard_backpressure.is_measuring:
            return math.inf
        if self._mail_rng is None:
            self._mail_rng = steps.rng("mailbox-queue")
        return kernel.current_time() + rest_of_record(self._mail_rng, steps.step_cost)

    # -- checkpoints after the end of data (Flink's StreamTask, FLIP-147) -----------------------

    def checkpoint_performed(self, checkpoint_id: int) -> None:
        """The task takes checkpoint `checkpoint_id` (Flink's performCheckpoint)."""
        if self.end_of_data_received and self.final_checkpoint_min_id is None:
            self.final_checkpoint_min_id = checkpoint_id

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.final_checkpoint_min_id is not None and checkpoint_id >= self.final_checkpoint_min_id:
            self.final_checkpoint_completed.set()

    def end_data(self) -> None:
        """Flink's `endData(DRAIN)`: every record is out. EndOfData follows them to every
        consumer, which answers once it has processed them all."""
        self.end_of_data_received = True
        for writer in self.writers:
            writer.partition.broadcast_event(EndOfData(StopMode.DRAIN))
            writer.flush_all()

    async def after_invoke(self) -> None:
        """Flink's `afterInvoke`: wait (taking mails) for the final checkpoint and for the
        consumers' acknowledgement of every record; close the mailbox and run what is in it."""
        waiting = self.end_of_data_received and self.checkpoints_after_tasks_finish
        if waiting:
            conditions = [writer.partition.all_data_processed for writer in self.writers]
            await self._run_mails_until(conditions + [self.final_checkpoint_completed])
        self.io.num_mails_processed += 1  # allActionsCompleted(), a control mail, ends the loop
        self._closed = True
        await self._run_mails()
        if waiting and self.wait_for_pending_checkpoints is not None:
            await self.wait_for_pending_checkpoints()

    async def _run_mails(self, batch: bool = False) -> None:
        """Run the follow-ups of the work in hand, then the mails, each mail's follow-ups
        after it, counting the mails (not follow-ups, not faults) as Flink's
        `numMailsProcessed` (the `mailboxMailsPerSecond` meter). `batch`: only the mails
        queued now, as Flink's loop between records takes a batch of them
        (`TaskMailboxImpl.createBatch`); those that come meanwhile wait for the next record.
        Else also those (a suspended default action's, or a closing task's, mailbox)."""
        mail, follow_ups, io = self._mail, self._follow_ups, self.io
        self._running_mails = True
        self._mails_started = kernel.current_time()
        try:
            while follow_ups:
                await follow_ups.popleft()()
            left = len(mail) if batch else -1
            while mail and left:
                left -= 1
                action, is_mail, _ = mail.popleft()
                io.num_mails_processed += is_mail
                await action()
                while follow_ups:
                    await follow_ups.popleft()()
        finally:
            self._running_mails = False

    async def _run_mails_until(self, conditions: Sequence[kernel.Event]) -> None:
        """Run mails until every event of `conditions` is set. No timer runs while waiting:
        Flink suspends the default action at END_OF_INPUT without one, so this wait (for the
        final checkpoint) counts as busy time, as busyTimeMsPerSecond = 1000 - idle - back-pressured."""
        while True:
            await self._run_mails()
            unmet = [event.wait for event in conditions if not event.is_set()]
            if not unmet:
                return
            try:
                with kernel.CancelScope() as self._wait_scope:
                    await kernel.wait_any(unmet)
            finally:
                self._wait_scope = None

    async def run_buffer_debloater(self, gates: Sequence[SingleInputGate], period: float) -> None:
        """Flink's `scheduleBufferDebloater`: every `period` (a timer mail, `_run_timer_mails`)
        every gate recalculates its buffer size."""
        async def debloat() -> None:
            for gate in gates:
                gate.trigger_debloating()

        await self._run_timer_mails(round(period * 1000), lambda: debloat)

    async def run_mailbox_latency_measurement(self, steps: StepClock) -> None:
        """Flink's `MailboxMetricsController`: every task measures its mailbox's latency with
        a timer mail every `MAILBOX_LATENCY_MEASUREMENT_INTERVAL_MS` (1,001 ms apart while the
        mailbox is free) into `mailboxLatencyMs` (taskmgr.metrics.mailbox_latency). Like every
        mail it also ends an idle or soft back-pressured period of the task, so Flink's
        longest back-pressured period (`maxSoftBackPressureTimeMs`) is never much above it."""
        await self._run_timer_mails(MAILBOX_LATENCY_MEASUREMENT_INTERVAL_MS, lambda: self._latency_measurement(steps))

    def _latency_measurement(self, steps: StepClock) -> Callable[[], Awaitable[None]]:
        """The measurement mail, sent now (Flink's `measureMailboxLatency`).

        How long Flink's mail would wait: a task that waits (idle, back-pressured) or runs
        mails when the timer fires takes it as soon as its loop gets to it; a task busy with
        records, after the rest of the record in progress (`steps`: its cost; ours run in
        steps of several records), plus what blocked it meanwhile (an output buffer asked
        for mid-record) and the mails queued before it."""
        io = self.io
        sent = kernel.current_time()
        in_step = self._in_step()
        blocked_before = io.hard_backpressure.accumulated()

        async def measure() -> None:
            """The measurement itself (a reading of the clock) costs no modelled time."""
            latency = io.mailbox_latency
            if latency is None:
                return
            now = kernel.current_time()
            waited = now - sent
            if in_step:
                blocked = io.hard_backpressure.accumulated() - blocked_before
                waited = latency.rest_of_record(steps.step_cost) + blocked + (now - self._mails_started)
            latency.record(sent, waited)

        return measure

    async def run_periodic_watermark_emits(self, interval_ms: int) -> None:
        """A FLIP-27 source's `ProgressiveTimestampsAndWatermarks`: a mail every `interval_ms`
        (`pipeline.auto-watermark-interval`, 200 ms by default; a fixed delay, no timer's
        extra millisecond) that emits the periodic watermark. No watermark is modelled (no
        event time here); the mail still ends the source's idle or soft back-pressured
        period, so a back-pressured Flink source reads `maxSoftBackPressureTimeMs` ~200."""
        async def emit_watermark() -> None:
            """Nothing to emit: records carry no event time here."""

        while True:
            await kernel.sleep(interval_ms / 1000)
            if not self.send_mail(emit_watermark):
                return

    async def _run_timer_mails(self, period_ms: int, make_mail: Callable[[], Callable[[], Awaitable[None]]]) -> None:
        """Flink's pattern of a processing-time timer `period_ms` ahead of the millisecond
        clock (so firing `period_ms` + 1 ms after it) whose callback puts a mail in the
        mailbox (`make_mail()`, called as the timer fires: it may note what it sees then);
        the mail, once run, registers the next timer. Ends when the mailbox closes."""
        while True:
            now = kernel.current_time()
            await kernel.sleep(timer_delay(absolute_time_millis(now) + period_ms, now))
            ran = kernel.Event()
            action = make_mail()

            async def mail() -> None:
                await action()
                ran.set()

            if not self.send_mail(mail):
                return
            await ran.wait()

    def _outputs_available(self) -> bool:
        for writer in self.writers:  # a loop, not all(): asked before every chunk of records
            if not writer.is_available():
                return False
        return True

    async def _wait_outputs(self) -> None:
        for writer in self.writers:
            await writer.wait_available()

    async def invoke(self) -> None:
        """Run the mailbox loop until the input ends, then until the task may finish
        (`after_invoke`), then flush what is buffered. The loop is this coroutine's own (not
        one it awaits): every time the task waits and resumes, each frame of its stack is
        resumed."""
        io, task_input = self.io, self.input
        io.mark_task_start()
        turns = 0
        mail, follow_ups = self._mail, self._follow_ups
        priority = self.priority
        writers = self.writers
        while True:
            if mail or follow_ups:
                await task_input.before_mail()
                await self._run_mails(batch=True)
            if priority is not None and priority.has_priority_events:
                io.num_mails_processed += 1  # Flink's "process priority event" mail
                priority.process_priority_events()
                continue  # as in Flink's priority mail: the snapshot it starts runs before the next record
            if writers and not self._outputs_available():
                if mail:  # came while the batch ran: a suspended default action takes them now
                    continue
                io.soft_backpressure.mark_start()
                try:
                    with kernel.CancelScope() as self._wait_scope:
                        if priority is None:
                            await self._wait_outputs()
                        else:
                            await kernel.wait_any([self._wait_outputs, priority.wait_priority_event])
                    if not self._wait_scope.cancelled_caught and self._outputs_available():
                        io.num_mails_processed += 1  # Flink's "resume default action" mail, see below
                finally:
                    self._wait_scope = None
                    io.soft_backpressure.mark_end()
                continue
            status = await task_input.process_input()
            if status is InputStatus.MORE_AVAILABLE:
                turns += 1
                if turns % YIELD_EVERY == 0:
                    await kernel.checkpoint()
                continue
            if status is InputStatus.END_OF_DATA:
                self.end_data()
                continue
            if status is InputStatus.END_OF_INPUT:
                io.num_mails_processed += 1  # Flink's mailboxProcessor.suspend(): a control mail
                break
            if mail or follow_ups:  # came while the batch ran, or follow-ups of the turn
                continue
            io.idle.mark_start()
            try:
                with kernel.CancelScope() as self._wait_scope:
                    await task_input.wait_available()
                if not self._wait_scope.cancelled_caught:
                    # What ends a wait (data from Netty's thread, a buffer a consumer gave
                    # back, a rate limiter's permit) comes from another thread in Flink, whose
                    # suspended default action it resumes with a control mail, counted too.
                    io.num_mails_processed += 1
            finally:
                self._wait_scope = None
                io.idle.mark_end()
        await self.after_invoke()
        for writer in writers:
            writer.flush_all()

    def wake(self) -> None:
        """End an idle or back-pressured wait now (mail came, or the input's state changed,
        e.g. a source was stopped); the loop looks again."""
        if self._wait_scope is not None:
            self._wait_scope.cancel()
