"""OutboundWriter: one connection's writer, shared by the client and the server handler.

Writes one message at a time, and only while the connection is writable (Flink checks
`isWritable` before it takes the next message: nothing is pulled off a queue while the
connection is congested). Its owner supplies `next_sealed()` (the next message, sealed,
or None) and `has_work()`; `wake()` says new work may be there.

Work that arrives while the writer is idle is written from the connection's event loop
(`MessageStream.defer`, the same hand-over as to Flink's Netty thread): over TCP at once,
by the task that made the work, as far as the socket takes it without waiting; on the
simulated link after that task's step. Over TCP the writer is also a task (`run`), woken
for what the socket did not take and while the connection is congested. On the simulated
link it runs as steps of the kernel loop instead (`start`): where the task would have been
woken (work left while the connection is not writable, then room in the window) a step
runs at that place in the run queue, without a task wakeup per message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shuffle import kernel
from shuffle.netty.message_stream import MessageStream


class _ResumeStep:
    """What an idle stepped writer waits on: `set()` runs its next step (like `Event.set`
    waking the writer task)."""

    __slots__ = ("writer",)

    def __init__(self, writer: OutboundWriter) -> None:
        self.writer = writer

    def set(self) -> None:
        self.writer.connection.run_soon(self.writer._step)


class OutboundWriter:
    __slots__ = ("connection", "_next_sealed", "_has_work", "_wakeup", "_deferred", "_fail")

    def __init__(self, connection: MessageStream, next_sealed: Callable[[], Any | None],
                 has_work: Callable[[], bool]) -> None:
        self.connection = connection
        self._next_sealed = next_sealed
        self._has_work = has_work
        self._wakeup: Any = None  # set while the writer waits for work
        self._deferred = False
        self._fail: Callable[[BaseException], None] | None = None  # set while stepped (`start`)

    def wake(self) -> None:
        if self._wakeup is None or self._deferred:
            return  # the writer is busy, or a deferred write will see the work
        connection = self.connection
        if connection.defers:
            self._deferred = True  # before `defer`, which may write at once (over TCP)
            connection.defer(self._write_idle)
        else:
            self._wakeup.set()
            self._wakeup = None

    def _write_idle(self) -> None:
        """On the connection's event loop: write while writable, for the idle writer; wake it
        for work left over (or a frame the socket took only part of)."""
        connection = self.connection
        try:
            while self._wakeup is not None and connection.can_send_now():
                sealed = self._next_sealed()
                if sealed is None:
                    return
                connection.send_now(sealed)
        finally:
            self._deferred = False
        if self._wakeup is not None and (self._has_work() or connection.has_unsent()):
            self._wakeup.set()  # not writable: the writer waits for the connection
            self._wakeup = None

    async def run(self) -> None:
        """Write until cancelled."""
        connection = self.connection
        try:
            while True:
                await connection.wait_writable()
                sealed = self._next_sealed()
                if sealed is None:
                    self._wakeup = wakeup = kernel.Event()
                    await wakeup.wait()
                    continue
                await connection.send_sealed(sealed)
        finally:
            self._wakeup = None  # no more writes from other tasks either

    def start(self, fail: Callable[[BaseException], None]) -> None:
        """Write as steps of the kernel loop (the simulated link) until `stop`; an error of a
        step goes to `fail`."""
        self._fail = fail
        self.connection.run_soon(self._step)  # where the writer task would start

    def stop(self) -> None:
        self._fail = None
        self._wakeup = None

    def _step(self) -> None:
        """One resumption of `run`'s loop: write while writable, then wait for work or room."""
        fail = self._fail
        if fail is None:
            return
        connection = self.connection
        try:
            while connection.ready_to_send():
                sealed = self._next_sealed()
                if sealed is None:
                    self._wakeup = _ResumeStep(self)
                    return
                connection.send_now(sealed)
            connection.when_writable(self._step)
        except Exception as exc:  # noqa: BLE001 - the connection's task raises it
            fail(exc)
