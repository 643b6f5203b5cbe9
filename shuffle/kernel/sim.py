"""The discrete-event kernel of sim mode: coroutines resumed from a virtual-time heap.

Tasks are plain coroutines. A task that blocks registers how it is woken (a timer in the
heap, a waiter list) and yields; the kernel resumes runnable tasks in FIFO order and, when
none is left, jumps virtual time to the earliest timer. Nothing is random: tasks that
wake at the same instant run in the order they were scheduled, so a run is reproducible
byte for byte.

Cancellation follows trio's model, which the realtime kernel gives: cancel scopes nest
(inside a task, and from a nursery into its children), a cancelled scope delivers
`Cancelled` at the next blocking call of every task inside it, and the scope that was
cancelled absorbs the exception when it unwinds. A nursery waits for its children; the
first error of a child or of its body cancels the rest and is re-raised.

Each block of a task gets a new token; a wakeup names the token, so a stale wakeup (a
timer of an abandoned sleep, a waiter entry left by a cancelled wait) is a no-op, and
nothing has to be removed from the heap or a waiter list. Deadlines of cancel scopes that
ended before them are the exception: a job arms some per connection at deployment (the
handshake timeouts) and leaves them at once, so the heap drops its stale entries once they
are most of it (`SimKernel.compact`).

`block()` / `wake()` / `wake_at()` are the primitives sim-only code (the simulated link)
builds its waits from.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
import types
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from shuffle.kernel.errors import Cancelled, SimulationStuckError, TooSlowError

_RUNNING, _PARKED, _PARKED_SHIELDED, _DONE = 0, 1, 2, 3

_K: SimKernel | None = None  # the kernel of the run in progress

#: Allocations between two young garbage collections during a run (CPython's default: 700).
#: Objects live in virtual time: a buffer or message in flight for a flush interval outlives
#: hundreds of young collections of wall time, is promoted, and dies in the oldest
#: generation, whose full collections walk every object of the job (at 256 x 256 subtasks,
#: 20 of them took 9.9 s of a 109 s run). A larger young generation lets them die young:
#: that run's collections took 15.7 s in all at 700, 9.7 s at 10,000 and 4.5 s at 50,000
#: allocations (peak memory the same); the 128 x 128 run's 2.7-3.4 s took 0.8-0.9 s.
YOUNG_GC_THRESHOLD = 50_000

#: Abandoned deadlines before the heap is compacted (and only when they are most of it).
COMPACT_AT = 1024


class Task:
    """One coroutine with its innermost cancel scope and the nursery that owns it."""

    __slots__ = ("coro", "name", "scope", "nursery", "token", "state", "status")

    def __init__(self, coro: Any, name: str, scope: CancelScope, nursery: Nursery | None) -> None:
        self.coro = coro
        self.name = name
        self.scope = scope
        self.nursery = nursery
        self.token = 0
        self.state = _RUNNING
        self.status: _TaskStatus | None = None

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


class SimKernel:
    """Run queue, timer heap and virtual clock of one run."""

    def __init__(self) -> None:
        self.now = 0.0
        #: (task, exception to throw into it or None), or (fn, _RUN_STEP) for a step (`run_soon`).
        self.runq: deque[tuple[Any, Any]] = deque()
        #: Timers: (time, sequence, fn, args), popped in (time, sequence) order to call `fn(*args)`.
        self.heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self.counter = itertools.count()
        self.current: Task | None = None
        self.root_scope = CancelScope()
        self.root_scope._active = True
        self.stale_deadlines = 0  # heap entries of deadlines whose scope ended before them

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call `fn(*args)` from the loop at virtual time `when` (its arguments travel with
        the timer: no trampoline call per timer)."""
        heapq.heappush(self.heap, (when, next(self.counter), fn, args))

    def deadline_abandoned(self) -> None:
        """A scope ended before its armed deadline: compact the heap once such entries are
        most of it. They would only be popped as no-ops at their time, but until then every
        heap operation walks past them (~2,000 at 128 x 128 subtasks, of ~3,000 entries)."""
        self.stale_deadlines += 1
        if self.stale_deadlines >= COMPACT_AT and 2 * self.stale_deadlines > len(self.heap):
            self.compact()

    def compact(self) -> None:
        """Drop the heap's no-op entries (stale timers and deadlines). The live ones keep
        their `(time, sequence)` order, so the run is the same, event for event."""
        self.heap[:] = [entry for entry in self.heap if _is_live(entry)]
        heapq.heapify(self.heap)
        self.stale_deadlines = 0

    def run_until_done(self, main: Task) -> Any:
        """Run until `main` is done; its return value (its error goes to `_ROOT_OUTCOME`)."""
        runq, heap = self.runq, self.heap
        result = None
        heappop = heapq.heappop
        while True:
            while runq:
                task, exc = runq.popleft()
                if exc is _RUN_STEP:  # a step: a call, run where a woken task would run
                    self.current = None
                    task()  # an error escaping it ends the run with that error
                    continue
                self.current = task
                try:
                    if exc is None:
                        yielded = task.coro.send(None)
                    else:
                        yielded = task.coro.throw(exc)
                except StopIteration as stop:
                    _task_done(task, None)
                    if task is main:
                        result = stop.value
                    continue
                except BaseException as error:  # noqa: BLE001 - a task's end, handled by its nursery
                    _task_done(task, error)
                    continue
                if yielded is not None:
                    _foreign_await(task, yielded)
            self.current = None
            if main.state == _DONE:
                return result
            if not heap:
                raise SimulationStuckError(_stuck_report(self.root_scope, self.now))
            when, _, fn, args = heappop(heap)
            if when > self.now:
                self.now = when
            fn(*args)



def _foreign_await(task: Task, yielded: Any) -> None:
    """A task awaited something that is not this kernel's (e.g. a trio call in sim mode)."""
    task.state = _RUNNING
    _K.runq.append((task, RuntimeError(
        f"task {task.name!r} awaited {yielded!r}, which the sim kernel cannot run: "
        "use shuffle.kernel's primitives, not trio's, in code that runs in sim mode")))


def _stuck_report(root: CancelScope, now: float) -> str:
    """Every task is blocked and no timer is pending: say who waits where."""
    lines = [f"the simulation is stuck at t={now:.6f} s: every task waits and no timer is pending"]
    for n, task in enumerate(_live_tasks(root)):
        if n == 20:
            lines.append("  ...")
            break
        lines.append(f"  {task.name}: {_where(task.coro)}")
    return "\n".join(lines)


def _live_tasks(root: CancelScope) -> Iterator[Task]:
    """Every unfinished task: each sits in the task set of exactly one scope of the tree."""
    pending = [root]
    while pending:
        scope = pending.pop()
        yield from scope._tasks
        pending.extend(scope._children)


def _where(coro: Any) -> str:
    """The innermost frame of a task outside the kernel: where it waits."""
    where = "?"
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None and not frame.f_code.co_filename.startswith(_KERNEL_DIR):
            where = f"{frame.f_code.co_qualname} ({frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno})"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return where


_KERNEL_DIR = __file__.rsplit("/", 1)[0]


# -- blocking and waking (the primitives everything else is built from) --------------------

@types.coroutine
def park() -> Iterator[None]:
    """Yield to the kernel; resumed by `wake` (or by a cancellation)."""
    yield


def block(shielded: bool = False) -> tuple[Task, int]:
    """Mark the current task blocked; returns what a waker needs. Await `park()` next.

    Raises `Cancelled` instead if the task's scope is cancelled (unless `shielded`):
    every blocking call is a cancellation point, as in trio.
    """
    task = _K.current
    if not shielded and task.scope._cancelled:
        raise Cancelled()
    task.token += 1
    task.state = _PARKED_SHIELDED if shielded else _PARKED
    return task, task.token


def wake(task: Task, token: int, exc: BaseException | None = None) -> bool:
    """Make a blocked task runnable (False if that block is already over)."""
    if task.token != token or task.state == _RUNNING or task.state == _DONE:
        return False
    task.state = _RUNNING
    _K.runq.append((task, exc))
    return True


def _is_live(entry: tuple[float, int, Callable[..., Any], tuple[Any, ...]]) -> bool:
    """Whether popping this heap entry would do anything (False: a stale timer or deadline)."""
    fn, args = entry[2], entry[3]
    if fn is wake:
        task, token = args
        return task.token == token and task.state != _RUNNING and task.state != _DONE
    if fn is _deadline_reached:
        scope, token = args
        return scope._deadline_token == token and scope._active
    return True


def wake_at(when: float, task: Task, token: int) -> None:
    """Wake the blocked `task` at virtual time `when` (no-op if it was woken before)."""
    _K.call_at(when, wake, task, token)


#: What marks a step on the run queue in place of a task's exception (`run_soon`).
_RUN_STEP = object()


def run_soon(fn: Callable[[], None]) -> None:
    """Call `fn()` where a task woken now would run: in FIFO order with the woken tasks.

    A step that would wake a task to run a few lines of code (a connection's reader or
    writer) costs a call instead of a coroutine resumption. `fn` must not block, and must
    not raise: it runs outside any task, so its caller hands errors to a task itself.
    """
    _K.runq.append((fn, _RUN_STEP))


def call_at(when: float, fn: Callable[[], None]) -> None:
    """Call `fn()` from the kernel loop at virtual time `when` (at once if it has passed).
    `fn` runs outside any task: it must not block, and must not raise."""
    _K.call_at(max(when, _K.now), fn)


def call_soon(fn: Callable[[], None]) -> None:
    """Call `fn()` from the kernel loop at this instant, once every runnable task has yielded
    (an event-loop hop: cheaper than waking a task, and after the caller's current step)."""
    _K.call_at(_K.now, fn)


def _cancel_task(task: Task) -> None:
    if task.state == _PARKED:
        task.token += 1
        task.state = _RUNNING
        _K.runq.append((task, Cancelled()))


# -- time (the clock: `_K.now`, which `kernel.current_time` reads) ------------------------

def _block_until(deadline: float) -> None:
    """Block the current task until virtual time `deadline` (runnable at once if it has
    passed); the sleep that called it yields next."""
    task, token = block()
    if deadline <= _K.now:
        wake(task, token)
    else:
        _K.call_at(deadline, wake, task, token)


@types.coroutine
def sleep_until(deadline: float) -> Iterator[None]:
    """Await it: returns at virtual time `deadline`. A generator that yields to the kernel
    itself, as `park` does (no coroutine frame around `park` to enter and resume)."""
    _block_until(deadline)
    yield


@types.coroutine
def sleep(seconds: float) -> Iterator[None]:
    """Await it: returns `seconds` after it is awaited (as trio's: the clock is read then,
    not when `sleep` is called). Not through `sleep_until`: one generator frame per sleep."""
    _block_until(_K.now + seconds)
    yield


async def sleep_forever() -> None:
    block()
    await park()


async def wait_all_tasks_blocked() -> None:
    """Return once every other task is blocked (before virtual time moves on); for tests."""
    task, token = block()
    _K.call_at(_K.now, wake, task, token)
    await park()


async def checkpoint() -> None:
    """Let every other runnable task run first; a cancellation point."""
    task, token = block()
    wake(task, token)
    await park()


# -- cancel scopes ---------------------------------------------------------------------------

class CancelScope:
    """trio's CancelScope: cancel() or a deadline cancels every task inside it."""

    __slots__ = ("_deadline", "shield", "cancel_called", "cancelled_caught", "_cancelled", "_parent",
                 "_children", "_tasks", "_active", "_deadline_token", "_owner")

    def __init__(self, *, deadline: float = math.inf, shield: bool = False) -> None:
        self._deadline = deadline
        self.shield = shield
        self.cancel_called = False
        self.cancelled_caught = False
        self._cancelled = False  # cancelled here or by an enclosing (unshielded) scope
        self._parent: CancelScope | None = None
        self._children: dict[CancelScope, None] = {}
        self._tasks: dict[Task, None] = {}
        self._active = False
        self._deadline_token = 0
        self._owner: Task | None = None

    def _attach(self, task: Task) -> None:
        parent = task.scope
        self._parent = parent
        parent._children[self] = None
        parent._tasks.pop(task, None)
        self._tasks[task] = None
        task.scope = self
        self._owner = task
        self._active = True
        self._cancelled = self.cancel_called or (not self.shield and parent._cancelled)
        if self._deadline != math.inf:
            self._arm()

    def _detach(self) -> None:
        task, parent = self._owner, self._parent
        self._active = False
        if self._deadline != math.inf and not self.cancel_called:
            _K.deadline_abandoned()
        self._tasks.pop(task, None)
        parent._children.pop(self, None)
        parent._tasks[task] = None
        task.scope = parent
        # An abandoned deadline keeps this scope in the heap until its time: it need not
        # keep the (soon finished) task and the enclosing scopes too.
        self._owner = self._parent = None

    def __enter__(self) -> CancelScope:
        self._attach(_K.current)
        return self

    def __exit__(self, etype: type | None, exc: BaseException | None, tb: Any) -> bool:
        self._detach()
        if exc is None or not self.cancel_called:
            return False
        if isinstance(exc, Cancelled):
            self.cancelled_caught = True
            return True
        if isinstance(exc, BaseExceptionGroup):
            cancelled, rest = exc.split(Cancelled)
            if cancelled is not None:
                self.cancelled_caught = True
                if rest is None:
                    return True
                raise rest
        return False

    @property
    def deadline(self) -> float:
        return self._deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        self._deadline = value
        self._deadline_token += 1
        if self._active and value != math.inf:
            self._arm()

    def _arm(self) -> None:
        if self.cancel_called:
            return
        if self._deadline <= _K.now:
            self.cancel()
        else:
            _K.call_at(self._deadline, _deadline_reached, self, self._deadline_token)

    def cancel(self) -> None:
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._active:
            self._propagate()

    def _propagate(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        for task in list(self._tasks):
            _cancel_task(task)
        for child in list(self._children):
            if not child.shield:
                child._propagate()


def _deadline_reached(scope: CancelScope, token: int) -> None:
    if scope._deadline_token == token and scope._active:
        scope.cancel()


@contextmanager
def move_on_at(deadline: float) -> Iterator[CancelScope]:
    with CancelScope(deadline=deadline) as scope:
        yield scope


def move_on_after(seconds: float) -> Any:
    return move_on_at(_K.now + seconds)


@contextmanager
def fail_at(deadline: float) -> Iterator[CancelScope]:
    with CancelScope(deadline=deadline) as scope:
        yield scope
    if scope.cancelled_caught:
        raise TooSlowError()


def fail_after(seconds: float) -> Any:
    return fail_at(_K.now + seconds)


# -- nurseries -------------------------------------------------------------------------------

class _TaskStatus:
    __slots__ = ("started_value", "done", "_waiter")

    def __init__(self) -> None:
        self.started_value: Any = None
        self.done = False
        self._waiter: tuple[Task, int] | None = None

    def started(self, value: Any = None) -> None:
        if self.done:
            raise RuntimeError("started() called twice")
        self.started_value = value
        self.done = True
        if self._waiter is not None:
            wake(*self._waiter)


class Nursery:
    """Children run in the nursery's cancel scope; the block waits for all of them."""

    __slots__ = ("cancel_scope", "_parent_task", "_children", "_errors", "_waiter", "_closed", "_child_cancelled")

    def __init__(self) -> None:
        self.cancel_scope = CancelScope()
        self._parent_task: Task | None = None
        self._children: dict[Task, None] = {}
        self._errors: list[BaseException] = []
        self._waiter: tuple[Task, int] | None = None
        self._closed = False
        self._child_cancelled = False

    async def __aenter__(self) -> Nursery:
        self._parent_task = _K.current
        self.cancel_scope._attach(self._parent_task)
        return self

    def start_soon(self, async_fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None) -> None:
        self._spawn(async_fn(*args), name or getattr(async_fn, "__qualname__", repr(async_fn)))

    def _spawn(self, coro: Any, name: str) -> Task:
        if self._closed:
            coro.close()
            raise RuntimeError("Nursery is closed to new arrivals")
        task = Task(coro, name, self.cancel_scope, self)
        self.cancel_scope._tasks[task] = None
        self._children[task] = None
        _K.runq.append((task, None))
        return task

    async def start(self, async_fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None) -> Any:
        """Start a child and wait until it calls `task_status.started(value)`; returns value."""
        status = _TaskStatus()
        task = self._spawn(async_fn(*args, task_status=status),
                           name or getattr(async_fn, "__qualname__", repr(async_fn)))
        task.status = status
        while not status.done:
            status._waiter = block()
            await park()
        if isinstance(status.started_value, _NeverStarted):
            raise RuntimeError(f"child {task.name!r} exited without calling task_status.started()")
        return status.started_value

    def _child_done(self, task: Task, error: BaseException | None) -> None:
        del self._children[task]
        self.cancel_scope._tasks.pop(task, None)
        if error is not None:
            if isinstance(error, Cancelled):
                self._child_cancelled = True
            else:
                self._errors.append(error)
                self.cancel_scope.cancel()
        if task.status is not None and not task.status.done:
            task.status.started(_NeverStarted())
        if not self._children and self._waiter is not None:
            wake(*self._waiter)

    async def __aexit__(self, etype: type | None, exc: BaseException | None, tb: Any) -> bool:
        body_cancelled = isinstance(exc, Cancelled)
        if exc is not None and not body_cancelled:
            self._errors.append(exc)
            self.cancel_scope.cancel()
        while self._children:
            self._waiter = block(shielded=True)
            await park()
        self._waiter = None
        self._closed = True
        if self._errors:
            raised = self._errors[0]
            if len(self._errors) > 1:
                raised.add_note(f"(and {len(self._errors) - 1} more errors in the same nursery)")
        elif body_cancelled or self._child_cancelled:
            raised = exc if body_cancelled else Cancelled()
        else:
            raised = None
        if raised is None:
            self.cancel_scope.__exit__(None, None, None)
            return False
        if self.cancel_scope.__exit__(type(raised), raised, None):
            return True
        if raised is exc:
            return False
        raise raised


class _NeverStarted:
    pass


def open_nursery() -> Nursery:
    return Nursery()


def _task_done(task: Task, error: BaseException | None) -> None:
    task.state = _DONE
    if task.nursery is not None:
        task.nursery._child_done(task, error)
    else:  # the main task
        _ROOT_OUTCOME.append(error)


_ROOT_OUTCOME: list[BaseException | None] = []


# -- synchronisation -------------------------------------------------------------------------

class Event:
    """A one-shot flag tasks wait for."""

    __slots__ = ("_flag", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._waiters: list[tuple[Task, int]] = []

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if not self._flag:
            self._flag = True
            for task, token in self._waiters:
                wake(task, token)
            self._waiters.clear()

    @types.coroutine
    def wait(self) -> Iterator[None]:
        """Await it: returns once set (at once if it is). A generator that yields to the
        kernel itself, as `park` does (no coroutine frame around `park` per wait). A wait
        cancelled before the event is set takes its entry back: `wait_any` cancels the
        waits that lost at every wakeup, and an event that stays unset for a long time
        (an idle input's) would otherwise keep one entry per wakeup of the other inputs."""
        if not self._flag:
            waiter = block()
            waiters = self._waiters
            waiters.append(waiter)
            try:
                yield
            except BaseException:
                if waiter in waiters:
                    waiters.remove(waiter)
                raise


class Lock:
    """A FIFO mutex."""

    __slots__ = ("_locked", "_waiters")

    def __init__(self) -> None:
        self._locked = False
        self._waiters: list[tuple[Task, int]] = []  # one Lock per connection; rarely contended

    async def __aenter__(self) -> None:
        if not self._locked:
            self._locked = True
            return
        waiter = block()
        waiters = self._waiters
        waiters.append(waiter)
        try:
            await park()  # ownership is handed over by the releaser
        except BaseException:
            if waiter in waiters:  # cancelled while waiting: nothing to hand over to it
                waiters.remove(waiter)
            raise

    async def __aexit__(self, *exc: Any) -> None:
        while self._waiters:
            if wake(*self._waiters.pop(0)):
                return  # still locked: the woken waiter owns it now
        self._locked = False


# -- running ---------------------------------------------------------------------------------

def run(async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """Run `async_fn(*args)` to completion in virtual time starting at 0; its result or error."""
    global _K
    if _K is not None:
        raise RuntimeError("a sim kernel run is already in progress in this thread")
    # the main task is `async_fn`'s coroutine itself (no frame around it to enter per resumption)
    coro = async_fn(*args)
    kernel = _K = SimKernel()
    _ROOT_OUTCOME.clear()
    root_scope = kernel.root_scope
    task = Task(coro, getattr(async_fn, "__qualname__", "main"), root_scope, None)
    root_scope._tasks[task] = None
    kernel.runq.append((task, None))
    thresholds = gc.get_threshold()
    gc.set_threshold(max(YOUNG_GC_THRESHOLD, thresholds[0]), *thresholds[1:])
    try:
        result = kernel.run_until_done(task)
    finally:
        gc.set_threshold(*thresholds)
        _K = None
        if task.state != _DONE:
            _close_all(root_scope)
    error = _ROOT_OUTCOME[0]
    _ROOT_OUTCOME.clear()
    if error is not None:
        raise error
    return result


def _close_all(root: CancelScope) -> None:
    """Close the coroutines of an aborted run so none is left half-run."""
    for task in list(_live_tasks(root)):
        try:
            task.coro.close()
        except BaseException:  # noqa: BLE001 - best effort while unwinding an aborted run
            pass

