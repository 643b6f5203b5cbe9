"""Flink's ``TimerGauge``: accumulates the time spent between ``mark_start`` and ``mark_end``.

Time is read from the runtime's clock (``kernel.current_time`` by default, injectable for
tests and for code outside a trio run), in seconds. Unlike Flink, which reports a 60 s
moving window, this gauge only keeps the running total and the longest single interval;
per-period rates are derived from the total by the metric sampler.
"""

from __future__ import annotations

from collections.abc import Callable

from shuffle import kernel


class TimerGauge:
    """Accumulated and longest measured interval, in seconds.

    ``mark_start`` while measuring and ``mark_end`` while not measuring are no-ops (as in
    Flink). A running interval counts up to "now" when the gauge is read.
    """

    __slots__ = ("_clock", "_start", "_total", "_max")

    def __init__(self, clock: Callable[[], float] = kernel.current_time) -> None:
        self._clock = clock
        self._start: float | None = None
        self._total = 0.0
        self._max = 0.0

    @property
    def is_measuring(self) -> bool:
        return self._start is not None

    def mark_start(self) -> None:
        if self._start is None:
            self._start = self._clock()

    def mark_end(self) -> None:
        if self._start is not None:
            interval = self._clock() - self._start
            self._total += interval
            self._max = max(self._max, interval)
            self._start = None

    def _running(self) -> float:
        return 0.0 if self._start is None else self._clock() - self._start

    def accumulated(self) -> float:
        """Total measured time, including the running interval up to now."""
        return self._total + self._running()

    def max_single(self) -> float:
        """Longest single interval so far, the running one included."""
        return max(self._max, self._running())
