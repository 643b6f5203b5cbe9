"""``TaskIOMetricGroup``: a task's record/byte counters and time timers (spec 7.1, 7.2).

The task increments the counters directly (``group.num_records_out += n``) and drives the
timers: ``idle`` while waiting for input, ``soft_backpressure`` while the output is not
available, ``hard_backpressure`` while blocked requesting a buffer mid-record. Busy time is
derived: elapsed since ``mark_task_start`` minus idle minus backpressured.

``snapshot()`` is what the metric sampler reads; ``COUNTERS`` names its cumulative keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from shuffle import kernel
from taskmgr.metrics.mailbox_latency import MailboxLatency
from taskmgr.metrics.timer_gauge import TimerGauge

#: Cumulative keys of ``TaskIOMetricGroup.snapshot()`` (the rest are instantaneous gauges).
COUNTERS = frozenset(
    {
        "numRecordsIn",
        "numRecordsOut",
        "numBytesIn",
        "numBytesOut",
        "numBuffersOut",
        "accumulateIdleTimeMs",
        "accumulateBackPressuredTimeMs",
        "accumulateSoftBackPressuredTimeMs",
        "accumulateHardBackPressuredTimeMs",
        "accumulateBusyTimeMs",
        "mailboxMails",
    }
)

#: Flink's `InputChannelMetrics` (registered in the task's IO group too): what the task's
#: local and remote input channels handed it, buffers (events and flushed slices included)
#: and their bytes. Cumulative, like `COUNTERS`. A tuple: metrics.parquet's rows come in its
#: order, the same in every run (a set's order changes with the interpreter's hash seed).
INPUT_CHANNEL_COUNTERS = ("numBytesInLocal", "numBytesInRemote", "numBuffersInLocal", "numBuffersInRemote")


class AccumulatedTimes(NamedTuple):
    """Time totals of a task in seconds; ``backpressured`` = soft + hard."""

    busy: float
    idle: float
    backpressured: float
    soft_backpressured: float
    hard_backpressured: float


class TaskIOMetricGroup:
    """Counters and timers of one subtask."""

    counters = COUNTERS
    per_period = False

    def __init__(self, clock: Callable[[], float] = kernel.current_time) -> None:
        self._clock = clock
        self._task_start: float | None = None
        self.num_records_in = 0
        self.num_records_out = 0
        self.num_bytes_in = 0
        self.num_bytes_out = 0
        self.num_buffers_out = 0
        #: Flink's `numMailsProcessed`: mails the task's mailbox ran (its per-second rate is
        #: Flink's `mailboxMailsPerSecond`).
        self.num_mails_processed = 0
        #: Flink's `mailboxLatencyMs` (set by the task, which has the seed it draws from).
        self.mailbox_latency: MailboxLatency | None = None
        #: Flink's `mailboxQueueSize` gauge reads this (`register_mailbox_size_supplier`).
        self._mailbox_size: Callable[[], int] | None = None
        self.idle = TimerGauge(clock)
        self.soft_backpressure = TimerGauge(clock)
        self.hard_backpressure = TimerGauge(clock)

    def register_mailbox_size_supplier(self, supplier: Callable[[], int]) -> None:
        """The task's mailbox says how many mails wait in it (Flink's method of that name)."""
        self._mailbox_size = supplier

    def mark_task_start(self) -> None:
        """The task starts running: busy time is counted from here."""
        self._task_start = self._clock()

    def accumulated_times(self) -> AccumulatedTimes:
        """Totals up to now; busy = elapsed - idle - backpressured (never negative)."""
        idle = self.idle.accumulated()
        soft = self.soft_backpressure.accumulated()
        hard = self.hard_backpressure.accumulated()
        elapsed = 0.0 if self._task_start is None else self._clock() - self._task_start
        busy = max(0.0, elapsed - idle - soft - hard)
        return AccumulatedTimes(busy, idle, soft + hard, soft, hard)

    def snapshot(self) -> dict[str, float]:
        """Flink-named values; times in milliseconds as Flink reports them."""
        times = self.accumulated_times()
        return {
            "numRecordsIn": float(self.num_records_in),
            "numRecordsOut": float(self.num_records_out),
            "numBytesIn": float(self.num_bytes_in),
            "numBytesOut": float(self.num_bytes_out),
            "numBuffersOut": float(self.num_buffers_out),
            "mailboxMails": float(self.num_mails_processed),
            "accumulateIdleTimeMs": times.idle * 1000.0,
            "accumulateBackPressuredTimeMs": times.backpressured * 1000.0,
            "accumulateSoftBackPressuredTimeMs": times.soft_backpressured * 1000.0,
            "accumulateHardBackPressuredTimeMs": times.hard_backpressured * 1000.0,
            "accumulateBusyTimeMs": times.busy * 1000.0,
            "maxSoftBackPressureTimeMs": self.soft_backpressure.max_single() * 1000.0,
            "maxHardBackPressureTimeMs": self.hard_backpressure.max_single() * 1000.0,
            **(self.mailbox_latency.snapshot() if self.mailbox_latency is not None else {}),
            **({"mailboxQueueSize": float(self._mailbox_size())} if self._mailbox_size is not None else {}),
        }
