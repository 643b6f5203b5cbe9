"""BufferSizeEMA: the exponential moving average of the desired buffer size (spec 6.4).

Flink 2.x keeps the average as a double and rounds what it returns (`Math.round`), so
that a small alpha cannot get stuck; the older truncating version (the spec's first test
vectors) froze at small sizes. Each step moves at most as far up as a halving would move
down: the instant size is capped at twice the current one.
"""

from __future__ import annotations

import math


def java_round(value: float) -> int:
    """Java's `Math.round`: half rounds up (towards positive infinity)."""
    return math.floor(value + 0.5)


class BufferSizeEMA:
    def __init__(self, max_buffer_size: int, min_buffer_size: int, number_of_samples: int,
                 starting_buffer_size: int | None = None) -> None:
        self.max_buffer_size = max_buffer_size
        self.min_buffer_size = min_buffer_size
        self.alpha = 2.0 / (number_of_samples + 1)
        self.last_buffer_size = float(max_buffer_size if starting_buffer_size is None else starting_buffer_size)

    def calculate_buffer_size(self, total_buffer_size_in_bytes: int, total_buffers: int) -> int:
        """The next size for `total_buffers` buffers to hold `total_buffer_size_in_bytes`."""
        if total_buffer_size_in_bytes < 0:
            raise ValueError("Size of buffer should be non negative")
        if total_buffers <= 0:
            raise ValueError("Number of buffers should be positive")
        last = self.last_buffer_size
        desirable = min(total_buffer_size_in_bytes / total_buffers, 2 * last)
        last += self.alpha * (desirable - last)
        self.last_buffer_size = max(self.min_buffer_size, min(last, self.max_buffer_size))
        return java_round(self.last_buffer_size)
