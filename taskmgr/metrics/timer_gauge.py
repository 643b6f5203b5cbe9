"""Flink's ``TimerGauge``: accumulates the time spent between ``mark_start`` and ``mark_end``.

Time is read from the runtime's clock (``kernel.current_time`` by default, injectable for
tests and for code outside a trio run), in seconds. Unlike Flink, which reports a 60 s
moving window, this gauge keeps the running total; per-period rates are derived from it by
the metric sampler. The longest single interval is Flink's: the longest of those that
ended in the last complete update interval (Flink's metric views update every 5 s) or
were still running at its end, each measured from its start.
"""

from __future__ import annotations

from collections.abc import Callable

from shuffle import kernel

#: Flink's `View.UPDATE_INTERVAL_SECONDS`: how often a TimerGauge's values are updated.
UPDATE_INTERVAL = 5.0


class TimerGauge:
    """Accumulated measured time, and the longest interval of the last update interval, in seconds.

    ``mark_start`` while measuring and ``mark_end`` while not measuring are no-ops (as in
    Flink). A running interval counts up to "now" when the total is read.
    """

    __slots__ = ("_clock", "_start", "_total", "_window_end", "_window_max", "_previous_max")

    def __init__(self, clock: Callable[[], float] = kernel.current_time) -> None:
        self._clock = clock
        self._start: float | None = None
        self._total = 0.0
        #: The update interval in progress ends here (intervals from the gauge's creation).
        self._window_end = clock() + UPDATE_INTERVAL
        self._window_max = 0.0  # longest interval ended in the update interval in progress
        self._previous_max = 0.0  # ... in the last complete one: what Flink reports

    @property
    def is_measuring(self) -> bool:
        return self._start is not None

    def mark_start(self) -> None:
        if self._start is None:
            self._start = self._clock()

    def mark_end(self) -> None:
        start = self._start
        if start is not None:
            now = self._clock()
            if now >= self._window_end:
                self._update(now)
            elapsed = now - start
            self._total += elapsed
            if elapsed > self._window_max:  # a comparison, not max(): once per idle wait
                self._window_max = elapsed
            self._start = None

    def _update(self, now: float) -> None:
        """Close the update intervals that ended by `now` (Flink's `update()` of each)."""
        while now >= self._window_end:
            end = self._window_end
            longest = self._window_max
            if self._start is not None:
                longest = max(longest, end - self._start)  # from its start, as Flink's update()
            self._previous_max = longest
            self._window_max = 0.0
            self._window_end = end + UPDATE_INTERVAL

    def accumulated(self) -> float:
        """Total measured time, including the running interval up to now."""
        return self._total + (0.0 if self._start is None else self._clock() - self._start)

    def max_single(self) -> float:
        """Flink's `getMaxSingleMeasurement`: the longest interval that ended in the last
        complete update interval or ran through its end (counted from its start)."""
        now = self._clock()
        if now >= self._window_end:
            self._update(now)
        return self._previous_max
