"""The run's clock: virtual time in `sim` mode, the real clock in `realtime` mode.

Sim mode uses the network stack's `VirtualClock` (jumps to the next deadline whenever
every task is blocked) and its seeded deterministic scheduling (`shuffle.sim_time`, the
one place that touches trio's private switch), so the same scenario and seed give the
same run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from shuffle.sim_time import VirtualClock, deterministic_scheduling

MODES = ("sim", "realtime")

T = TypeVar("T")


def make_clock(mode: str) -> trio.abc.Clock | None:
    """The trio clock of a mode: virtual (sim), or trio's default real clock (realtime: None)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return VirtualClock() if mode == "sim" else None


def run(async_fn: Callable[..., Awaitable[T]], *args: Any, mode: str = "sim", seed: int = 0) -> T:
    """`trio.run(async_fn, *args)` with the mode's clock (deterministic scheduling in sim)."""
    clock = make_clock(mode)
    if clock is None:
        return trio.run(async_fn, *args)
    with deterministic_scheduling(seed):
        return trio.run(async_fn, *args, clock=clock)
