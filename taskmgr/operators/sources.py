"""Source operators: the input of a source task (they drive the mailbox like an input processor).

`process_input` emits the next batch, one step of the task (about one network buffer of
records per output channel, so the mailbox checks output availability at least once per
buffer of a channel; through a costed chain at most `MAX_CHUNK_TIME` of its cost, so that
mails such as checkpoint triggers run between steps, as Flink's run between records:
`StreamOperator.begin_step`) or says that nothing is due, or that the source ran out
(END_OF_DATA, then END_OF_INPUT; a stopped source skips END_OF_DATA: the run is over);
`wait_available` waits until something is (that wait is idle time, as for a FLIP-27
source waiting on its rate limiter). `stop()` ends the source at the next call;
`before_mail()` runs before the task's mailbox actions.

A paced generator emits in pacing steps (`RATE_QUANTUM`). Where its records go straight
to record writers, the network cannot see a record before a flush or a full buffer, so
the source sleeps through the steps in between (`GeneratorSourceOperator.wait_available`)
and emits them when it wakes, each record stamped with the time of its step, and before a
mailbox action or its stop: the same records reach the network at the same times, with
the same timestamps, for far fewer wakeups.

A source without a modelled cost spends `DEFAULT_SOURCE_COST` per record, so that a
pipeline of free operators still advances virtual time. Through a costed chain each record
of a step is created once the chain has processed the ones before it (Flink's source
emits one record per mailbox turn), and stamped so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graph import CollectionSource, GeneratorSource, SequenceSource, StreamNode
from shuffle import kernel
from shuffle.serialization.records import FixedWidthFormat, FixedWidthRecords
from taskmgr.operators.base import OperatorContext, Output, StreamOperator
from taskmgr.operators.records import Records
from taskmgr.results import ORIGIN_SHIFT
from taskmgr.task_input import InputStatus
from taskmgr.workloads import GeneratorState, RateSchedule

#: Modelled cost of producing one record when the program gives none (10 M records/s).
DEFAULT_SOURCE_COST = 1e-7
#: A rate-limited generator wakes up when this much time's worth of records is due
#: (seconds; one record at least), rather than once per record; at most a hundredth of
#: its output's buffer timeout (per record when that is 0), so that the pacing step stays
#: small against the flush latency it would otherwise blur.
RATE_QUANTUM = 0.010
#: Key prefix of a source's position in its task's snapshot.
SOURCE_STATE_PREFIX = "source/"
#: Records per emission of sources of generic records.
GENERIC_BATCH = 512
#: A throttled generator that fell behind its rate (it was backpressured) makes up at most
#: this many seconds' worth of records, as Flink's rate limiter (Guava's SmoothBursty
#: `RateLimiter.create(rate)`) stores at most one second of unused permits.
MAX_BURST_SECONDS = 1.0
#: Realtime mode: how long before a flush or a metrics reading a source that slept through
#: pacing steps wakes to write them (seconds). Two timers due within the same millisecond
#: wake in one batch of trio's scheduler, whose order within a batch is random: a source
#: due just before the flush would miss it half the time and its records wait a whole
#: buffer timeout more. (Sim mode wakes tasks in the order of their times: no margin.)
REALTIME_WAKE_MARGIN = 0.002


def cost_offsets_ns(cost: float, n: int) -> np.ndarray:
    """When each of `n` records of a step is created after the first (ns), at `cost` seconds
    per record; a prefix of a longer array is this array (element by element the same)."""
    return (np.arange(n) * (cost * 1e9)).astype(np.int64)


class SourceOperator(StreamOperator):
    """Base of sources: `next_records(n)` hands out up to n records, None at the end."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output, batch_size: int) -> None:
        super().__init__(node, ctx, output)
        self.batch_size = max(1, batch_size)
        self.stopped = False
        self.finished = False
        #: (cost per record, `cost_offsets_ns` of it) for `creation_times`: at most twice the
        #: longest step since the cost last changed (a paced source's steps are a few records).
        self._cost_offsets: tuple[float, np.ndarray] | None = None

    def stop(self) -> None:
        self.stopped = True

    async def before_mail(self) -> None:
        """Before the task's mailbox actions run (a checkpoint's snapshot, a stall)."""

    def close(self) -> None:
        """The task ended (finished, failed or cancelled)."""

    @property
    def state_key(self) -> str:
        return f"{SOURCE_STATE_PREFIX}{self.node.id}"

    def snapshot_state(self) -> dict[str, Any]:
        """The source's position: how many records it handed out before the barrier."""
        return {self.state_key: self.ctx.records_emitted}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Rewind to the checkpointed position: the records after it are emitted again."""
        position = state.get(self.state_key, 0)
        self.rewind(position)
        self.ctx.records_emitted += position

    def rewind(self, position: int) -> None:
        """Continue after the first `position` records."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore a position")

    def due(self) -> int:
        """How many records may go out now (rate limits override this)."""
        return self.batch_size

    def next_records(self, n: int) -> Records | None:
        raise NotImplementedError

    async def process_input(self) -> InputStatus:
        if self.stopped or self.finished:
            return InputStatus.END_OF_INPUT
        n = min(self.due(), self.batch_size)
        if n <= 0:
            return InputStatus.NOTHING_AVAILABLE
        if not await self._emit_records(n):
            return InputStatus.END_OF_DATA  # ran out: end of data first, end of input at the next call
        return InputStatus.MORE_AVAILABLE

    def take_records(self, n: int) -> Records | None:
        """The next of up to `n` records that go out before the output turns unavailable
        (Flink checks after every record; at least one); None at the end."""
        return self.next_records(self.output.headroom(n))

    def creation_times(self, n: int) -> int | np.ndarray:
        """Timestamps of the next `n` records of the step (ns since the job started): now for
        the first, and each after the chain's cost per record for the ones before it."""
        now_ns = self.ctx.timestamp_ns()
        cost = self.ctx.step_cost
        if cost <= 0 or n <= 1:
            return now_ns
        offsets = self._cost_offsets
        if offsets is None or offsets[0] != cost or len(offsets[1]) < n:
            offsets = self._cost_offsets = (cost, cost_offsets_ns(cost, 1 << (n - 1).bit_length()))
        return now_ns + offsets[1][:n]

    async def _emit_records(self, n: int) -> bool:
        """Hand out and emit the next of up to `n` records (`take_records`; one step of the
        task); False (and finished) at the end."""
        records = self.take_records(self.begin_step(n))
        if records is None:
            self.finished = True
            return False
        count = len(records)
        self.ctx.records_emitted += count
        cost = self.cost_per_record()
        if cost > 0:
            await self.ctx.spend(count * cost)
        await self.output.emit(records)
        return True

    def cost_per_record(self) -> float:
        """The source's own modelled cost of one record now: its `cost`, else
        `DEFAULT_SOURCE_COST` (0 while draining)."""
        if self.node.cost is None:
            return DEFAULT_SOURCE_COST if self.ctx.run.costs_enabled else 0.0
        return super().cost_per_record()

    async def wait_available(self) -> None:
        await kernel.sleep_forever()


class GeneratorSourceOperator(SourceOperator):
    """Synthetic fixed-width rows (taskmgr.workloads), rate-limited or as fast as possible."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output, batch_bytes: int) -> None:
        source: GeneratorSource = node.source
        wire_size = FixedWidthFormat(source.record_size).wire_size
        super().__init__(node, ctx, output, batch_bytes // wire_size)
        self.state = GeneratorState.for_subtask(source, ctx.seed, ctx.vertex_name, ctx.subtask_index)
        self.state.next_seq = ctx.origin << ORIGIN_SHIFT
        self.schedule = RateSchedule(source.rate, ctx.run.attempt_start) if source.rate > 0 else None
        #: Records emitted in this attempt (what the rate schedule paces; the position,
        #: a restored one included, is `ctx.records_emitted`).
        self.emitted = 0
        #: Records of the schedule given up because the source fell too far behind.
        self.forgone = 0
        self.max_burst = max(1, int(source.rate * MAX_BURST_SECONDS))
        timeout = ctx.flush_timeout
        step = RATE_QUANTUM if timeout < 0 else min(RATE_QUANTUM, timeout / 100)
        self.quantum = max(1, int(source.rate * step))
        self.wire_size = wire_size
        #: The record writers it sleeps for (see `wait_available`), or None: it wakes every step.
        self.writers = ([writer.writer for _, writer in output.writers]
                        if self.schedule is not None and node.cost is None and not output.chained
                        and output.writers and timeout != 0
                        and all(writer.fixed_width for _, writer in output.writers) else None)
        #: (count, last): the steps up to record `last` came while it slept after record
        #: `count`; their records are stamped with their step's time.
        self.slept: tuple[int, int] | None = None

    def due(self) -> int:
        if self.schedule is None:
            return self.batch_size
        due = self.schedule.records_due(kernel.current_time()) - self.forgone - self.emitted
        if due > self.max_burst:
            self.forgone += due - self.max_burst
            due = self.max_burst
        return due

    def next_records(self, n: int) -> Records | None:
        if self.state.exhausted:
            return None
        batch = self.state.peek_batch(n, self._timestamps(n))
        return self._hand_out(batch, len(batch))

    def take_records(self, n: int) -> Records | None:
        """Exact: the next n records are drawn, then cut where the output would turn
        unavailable given the channel of each; the rest are drawn again next time."""
        if self.state.exhausted:
            return None
        batch = self.state.peek_batch(n, self._timestamps(n))
        return self._hand_out(batch, self.output.writable_prefix(batch))

    def _hand_out(self, batch: FixedWidthRecords, n: int) -> FixedWidthRecords:
        """The first `n` records of a drawn batch, now emitted (the generator moves past them)."""
        if n < len(batch):
            batch = FixedWidthRecords.of_rows(batch.rows[:n], batch.format)
        self.state.advance(n)
        self.emitted += n
        self.ctx.services.emitted_per_origin[self.ctx.origin] += n
        return batch

    def snapshot_state(self) -> dict[str, Any]:
        """Also the position per origin, which the exactly-once accounting reads."""
        return super().snapshot_state() | {"source_positions": {self.ctx.origin: self.ctx.records_emitted}}

    def rewind(self, position: int) -> None:
        self.state.skip(position)
        self.ctx.services.emitted_per_origin[self.ctx.origin] += position

    async def wait_available(self) -> None:
        """Until the records of one pacing step are due (at least one record); a source that
        writes straight to record writers sleeps through the steps no one could see (the last
        step before its writers' next flush, or the step that could fill the fullest buffer,
        whichever is first; at most a second's worth)."""
        schedule = self.schedule
        if schedule is None:
            await kernel.sleep_forever()
        count = self.forgone + self.emitted
        if self.writers is None:
            await kernel.sleep_until(schedule.time_due(count + self.quantum))
            return
        try:
            await kernel.sleep_until(schedule.time_due(count + self.quantum * self._steps_unseen(count)))
        finally:
            due = schedule.records_due(kernel.current_time()) - count
            last = count + due - due % self.quantum
            self.slept = (count, last) if last > count else None

    def _steps_unseen(self, count: int) -> int:
        """Pacing steps after record `count` whose records nothing sees before the last of
        them: no full buffer, no flush, no metrics reading (at least one step)."""
        room = min(writer.partition.room_bytes() for writer in self.writers) // self.wire_size
        steps = min(room, self.max_burst) // self.quantum
        margin = REALTIME_WAKE_MARGIN if kernel.current_mode() == "realtime" else 0.0
        flush_at = min(writer.next_flush_at for writer in self.writers)
        if flush_at < math.inf:
            steps = min(steps, self._steps_before(flush_at - margin, count))
        reading_at = self.ctx.services.sampler.next_reading_at(kernel.current_time())
        steps = min(steps, self._steps_before(reading_at - margin, count))
        remaining = self.state.remaining
        if remaining is not None:  # a bounded source ends at the step after its last record
            steps = min(steps, -(-remaining // self.quantum))
        return max(1, steps)

    def _steps_before(self, deadline: float, count: int) -> int:
        """Whole steps after record `count` that, slept through and written when the last of
        them is due (each record after the source's cost), are written strictly before
        `deadline`: a flush or sample there sees them, as Flink's would see records it wrote
        one by one as they came due (a step due at the deadline itself came after the flush
        or sample there, whose timer was set first)."""
        quantum, schedule = self.quantum, self.schedule
        cost = self.cost_per_record()
        steps = (schedule.records_due(deadline) - count) // quantum
        while steps > 0 and schedule.time_due(count + steps * quantum) + steps * quantum * cost >= deadline:
            steps -= 1
        return steps

    def _timestamps(self, n: int) -> np.ndarray | int:
        """`creation_times` for records emitted as they came due; for records of steps slept through (the
        next n from `slept`), the time of their step, when per-step pacing emitted them."""
        created = self.creation_times(n)
        slept = self.slept
        first = self.forgone + self.emitted + 1
        if slept is None or first > slept[1]:
            self.slept = None
            return created
        count, last = slept
        records = np.arange(first, first + n, dtype=np.int64)
        steps = count - (count - records) // self.quantum * self.quantum
        step_ns = ((self.schedule.start + steps / self.schedule.rate - self.ctx.run.t0) * 1e9).astype(np.int64)
        return np.where(records <= last, step_ns, created)

    async def before_mail(self) -> None:
        """Emit the steps slept through before a mailbox action (a checkpoint's position
        includes them, as with per-step pacing). Running out is left to `process_input`,
        which says so (END_OF_DATA)."""
        while self.slept is not None and not self.state.exhausted:
            n = min(self.slept[1] - self.forgone - self.emitted, self.batch_size)
            if n <= 0:
                self.slept = None
                return
            await self._emit_records(n)
            if not all(writer.is_available() for writer in self.writers):
                return  # back-pressured: the rest goes out as the task's output allows

    async def process_input(self) -> InputStatus:
        if self.stopped:
            await self.before_mail()  # the steps due before the stop
        return await super().process_input()

    def close(self) -> None:
        """Cancelled while it slept: per-step pacing had written the steps slept through into
        buffers that the cancellation dropped, so they count as emitted (and are replayed)."""
        slept, self.slept = self.slept, None
        if slept is not None and not self.finished:
            n = slept[1] - self.forgone - self.emitted
            records = self.next_records(n) if n > 0 else None
            if records is not None:
                self.ctx.records_emitted += len(records)


def sequence_split(start: int, end: int, index: int, splits: int) -> range:
    """Split `index` of `splits` of the numbers start..end (inclusive), as Flink's
    NumberSequenceIterator.split cuts them: equal shares, the remainder one each to the
    first splits (subtask i reads split i here; Flink hands splits out as readers ask)."""
    share, extra = divmod(end - start + 1, splits)
    first = start + index * share + min(index, extra)
    return range(first, first + share + (index < extra))


class ListSourceOperator(SourceOperator):
    """`from_sequence` (this subtask's share of the range) and `from_collection` (p=1)."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output, GENERIC_BATCH)
        source = node.source
        if isinstance(source, SequenceSource):
            self.values: Any = sequence_split(source.start, source.end, ctx.subtask_index, ctx.parallelism)
        elif isinstance(source, CollectionSource):
            self.values = source.elements
        else:
            raise TypeError(f"unsupported source {source!r} of {node.operator_name}")
        self.position = 0

    def rewind(self, position: int) -> None:
        self.position = position

    def next_records(self, n: int) -> Records | None:
        if self.position >= len(self.values):
            return None
        chunk = self.values[self.position:self.position + n]
        self.position += len(chunk)
        created = self.creation_times(len(chunk))
        if isinstance(created, int):
            return [(value, created) for value in chunk]
        return list(zip(chunk, created.tolist()))


class IterationHeadOperator(SourceOperator):
    """Emits what the iteration tail of the same slot fed back; ends after waiting
    `wait_time` seconds for feedback (0: waits until the job stops it)."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output, GENERIC_BATCH)
        broker = node.source
        self.wait_time = broker.wait_time if broker.wait_time > 0 else math.inf
        self.channel = ctx.services.iteration_channel(broker.broker_id, ctx.subtask_index)
        self.head: list[tuple[Any, int]] = []

    def next_records(self, n: int) -> Records | None:
        records, self.head = self.head, []
        queue = self.channel.queue
        while len(records) < n and len(queue):
            records.append(queue.get_nowait())
        return records

    def due(self) -> int:
        return self.batch_size if self.head or self.channel.pending() else 0

    async def wait_available(self) -> None:
        with kernel.move_on_after(self.wait_time):
            self.head.append(await self.channel.queue.get())
            return
        self.finished = True
