"""Virtual time and a seeded, deterministic trio scheduler for sim mode.

`VirtualClock` is trio's clock in sim mode. trio asks a clock how long to sleep only when
no task is runnable; in sim mode nothing but a deadline can then wake a task (there is no
real I/O), so the clock jumps to that deadline and answers "zero". That is one pass of
trio's loop per jump, about twice as fast as `MockClock`'s autojump, which needs a second
pass.

trio runs the tasks that wake at the same instant in random order. For a reproducible
simulation (same scenario and seed, same trace bytes) `deterministic_scheduling` turns on
trio's own switch for deterministic scheduling, the one its Hypothesis integration uses:
runnable tasks are ordered by creation and shuffled with trio's private random generator,
which we seed. It is a private switch, so it is touched only here (and tested).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import trio
from trio._core import _run as _trio_run

# What the clock answers when no task has a deadline: the simulation is stuck (every task
# waits on another). trio then waits in epoll; the job's own time limit normally prevents it.
_STUCK_SLEEP = 3600.0


class VirtualClock(trio.abc.Clock):
    """Virtual seconds from 0 that jump to the next deadline whenever every task is blocked."""

    def __init__(self) -> None:
        self._now = 0.0

    def start_clock(self) -> None:
        """Time starts at 0 whenever the run starts."""

    def current_time(self) -> float:
        return self._now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        if deadline == math.inf:
            return _STUCK_SLEEP
        if deadline > self._now:
            self._now = deadline
        return 0.0


@contextmanager
def deterministic_scheduling(seed: int) -> Iterator[None]:
    """Within the block, trio's scheduling order depends only on `seed` (restored after)."""
    previous_flag = _trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    previous_state = _trio_run._r.getstate()
    _trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True
    _trio_run._r.seed(seed)
    try:
        yield
    finally:
        _trio_run._ALLOW_DETERMINISTIC_SCHEDULING = previous_flag
        _trio_run._r.setstate(previous_state)
