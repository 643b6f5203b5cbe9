"""The realtime kernel: trio, the real clock and real sockets.

The interface's names map to trio's, with two differences: a nursery re-raises the first
error of its children or body (as the sim kernel does) rather than an exception group,
so code above the kernel sees the same errors in both modes; and a run's clock reads
seconds since the run started (`RunClock`), as the sim kernel's does, where trio's own
adds a random offset of 10,000 to 200,000 s.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

current_time = trio.current_time
sleep = trio.sleep
sleep_until = trio.sleep_until
sleep_forever = trio.sleep_forever
checkpoint = trio.lowlevel.checkpoint
Event = trio.Event
Lock = trio.Lock
CancelScope = trio.CancelScope
move_on_after = trio.move_on_after
move_on_at = trio.move_on_at
fail_after = trio.fail_after
fail_at = trio.fail_at
Cancelled = trio.Cancelled


def call_at(when: float, fn: Callable[[], None]) -> None:
    """Call `fn()` at `when` on trio's clock (at once if it has passed), from a system task:
    it must not block, and must not raise."""
    async def at() -> None:
        await trio.sleep_until(when)
        fn()

    trio.lowlevel.spawn_system_task(at)


def first_error(group: BaseExceptionGroup) -> BaseException | None:
    """The first leaf of `group` that is not a cancellation (None if all are)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found = first_error(exc)
            if found is not None:
                return found
        elif not isinstance(exc, trio.Cancelled):
            return exc
    return None


@asynccontextmanager
async def open_nursery() -> AsyncIterator[trio.Nursery]:
    try:
        async with trio.open_nursery() as nursery:
            yield nursery
    except BaseExceptionGroup as group:
        error = first_error(group)
        if error is None:
            raise
        others = len(group.exceptions) - 1
        if others > 0:
            error.add_note(f"(and {others} more errors in the same nursery)")
        error.__suppress_context__ = True  # the group only repeats it; its own cause stays shown
        raise error


class RunClock(trio.abc.Clock):
    """The real clock, from 0 when the run starts: what a run writes in the clock's time
    (trace.jsonl's `t`) reads as in sim mode, and lines up with the metrics' job time."""

    def __init__(self) -> None:
        self._origin = time.perf_counter()

    def start_clock(self) -> None:
        self._origin = time.perf_counter()

    def current_time(self) -> float:
        return time.perf_counter() - self._origin

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return deadline - self.current_time()


#: Cancels the realtime run in progress (None: none runs); see `abort_run`.
_abort: Callable[[], None] | None = None


def run(async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """`async_fn(*args)` under trio on a `RunClock`; `KeyboardInterrupt` once it has
    unwound, if `abort_run` cancelled it."""
    global _abort
    scope = trio.CancelScope()
    aborted = False

    async def main() -> Any:
        global _abort
        token = trio.lowlevel.current_trio_token()

        def abort() -> None:
            nonlocal aborted
            aborted = True
            token.run_sync_soon(scope.cancel)

        _abort = abort
        with scope:
            return await async_fn(*args)

    try:
        result = trio.run(main, clock=RunClock())
    finally:
        _abort = None
    if aborted:
        raise KeyboardInterrupt
    return result


def abort_run() -> bool:
    """From a signal handler: cancel the realtime run in progress, which then unwinds (its
    tasks' cleanups run) and `run` raises `KeyboardInterrupt`. False if none runs. A
    KeyboardInterrupt raised in the handler instead lands anywhere in trio, whose run is
    then abandoned: its tasks' coroutines, collected at exit, print hundreds of lines of
    'Exception ignored' tracebacks."""
    abort = _abort
    if abort is None:
        return False
    abort()
    return True
