"""Java int arithmetic where Flink's behaviour depends on it (limits, wrapping counters)."""

from __future__ import annotations

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def next_sequence_number(sequence_number: int) -> int:
    """The next buffer sequence number: a Java int, wrapping after 2^31 - 1 as Flink's does."""
    return sequence_number + 1 if sequence_number != INT_MAX else INT_MIN


def sequence_number_before(sequence_number: int, other: int) -> bool:
    """Whether `sequence_number` comes before `other`: Flink's `(x - y) < 0` in int, wrap-safe."""
    return (sequence_number - other + 2**31) % 2**32 - 2**31 < 0
