"""Modelled cost in realtime mode: a task spends its cost in wall time on average, although
every timer of the real clock wakes late."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import pytest

from shuffle import kernel
from taskmgr.operators.base import COST_OVERRUN_LIMIT, OperatorContext

#: What each sleep of the fake clock runs over (trio here: ~0.3-0.6 ms per sleep).
LATE = 0.001


class LateClock:
    """A realtime clock whose every sleep wakes `LATE` after its deadline (one whose deadline
    has passed returns at once)."""

    def __init__(self) -> None:
        self.now = 100.0

    def current_time(self) -> float:
        return self.now

    async def sleep_until(self, deadline: float) -> None:
        if deadline > self.now:
            self.now = deadline + LATE


def run_now(coroutine: Coroutine[Any, Any, None]) -> None:
    with pytest.raises(StopIteration):
        coroutine.send(None)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LateClock:
    clock = LateClock()
    monkeypatch.setattr(kernel, "current_mode", lambda: "realtime")
    monkeypatch.setattr(kernel, "current_time", clock.current_time)
    monkeypatch.setattr(kernel, "sleep_until", clock.sleep_until)
    return clock


def context() -> OperatorContext:
    return OperatorContext(task_name="Map (1/1)", vertex_name="Map", subtask_index=0, parallelism=1, origin=0,
                           seed=0, run=None, io=None, services=None)  # type: ignore[arg-type]


def test_back_to_back_costs_make_up_each_sleeps_overrun(clock: LateClock) -> None:
    """100 steps of 10 ms with no pause: 1 s and one overrun, not 1 s plus 100 (a 5 ms/record
    map handled ~188 records/s in realtime where sim mode and Flink handle 200)."""
    ctx, start = context(), clock.now
    for _ in range(100):
        run_now(ctx.spend(0.010))
    assert clock.now - start == pytest.approx(1.0 + LATE)


def test_costs_shorter_than_a_timers_lateness_are_spent_on_average(clock: LateClock) -> None:
    """A paced source with a 0.1 ms chain, one record per wakeup: each sleep took 1.1 ms
    (slow-sink-window's source read busy 301-633 ms/s in realtime, 50 in sim mode)."""
    ctx, spent = context(), 0.0
    for _ in range(100):
        clock.now += 0.002  # waiting for the next record to be due
        start = clock.now
        run_now(ctx.spend(0.0001))
        spent += clock.now - start
    assert spent == pytest.approx(100 * 0.0001, abs=LATE)


def test_a_stall_is_not_made_up(clock: LateClock) -> None:
    """A sleep that ran 50 ms over (the process was stalled) shortens the next by the limit only."""
    ctx = context()
    ctx.cost_overrun = 0.050
    start = clock.now
    run_now(ctx.spend(0.010))
    assert clock.now - start == pytest.approx(0.010 - COST_OVERRUN_LIMIT + LATE)
