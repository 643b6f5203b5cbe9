"""Flink's processing time as tasks and the JobManager read it, and its timers.

The clock reads whole milliseconds (`System.currentTimeMillis()`, `Clock.absoluteTimeMillis()`).
A timer registered on a task's `SystemProcessingTimeService` for time T fires 1 ms after T
(`ProcessingTimeServiceUtil.getProcessingTimeDelay`, which delays every future timer by 1 ms
to match the semantics of watermarks), so a timer d ms ahead of the clock fires d + 1 ms
later. The buffer debloater's timer and the alignment timer of a timeoutable barrier are
such timers.
"""

from __future__ import annotations

import math


def absolute_time_millis(seconds: float) -> int:
    """Flink's `Clock.absoluteTimeMillis()` at a time of the run's clock (s): whole
    milliseconds, floored (barrier timestamps and the checkpoint figures Flink takes from it)."""
    return math.floor(seconds * 1000 + 1e-6)  # + 1 ns: a float sum of sleeps lands just under a whole ms


def timer_delay(timestamp_ms: int, now: float) -> float:
    """Seconds from `now` (s) until a processing-time timer registered now for `timestamp_ms`
    fires (`getProcessingTimeDelay`: 1 ms after it; at once for a time already past)."""
    current_ms = absolute_time_millis(now)
    return (timestamp_ms - current_ms + 1) / 1000 if timestamp_ms >= current_ms else 0.0
