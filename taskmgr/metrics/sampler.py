"""``MetricSampler``: samples every registered metric source once per period.

Each sample appends every value of ``source.snapshot()`` to the ``MetricTable`` (counters
are cumulative, gauges instantaneous; ``source.counters`` names the counters), plus
Flink's per-second metrics derived from the counters' change since the previous sample:

- ``accumulateIdleTimeMs`` -> ``idleTimeMsPerSecond``, ``accumulateSoftBackPressuredTimeMs``
  -> ``softBackPressuredTimeMsPerSecond``, ``accumulateHardBackPressuredTimeMs`` ->
  ``hardBackPressuredTimeMsPerSecond``, ``accumulateBackPressuredTimeMs`` ->
  ``backPressuredTimeMsPerSecond`` (each clamped to [0, 1000]), and with idle and
  backpressure both known ``busyTimeMsPerSecond`` = 1000 - min(idle + backPressured, 1000);
- any other counter ``X`` -> ``XPerSecond`` (``numRecordsInPerSecond``,
  ``numBytesOutPerSecond``, ``mailboxMailsPerSecond``, ...).

Counters are read at the end of each period (t0 + k * period), so rates cover whole periods.
Gauges are instantaneous, and a reporter or the web UI reads Flink's at wall-clock moments
that bear no relation to the job's own timers; read on the period grid, they would lock to
a job's periodic work (output flushes every 100 ms, a buffer filled every so many records)
and show one phase of it (a flushing source's outputQueueSize near its peak, 2,767 B, where
real Flink's readings average 1,421 B). Given a random generator (the TaskManagers seed one
from the run's seed), the sampler reads each period's gauges at a random instant of that
period instead: deterministic per seed, and their mean over a run is the time average.

Flink smooths: its meters (MeterView) are the count of the last 60 s over 60, updated every
5 s, and its time gauges (TimerGauge) the mean of their last twelve 5 s slots (fewer in the
first minute), updated every 5 s; we report each sample period on
its own, so a plot shows changes at the sampling resolution (README, differences from
Flink). The steady state of a run is the mean over its second half (see ``summary.py``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from shuffle import kernel
from taskmgr.metrics.table import MetricTable

TIME_RATES = {
    "accumulateIdleTimeMs": "idleTimeMsPerSecond",
    "accumulateSoftBackPressuredTimeMs": "softBackPressuredTimeMsPerSecond",
    "accumulateHardBackPressuredTimeMs": "hardBackPressuredTimeMsPerSecond",
    "accumulateBackPressuredTimeMs": "backPressuredTimeMsPerSecond",
}
MS_PER_SECOND = 1000.0
#: Decimals of the time rates (ms/s): a nanosecond per second. Totals of float seconds
#: subtracted carry noise far below it (an idle sink's busy time read 2.3e-13 ms/s).
TIME_RATE_DIGITS = 6


class MetricSource(Protocol):
    """Anything with Flink-named values, e.g. ``TaskIOMetricGroup`` or a buffer-gauge group."""

    counters: Collection[str]
    #: Its values sum up the period a sample ends (a sink's latency percentiles), and reading
    #: them starts the next: read only at the period's end, never at a gauge instant.
    per_period: bool

    def snapshot(self) -> dict[str, float]: ...


@dataclass
class _Registration:
    vertex: str
    subtask: int
    task_manager: str
    source: MetricSource
    last_t: float
    last_values: dict[str, float]
    #: Gauges read at this period's random instant (empty: read them with the counters).
    gauges: dict[str, float] = field(default_factory=dict)


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
            rates[TIME_RATES[key]] = round(min(max(per_second, 0.0), MS_PER_SECOND), TIME_RATE_DIGITS)
        elif not key.startswith("accumulate"):
            rates[f"{key}PerSecond"] = per_second
    idle = rates.get("idleTimeMsPerSecond")
    backpressured = rates.get("backPressuredTimeMsPerSecond")
    if idle is not None and backpressured is not None:
        rates["busyTimeMsPerSecond"] = round(MS_PER_SECOND - min(idle + backpressured, MS_PER_SECOND),
                                             TIME_RATE_DIGITS)
    return rates


class MetricSampler:
    """Samples registered sources into ``table`` every ``period`` seconds of the run's clock.

    Create it inside the run: times in the table are seconds since its creation (``t0``).
    With ``rng``, each period's gauges are read at an instant drawn from it (module doc).
    """

    def __init__(self, period: float, table: MetricTable | None = None,
                 rng: random.Random | None = None) -> None:
        if not period > 0:
            raise ValueError(f"sample period must be positive, got {period!r}")
        self.period = period
        self.table = table if table is not None else MetricTable()
        self.t0 = kernel.current_time()
        #: When the last sample was taken (kernel time; -inf before the first).
        self.last_sample_at = -math.inf
        self._rng = rng
        #: When `run` reads values next (kernel time; None while it is not running).
        self._next_reading: float | None = None
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

    def read_gauges(self) -> None:
        """Read every source's gauges now, for the next sample (not per-period sources')."""
        for reg in self._sources:
            if reg.source.per_period:
                continue
            counters = reg.source.counters
            reg.gauges = {key: value for key, value in reg.source.snapshot().items() if key not in counters}

    def sample(self) -> None:
        """Take one sample of every source now (the runtime also calls this at the end):
        its counters and rates now, its gauges as `read_gauges` read them in this period
        (now, if it did not)."""
        now = kernel.current_time()
        t = round(now - self.t0, 9)  # k * period exactly, not k * period plus float noise of t0
        append = self.table.append
        for reg in self._sources:
            values = reg.source.snapshot()
            dt = now - reg.last_t
            rates = derive_rates(reg.source.counters, reg.last_values, values, dt) if dt > 0 else {}
            for metric, value in (values | reg.gauges | rates).items():
                append(t, reg.vertex, reg.subtask, reg.task_manager, metric, float(value))
            reg.last_t, reg.last_values, reg.gauges = now, values, {}
        self.last_sample_at = now

    def next_reading_at(self, now: float) -> float:
        """The next instant at or after `now` at which the sampler reads any value (a gauge
        reading or a sample): what a task writes before it, the reading sees."""
        if self._next_reading is not None and self._next_reading >= now:
            return self._next_reading
        return self.t0 + (math.floor((now - self.t0) / self.period) + 1) * self.period

    async def run(self, until: float = math.inf) -> None:
        """Sample at t0 + k * period (no drift) up to `until` (kernel time), reading gauges
        at each period's random instant; the gauges of the period `until` cuts short are
        read too if their instant comes before it (the caller samples at the end)."""
        deadline = self.t0
        try:
            while deadline < until:
                start, deadline = deadline, deadline + self.period
                if self._rng is not None:
                    instant = start + self._rng.random() * self.period
                    if instant >= until:
                        return
                    self._next_reading = instant
                    await kernel.sleep_until(instant)
                    self.read_gauges()
                if deadline > until:
                    return
                self._next_reading = deadline
                await kernel.sleep_until(deadline)
                self.sample()
        finally:
            self._next_reading = None
