"""OutboundWriter: one connection's writer, shared by the client and the server handler.

Writes one message at a time, and only while the connection is writable (Flink checks
`isWritable` before it takes the next message: nothing is pulled off a queue while the
connection is congested). Its owner supplies `next_sealed()` (the next message, sealed,
or None) and `has_work()`; `wake()` says new work may be there.

The writer is a task waiting for work and for writability. On the simulated link, work
that arrives while the task is idle is written from the connection's event loop instead
(`MessageStream.defer`): the same hand-over as to Flink's Netty thread, without a task
wakeup per message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shuffle import kernel
from shuffle.netty.message_stream import MessageStream


class OutboundWriter:
    __slots__ = ("connection", "_next_sealed", "_has_work", "_wakeup", "_deferred")

    def __init__(self, connection: MessageStream, next_sealed: Callable[[], Any | None],
                 has_work: Callable[[], bool]) -> None:
        self.connection = connection
        self._next_sealed = next_sealed
        self._has_work = has_work
        self._wakeup: Any = None  # set while the writer task waits for work
        self._deferred = False

    def wake(self) -> None:
        if self._wakeup is None or self._deferred:
            return  # the writer task is busy, or a deferred write will see the work
        if self.connection.defer(self._write_idle):
            self._deferred = True
        else:
            self._wakeup.set()
            self._wakeup = None

    def _write_idle(self) -> None:
        """On the connection's event loop: write while writable, for the idle writer task."""
        connection = self.connection
        try:
            while self._wakeup is not None and connection.can_send_now():
                sealed = self._next_sealed()
                if sealed is None:
                    return
                connection.send_now(sealed)
        finally:
            self._deferred = False
        if self._wakeup is not None and self._has_work():
            self._wakeup.set()  # not writable: the task waits for the connection
            self._wakeup = None

    async def run(self) -> None:
        """Write until cancelled."""
        connection = self.connection
        while True:
            await connection.wait_writable()
            sealed = self._next_sealed()
            if sealed is None:
                self._wakeup = wakeup = kernel.Event()
                await wakeup.wait()
                continue
            await connection.send_sealed(sealed)
