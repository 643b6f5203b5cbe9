"""The kernel interface: time and concurrency for the network stack and the runtime.

Code in `shuffle/` and `taskmgr/` reaches time and concurrency only through this module,
as `from shuffle import kernel` then `kernel.sleep(...)`, `kernel.Event()`, ... The same
`async def` code then runs on either kernel:

- `sim`: the project's discrete-event kernel (`shuffle.kernel.sim`): virtual time, one
  process, deterministic (tasks that wake at the same instant run in scheduling order);
- `realtime`: trio (`shuffle.kernel.realtime`): the real clock and real sockets.

`run(fn, *args, mode=...)` installs a kernel's primitives as this module's attributes for
the duration of the run (so a call costs one attribute lookup, no dispatch) and restores
the previous ones after. Outside any `run`, the realtime kernel is installed: code under
trio (pytest-trio tests, realtime TaskManagers) uses trio.

The interface (trio's semantics, which both kernels give):

- time: `current_time()`, `sleep(s)`, `sleep_until(t)`, `sleep_forever()`, `checkpoint()`;
- waiting: `Event()` (`set`, `is_set`, `wait`), `Lock()` (async with), `Queue()`;
- structure: `open_nursery()` (`start_soon`, `start`, `cancel_scope`): children run in the
  nursery's cancel scope; the first error of a child or of the body cancels the rest and
  is re-raised (not an exception group); `TASK_STATUS_IGNORED` for `start`-able tasks;
- timeouts and cancellation: `CancelScope`, `move_on_after`, `move_on_at`, `fail_after`,
  `fail_at`, `Cancelled`, `TooSlowError`;
- streams (byte streams of the transports): `aclose_forcefully(stream)`, and the errors
  `BrokenResourceError`, `ClosedResourceError`, `BusyResourceError`.

Nothing in `shuffle/` or `taskmgr/` imports trio outside the realtime kernel and the TCP
transport.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from shuffle.kernel import realtime, sim
from shuffle.kernel.errors import (
    BrokenResourceError,
    BusyResourceError,
    ClosedResourceError,
    SimulationStuckError,
    TooSlowError,
)

MODES = ("sim", "realtime")

T = TypeVar("T")

#: The primitives each kernel provides, installed as this module's attributes.
_PRIMITIVES = ("sleep", "sleep_until", "sleep_forever", "checkpoint", "Event", "Lock",
               "CancelScope", "move_on_after", "move_on_at", "fail_after", "fail_at", "Cancelled",
               "open_nursery", "call_at")

# Placeholders for type checkers and readers; `_install` sets the real ones.
sleep: Callable[[float], Awaitable[None]]
sleep_until: Callable[[float], Awaitable[None]]
sleep_forever: Callable[[], Awaitable[None]]
checkpoint: Callable[[], Awaitable[None]]
Event: Any
Lock: Any
CancelScope: Any
move_on_after: Any
move_on_at: Any
fail_after: Any
fail_at: Any
Cancelled: Any
open_nursery: Any
call_at: Callable[[float, Callable[[], None]], None]

_mode = "realtime"


def current_time() -> float:
    """Seconds on the kernel's clock (virtual in sim mode). Unlike the other primitives it is
    a fixed function, so it may be captured as a clock (`clock=kernel.current_time`). A sim
    run's clock is read in place (its kernel is set exactly while it runs): one call per
    reading, not two."""
    sim_kernel = sim._K
    return sim_kernel.now if sim_kernel is not None else realtime.current_time()


def _install(backend: Any) -> None:
    namespace = globals()
    for name in _PRIMITIVES:
        namespace[name] = getattr(backend, name)


_install(realtime)


def current_mode() -> str:
    """"sim" inside a sim run, else "realtime"."""
    return _mode


def run(async_fn: Callable[..., Awaitable[T]], *args: Any, mode: str = "sim") -> T:
    """Run `async_fn(*args)` to completion on the kernel of `mode`; its result or its error."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "realtime":
        return realtime.run(async_fn, *args)
    previous = _mode
    _install(sim)
    _mode = "sim"
    try:
        return sim.run(async_fn, *args)
    finally:
        _mode = previous
        _install(realtime if previous == "realtime" else sim)


class _TaskStatusIgnored:
    def started(self, value: Any = None) -> None:
        """Nobody waits for this task to start."""


TASK_STATUS_IGNORED: Any = _TaskStatusIgnored()


async def wait_any(waiters: Sequence[Callable[[], Awaitable[object]]]) -> None:
    """Return once any of the waiting coroutine functions returns (the others are cancelled)."""
    if len(waiters) == 1:
        await waiters[0]()
        return
    async with open_nursery() as nursery:
        for wait in waiters:
            async def first(wait: Callable[[], Awaitable[object]] = wait) -> None:
                await wait()
                nursery.cancel_scope.cancel()
            nursery.start_soon(first)


async def aclose_forcefully(stream: Any) -> None:
    """Close `stream` at once, without waiting for the peer (cancels a graceful close)."""
    with CancelScope() as scope:
        scope.cancel()
        await stream.aclose()


class Queue(Generic[T]):
    """An unbounded FIFO between tasks: `put_nowait`, `await get()`; `close()` ends `get`s."""

    __slots__ = ("_items", "_ready", "_closed")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._ready: Any = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put_nowait(self, item: T) -> None:
        if self._closed:
            raise ClosedResourceError("the queue is closed")
        self._items.append(item)
        if self._ready is not None:
            self._ready.set()
            self._ready = None

    def close(self) -> None:
        self._closed = True
        if self._ready is not None:
            self._ready.set()
            self._ready = None

    def get_nowait(self) -> T:
        """The next item; `IndexError` when there is none."""
        return self._items.popleft()

    async def get(self) -> T:
        """The next item; `ClosedResourceError` once closed and empty."""
        while not self._items:
            if self._closed:
                raise ClosedResourceError("the queue is closed")
            if self._ready is None:
                self._ready = Event()
            await self._ready.wait()
        return self._items.popleft()

    def __aiter__(self) -> Queue[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.get()
        except ClosedResourceError:
            raise StopAsyncIteration from None


__all__ = [*_PRIMITIVES, "current_time", "MODES", "run", "current_mode", "TASK_STATUS_IGNORED", "aclose_forcefully", "Queue",
           "BrokenResourceError", "BusyResourceError", "ClosedResourceError", "TooSlowError",
           "SimulationStuckError"]
