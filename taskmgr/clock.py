"""The run's clock: virtual time in `sim` mode, the real clock in `realtime` mode.

Also the one place that touches trio's private scheduler switch: in `sim` mode trio's
run queue is ordered by task creation and shuffled with a random generator seeded from
the run's seed (what trio does under Hypothesis), so the same scenario and seed give the
same run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import trio
import trio.testing
from trio._core import _run as _trio_run

MODES = ("sim", "realtime")

T = TypeVar("T")


def make_clock(mode: str) -> trio.abc.Clock | None:
    """The trio clock of a mode: a clock that jumps to the next deadline as soon as every
    task is blocked (sim), or trio's default real clock (realtime: None)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "sim":
        return trio.testing.MockClock(autojump_threshold=0)
    return None


@contextlib.contextmanager
def deterministic_scheduling(seed: int) -> Iterator[None]:
    """Make trio's scheduler deterministic for `seed` inside the block (then restore it).

    Wraps trio's private `_ALLOW_DETERMINISTIC_SCHEDULING` switch and its scheduling
    random generator `_r`; kept here so a trio upgrade breaks one function.
    """
    previous_flag = _trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    previous_state = _trio_run._r.getstate()
    _trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    _trio_run._r.seed(seed)
    try:
        yield
    finally:
        _trio_run._ALLOW_DETERMINISTIC_SCHEDULING = previous_flag  # type: ignore[misc]
        _trio_run._r.setstate(previous_state)


def run(async_fn: Callable[..., Awaitable[T]], *args: Any, mode: str = "sim", seed: int = 0) -> T:
    """`trio.run(async_fn, *args)` with the mode's clock (deterministic scheduling in sim)."""
    if mode == "sim":
        with deterministic_scheduling(seed):
            return trio.run(async_fn, *args, clock=make_clock(mode))
    make_clock(mode)  # validates the mode
    return trio.run(async_fn, *args)
