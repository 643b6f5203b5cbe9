"""BufferDebloater: the buffer size a gate announces to its producers (spec 6.4).

From the measured throughput and the buffers in use it asks `BufferSizeEMA` for a size
such that all in-flight input takes `target` to consume, and announces it only when it
differs from the last announced one by the threshold, or reaches the minimum or maximum.
"""

from __future__ import annotations

from shuffle.throughput.buffer_size_ema import BufferSizeEMA

MILLIS_IN_SECOND = 1000


class BufferDebloater:
    def __init__(self, target_ms: int, max_buffer_size: int, min_buffer_size: int,
                 threshold_percentages: int, number_of_samples: int,
                 starting_buffer_size: int | None = None) -> None:
        starting = max_buffer_size if starting_buffer_size is None else starting_buffer_size
        self.target_ms = target_ms
        self.max_buffer_size = max_buffer_size
        self.min_buffer_size = min_buffer_size
        self.threshold_factor = threshold_percentages / 100.0
        self.last_buffer_size = starting  # the last size announced
        self.ema_size = starting  # the last size calculated (announced or not)
        self.last_estimated_time_to_consume_ms = 0
        self.ema = BufferSizeEMA(max_buffer_size, min_buffer_size, number_of_samples, starting)

    def recalculate_buffer_size(self, current_throughput: int, buffers_in_use: int) -> int | None:
        """The size to announce, or None to stay quiet; updates the time-to-consume estimate."""
        buffers = max(1, buffers_in_use)
        desired_total = current_throughput * self.target_ms // MILLIS_IN_SECOND
        new_size = self.ema_size = self.ema.calculate_buffer_size(desired_total, buffers)
        self.last_estimated_time_to_consume_ms = new_size * buffers * MILLIS_IN_SECOND // max(1, current_throughput)
        if self.skip_update(new_size):
            return None
        self.last_buffer_size = new_size
        return new_size

    def skip_update(self, new_size: int) -> bool:
        """Quiet for the same size or a change below the threshold; min and max always go out."""
        if new_size == self.last_buffer_size:
            return True
        if new_size <= self.min_buffer_size or new_size >= self.max_buffer_size:
            return False
        delta = int(self.last_buffer_size * self.threshold_factor)
        return abs(new_size - self.last_buffer_size) < delta
