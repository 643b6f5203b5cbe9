"""``MetricSampler``: samples every registered metric source once per period.

Each sample appends every value of ``source.snapshot()`` to the ``MetricTable`` (counters
are cumulative, gauges instantaneous; ``source.counters`` names the counters), plus
Flink's per-second metrics derived from the counters' change since the previous sample:

- ``accumulateIdleTimeMs`` -> ``idleTimeMsPerSecond``, ``accumulateSoftBackPressuredTimeMs``
  -> ``softBackPressuredTimeMsPerSecond``, ``accumulateHardBackPressuredTimeMs`` ->
  ``hardBackPressuredTimeMsPerSecond``, ``accumulateBackPressuredTimeMs`` ->
  ``backPressuredTimeMsPerSecond`` (each clamped to [0, 1000]), and with idle and
  backpressure both known ``busyTimeMsPerSecond`` = 1000 - min(idle + backPressured, 1000);
- any other counter ``numX`` -> ``numXPerSecond`` (``numRecordsInPerSecond``,
  ``numBytesOutPerSecond``, ...).

Flink smooths: its meters (MeterView) are the count of the last 60 s over 60, updated every
5 s, and its time gauges (TimerGauge) are updated every 5 s; we report each sample period on
its own, so a plot shows changes at the sampling resolution (README, differences from
Flink). The steady state of a run is the mean over its second half (see ``summary.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import NoReturn, Protocol

from shuffle import kernel
from taskmgr.metrics.table import MetricTable

TIME_RATES = {
    "accumulateIdleTimeMs": "idleTimeMsPerSecond",
    "accumulateSoftBackPressuredTimeMs": "softBackPressuredTimeMsPerSecond",
    "accumulateHardBackPressuredTimeMs": "hardBackPressuredTimeMsPerSecond",
    "accumulateBackPressuredTimeMs": "backPressuredTimeMsPerSecond",
}
MS_PER_SECOND = 1000.0


class MetricSource(Protocol):
    """Anything with Flink-named values, e.g. ``TaskIOMetricGroup`` or a buffer-gauge group."""

    counters: Collection[str]

    def snapshot(self) -> dict[str, float]: ...


@dataclass
class _Registration:
    vertex: str
    subtask: int
    task_manager: str
    source: MetricSource
    last_t: float
    last_values: dict[str, float]


def derive_rates(
    counters: Collection[str], before: dict[str, float], after: dict[str, float], dt: float
) -> dict[str, float]:
    """Flink's per-second metrics from two snapshots ``dt`` seconds apart, in the snapshots' order."""
    rates: dict[str, float] = {}
    for key, value in after.items():
        if key not in counters or key not in before:
            continue
        per_second = (value - before[key]) / dt
        if key in TIME_RATES:
            rates[TIME_RATES[key]] = min(max(per_second, 0.0), MS_PER_SECOND)
        elif not key.startswith("accumulate"):
            rates[f"{key}PerSecond"] = per_second
    idle = rates.get("idleTimeMsPerSecond")
    backpressured = rates.get("backPressuredTimeMsPerSecond")
    if idle is not None and backpressured is not None:
        rates["busyTimeMsPerSecond"] = MS_PER_SECOND - min(idle + backpressured, MS_PER_SECOND)
    return rates


class MetricSampler:
    """Samples registered sources into ``table`` every ``period`` seconds of the run's clock.

    Create it inside the run: times in the table are seconds since its creation (``t0``).
    """

    def __init__(self, period: float, table: MetricTable | None = None) -> None:
        if not period > 0:
            raise ValueError(f"sample period must be positive, got {period!r}")
        self.period = period
        self.table = table if table is not None else MetricTable()
        self.t0 = kernel.current_time()
        self._sources: list[_Registration] = []

    def register(self, vertex: str, subtask: int, task_manager: str, source: MetricSource) -> None:
        """Start sampling ``source``; its values now are the baseline of the first rates."""
        now = kernel.current_time()
        self._sources.append(
            _Registration(vertex, subtask, task_manager, source, now, source.snapshot())
        )

    def unregister_all(self) -> None:
        """Stop sampling every source (their tasks were cancelled for a restart)."""
        self._sources.clear()

    def sample(self) -> None:
        """Take one sample of every source now (the runtime also calls this at the end)."""
        now = kernel.current_time()
        t = round(now - self.t0, 9)  # k * period exactly, not k * period plus float noise of t0
        append = self.table.append
        for reg in self._sources:
            values = reg.source.snapshot()
            dt = now - reg.last_t
            rates = derive_rates(reg.source.counters, reg.last_values, values, dt) if dt > 0 else {}
            for metric, value in (values | rates).items():
                append(t, reg.vertex, reg.subtask, reg.task_manager, metric, float(value))
            reg.last_t, reg.last_values = now, values

    async def run(self) -> NoReturn:
        """Sample at t0 + k * period forever (no drift); cancel to stop."""
        deadline = self.t0
        while True:
            deadline += self.period
            await kernel.sleep_until(deadline)
            self.sample()
