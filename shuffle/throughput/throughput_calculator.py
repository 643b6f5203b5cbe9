"""ThroughputCalculator: bytes per second a gate delivered while it had data (spec 6.3).

The gate reports every polled buffer or event (`incoming_data_size`), pauses the
measurement when a poll finds nothing and resumes it when data is there again, so the
result approximates the rate the task consumes at while it is not starved. Time is
whole milliseconds, as Flink's `absoluteTimeMillis`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from shuffle import kernel

MILLIS_IN_SECOND = 1000
_NOT_TRACKED = -1


def now_millis() -> int:
    """The kernel's clock in whole milliseconds (a hair of slack against float noise)."""
    return math.floor(kernel.current_time() * MILLIS_IN_SECOND + 1e-6)


class ThroughputCalculator:
    def __init__(self, clock: Callable[[], int] = now_millis) -> None:
        self.clock = clock
        self.current_throughput = 0
        self._accumulated_bytes = 0
        self._measurement_time = 0
        self._measurement_start = _NOT_TRACKED

    def incoming_data_size(self, size: int) -> None:
        """Count `size` bytes; data coming in resumes a paused measurement."""
        if self._measurement_start == _NOT_TRACKED:
            self._measurement_start = self.clock()
        self._accumulated_bytes += size

    def pause_measurement(self) -> None:
        """The gate has no data: time from now on does not count."""
        if self._measurement_start != _NOT_TRACKED:
            self._measurement_time += self.clock() - self._measurement_start
            self._measurement_start = _NOT_TRACKED

    def resume_measurement(self) -> None:
        if self._measurement_start == _NOT_TRACKED:
            self._measurement_start = self.clock()

    def calculate_throughput(self) -> int:
        """Bytes/s since the last call (the previous value if no time was measured); resets."""
        if self._measurement_start != _NOT_TRACKED:
            now = self.clock()
            self._measurement_time += now - self._measurement_start
            self._measurement_start = now
        size, time_ms = self._accumulated_bytes, self._measurement_time
        self._accumulated_bytes = self._measurement_time = 0
        if time_ms > 0:
            self.current_throughput = int(size / time_ms * MILLIS_IN_SECOND)
        return self.current_throughput
