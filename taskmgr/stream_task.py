"""StreamTask: the mailbox loop of one task, and where its time goes (spec 7.1).

Each turn first checks the output: if a record writer is not available the task waits
for it (soft back-pressure), and only then takes the next input. When the input has
nothing, the task waits for it (idle). A writer blocked on a buffer inside a record is
hard back-pressure (timed by the partition). Everything else is busy time.
Sources run the same loop with the source operator as input.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from shuffle import kernel
from shuffle.consumer.single_input_gate import SingleInputGate
from shuffle.writer.record_writer import RecordWriter
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.task_input import InputStatus, TaskInput


#: Turns of the loop after which a task lets others run even if it never had to wait.
YIELD_EVERY = 32


class PriorityInput(Protocol):
    """Inputs whose priority events (unaligned barriers) the mailbox takes between records,
    also while the task is back-pressured (Flink's "process priority event" mail)."""

    @property
    def has_priority_events(self) -> bool: ...

    async def wait_priority_event(self) -> None: ...

    def process_priority_events(self) -> None: ...


class StreamTask:
    def __init__(self, task_input: TaskInput, writers: Sequence[RecordWriter], io: TaskIOMetricGroup,
                 priority: PriorityInput | None = None) -> None:
        self.input = task_input
        self.priority = priority
        self.writers = list(writers)
        self.io = io
        self._wait_scope: kernel.CancelScope | None = None  # an idle or back-pressured wait
        #: Actions for the task's own thread (Flink's mailbox mails), run between records.
        self._mail: deque[Callable[[], Awaitable[None]]] = deque()

    def send_mail(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run `action` in the mailbox loop before the next record (waking an idle task)."""
        self._mail.append(action)
        self.wake()

    async def run_buffer_debloater(self, gates: Sequence[SingleInputGate], period: float) -> None:
        """Flink's `scheduleBufferDebloater`: a timer `period` after the last recalculation
        puts a mail in the mailbox that asks every gate to recalculate its buffer size."""
        while True:
            await kernel.sleep(period)
            done = kernel.Event()

            async def debloat() -> None:
                for gate in gates:
                    gate.trigger_debloating()
                done.set()

            self.send_mail(debloat)
            await done.wait()

    def _outputs_available(self) -> bool:
        return all(writer.is_available() for writer in self.writers)

    async def _wait_outputs(self) -> None:
        for writer in self.writers:
            await writer.wait_available()

    async def invoke(self) -> None:
        """Run until the input ends, then flush what is buffered."""
        self.io.mark_task_start()
        await self.run_mailbox_loop()
        for writer in self.writers:
            writer.flush_all()

    async def run_mailbox_loop(self) -> None:
        io, task_input = self.io, self.input
        turns = 0
        mail = self._mail
        priority = self.priority
        while True:
            while mail:
                await mail.popleft()()
            if priority is not None and priority.has_priority_events:
                priority.process_priority_events()
                continue  # as in Flink's priority mail: the snapshot it starts runs before the next record
            if not self._outputs_available():
                io.soft_backpressure.mark_start()
                try:
                    with kernel.CancelScope() as self._wait_scope:
                        if priority is None:
                            await self._wait_outputs()
                        else:
                            await kernel.wait_any([self._wait_outputs, priority.wait_priority_event])
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
            if status is InputStatus.END_OF_INPUT:
                return
            io.idle.mark_start()
            try:
                with kernel.CancelScope() as self._wait_scope:
                    await task_input.wait_available()
            finally:
                self._wait_scope = None
                io.idle.mark_end()

    def wake(self) -> None:
        """End an idle or back-pressured wait now (mail came, or the input's state changed,
        e.g. a source was stopped); the loop looks again."""
        if self._wait_scope is not None:
            self._wait_scope.cancel()
