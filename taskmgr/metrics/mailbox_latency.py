"""Flink's `mailboxLatencyMs`: how long the mailbox latency measurement's mail waits.

Flink's `MailboxMetricsController` reads a millisecond clock (`SystemClock.relativeTimeMillis()`)
when its timer fires, on the timer thread, and puts a mail into the task's mailbox; the mail
reads the clock again when it runs and adds the difference to a histogram of the last 60
values (`DescriptiveStatisticsHistogram(60)` in `TaskIOMetricGroup`; the REST API gives
`mailboxLatencyMs_mean`, `_median`, `_max`, ...). A task that waits (idle, back-pressured)
runs the mail at once; a busy one after the record in progress, since its mailbox loop
takes mails between records.

Where in a record the timer fires is set by real time: Flink's records do not take exactly
their cost (a 5 ms map's took 5.02-5.14 ms), and over the second between two measurements
that jitter moves the timer anywhere in a record. Real Flink 2.3's busy slow-map maps read
means of 2.27 and 2.51 ms (median 2-3, max 5-6) for 5 ms records: the rest of a record at a
uniformly drawn point of it. Ours take exactly their cost, which would fix the point
(1,001 ms after a record's end falls 1 ms into a 5 ms record, every time), and run in
steps of several records, which end later than Flink's record; so the rest of the record
is drawn (`rest_of_record`, from the task's seed), and what else held the mail up is
added as it happened (StreamTask: time blocked on an output buffer, mails queued before
it). The relative clock's whole milliseconds are not the absolute clock's, which the timer
fires on: each task reads them with its own sub-millisecond offset. Not modelled in sim
mode: the ~0.2 ms a waiting Flink thread takes to wake (a back-pressured source read 0 ms
with 1 ms in 19 % of the readings; ours 0; in realtime mode the wake-up is measured).
"""

from __future__ import annotations

import statistics
from collections import deque

import numpy as np

from taskmgr.processing_time import absolute_time_millis

#: Values the histogram keeps (Flink's `DescriptiveStatisticsHistogram` window).
WINDOW = 60


def rest_of_record(rng: np.random.Generator, record_cost: float) -> float:
    """What is left of a record of `record_cost` s at a point of it drawn uniformly from
    `rng`: when a mail that came during the record runs, in Flink's loop."""
    return float(rng.random()) * record_cost if record_cost > 0 else 0.0


class MailboxLatency:
    """The window of a task's mailbox latency readings (whole ms)."""

    __slots__ = ("_values", "_rng", "_clock_offset")

    def __init__(self, rng: np.random.Generator) -> None:
        self._values: deque[int] = deque(maxlen=WINDOW)
        self._rng = rng
        self._clock_offset = float(rng.uniform(0, 0.001))  # s

    def rest_of_record(self, record_cost: float) -> float:
        """What is left of a record of `record_cost` s at a uniformly drawn point of it."""
        return rest_of_record(self._rng, record_cost)

    def record(self, sent: float, waited: float) -> None:
        """A measurement mail sent at `sent` (s) that waited `waited` s, read in whole
        milliseconds of the relative clock."""
        offset = self._clock_offset
        self._values.append(absolute_time_millis(sent + waited + offset) - absolute_time_millis(sent + offset))

    def snapshot(self) -> dict[str, float]:
        """The histogram's statistics as Flink's REST API names them (none before the first
        measurement)."""
        values = self._values
        if not values:
            return {}
        return {"mailboxLatencyMs_mean": statistics.fmean(values),
                "mailboxLatencyMs_median": float(statistics.median(values)),
                "mailboxLatencyMs_max": float(max(values))}
