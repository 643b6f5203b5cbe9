"""What every operator of a chain shares: its context, its output, modelled cost.

Chained operators call each other directly (`await output.emit(records)` runs the next
operator's `process`); records leaving the task go through a `RecordWriterOutput`.
Records carry no output tag; an emission names its tag (None: the main output) and
reaches the edges with that tag.

A task moves records through its chain in steps (`StreamOperator.begin_step`): Flink's
mailbox takes one record per turn through the whole chain, and runs mails between two; a
step takes as many records as fit in `MAX_CHUNK_TIME` of the chain's modelled cost and end
before the next flush of an output, in one call per operator.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zlib

from graph import Cost, OutputTag, StreamNode
from shuffle import kernel
from shuffle.api.events import AbstractEvent, CheckpointBarrier
from shuffle.consumer.input_channel import InputChannelInfo
from shuffle.serialization.records import FixedWidthFormat, FixedWidthRecords
from shuffle.writer.record_writer import RecordWriter
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.operators.records import Records, as_generic
from taskmgr.task_services import TaskServices

#: Longest modelled processing time of one step of a task's records (seconds).
MAX_CHUNK_TIME = 0.010
#: The same where a mail or priority event must not wait long: Flink runs a checkpoint
#: trigger (a source's mail) or takes an unaligned barrier after the record in hand.
PRIORITY_CHUNK_TIME = 0.001
#: Realtime mode: the most of a modelled-cost sleep's overrun the task's next one makes up
#: (s; `OperatorContext.spend`): a timer's lateness, under a millisecond here; more is a
#: stall of the process (a collection, another process on the core), lost as Flink's
#: thread loses it.
COST_OVERRUN_LIMIT = 0.002


@dataclass
class RunControl:
    """The job's clock origin in this process and the drain switch, shared by a job's tasks.

    `t0` is when the job started (trio time): `Cost.at` and timestamps use time since then.
    After the run's duration the JobManager drains the job: sources stop and modelled
    costs are switched off so that the records in flight reach the sinks quickly.
    """

    t0: float
    costs_enabled: bool = True
    #: The run's duration (job time): its second half is the steady state summaries report.
    duration: float = float("inf")
    #: When the job's current attempt was deployed (trio time; t0 for the first): a restarted
    #: source paces its records from here, as a freshly started one does.
    attempt_start: float | None = None

    def __post_init__(self) -> None:
        if self.attempt_start is None:
            self.attempt_start = self.t0

    def in_steady_state(self, job_time: float) -> bool:
        """In the second half of the run's duration, and not draining: what the pipeline
        holds when the JobManager ends the run reaches the sinks after it (costs off)."""
        return self.costs_enabled and self.duration / 2 <= job_time <= self.duration

    def job_time(self) -> float:
        return kernel.current_time() - self.t0


@dataclass
class OperatorContext:
    """What an operator knows about the subtask it runs in."""

    task_name: str
    vertex_name: str
    subtask_index: int
    parallelism: int
    #: Identifies this subtask among the job's sources (generator sequence numbers carry it).
    origin: int
    seed: int
    run: RunControl
    io: TaskIOMetricGroup
    services: TaskServices
    #: Channel of the buffer being processed (the input processor sets it).
    current_channel: InputChannelInfo | None = None
    #: The shortest buffer timeout of the task's outputs (s; 0 = flush every record, -1 = none):
    #: paced sources emit in steps finer than it, so pacing does not hide the flush latency.
    flush_timeout: float = -1.0
    #: Longest modelled cost of one step (s): `MAX_CHUNK_TIME`, or `PRIORITY_CHUNK_TIME`
    #: where checkpoints must not wait for long steps (the task decides).
    max_step_time: float = MAX_CHUNK_TIME
    #: When the current step began (virtual s) and its modelled cost per record through the
    #: chain (s; `StreamOperator.begin_step`).
    step_start: float = 0.0
    step_cost: float = 0.0
    records_emitted: int = 0
    records_received: int = 0
    #: Realtime mode: how far the last modelled-cost sleep ran past its deadline (s; `spend`).
    cost_overrun: float = field(default=0.0, init=False)

    def rng(self, purpose: str) -> np.random.Generator:
        """A generator for one purpose of this subtask, a function of the run's seed."""
        entropy = [self.seed & 0xFFFF_FFFF_FFFF_FFFF, zlib.crc32(self.vertex_name.encode()),
                   zlib.crc32(purpose.encode()), self.subtask_index]
        return np.random.default_rng(np.random.SeedSequence(entropy))

    def job_rng(self, purpose: str) -> np.random.Generator:
        """A generator for one purpose of the whole job (every subtask draws the same)."""
        entropy = [self.seed & 0xFFFF_FFFF_FFFF_FFFF, zlib.crc32(purpose.encode())]
        return np.random.default_rng(np.random.SeedSequence(entropy))

    def timestamp_ns(self) -> int:
        """Now, as a record timestamp: nanoseconds since the job started."""
        return int(self.run.job_time() * 1e9)

    async def charge(self, cost: Cost | None, n: int) -> None:
        """Spend the modelled processing time of `n` records (sleep n * cost now)."""
        if cost is None or n == 0 or not self.run.costs_enabled:
            return
        per_record = cost.at(self.run.job_time())
        if per_record > 0:
            await self.spend(n * per_record)

    def spend(self, seconds: float) -> Awaitable[None]:
        """Await it: sleeps `seconds` of modelled processing time. In sim mode it is the
        kernel's sleep itself (no coroutine frame around it to enter and resume at every
        step). In realtime mode a timer wakes late (trio: ~0.3-0.6 ms per sleep here:
        epoll's millisecond timeouts and the wakeup), which a cost of 0.1 ms per record
        would multiply, and a task busy without pause would add up; so each sleep is
        shortened by the previous one's overrun (at most `COST_OVERRUN_LIMIT`), and a task
        spends its modelled cost in wall time on average: a 5 ms map handles 200 records/s,
        as Flink's busy thread does, not ~188."""
        if kernel.current_mode() == "sim":
            return kernel.sleep(seconds)
        return self._spend_making_up_overrun(seconds)

    async def _spend_making_up_overrun(self, seconds: float) -> None:
        """Realtime `spend`: sleep until `seconds` from now, less the last sleep's overrun."""
        deadline = kernel.current_time() + seconds - min(self.cost_overrun, COST_OVERRUN_LIMIT)
        await kernel.sleep_until(deadline)
        self.cost_overrun = kernel.current_time() - deadline


class RecordWriterOutput:
    """Writes records and events to one result partition, in the edge's format.

    `supports_unaligned_checkpoints` is the compiler's flag of the edge (Flink's
    `StreamEdge.supportsUnalignedCheckpoints`): off for pointwise, broadcast and custom
    exchanges and for every input of a node that has one.
    """

    def __init__(self, writer: RecordWriter, io: TaskIOMetricGroup,
                 supports_unaligned_checkpoints: bool = True) -> None:
        self.writer = writer
        self.io = io
        self.supports_unaligned_checkpoints = supports_unaligned_checkpoints
        self.fixed_width = isinstance(writer.serializer.format, FixedWidthFormat)

    def broadcast_event(self, event: AbstractEvent, is_priority: bool = False) -> None:
        """Flink's `RecordWriterOutput.broadcastEvent`: on an edge without unaligned
        checkpoints a barrier is forced to align (`with_unaligned_unsupported`) and goes as
        a plain event: it queues behind the data, overtakes and persists nothing, and its
        consumer aligns on it."""
        if isinstance(event, CheckpointBarrier) and not self.supports_unaligned_checkpoints:
            event = event.with_options(event.options.with_unaligned_unsupported())
            is_priority = False
        self.writer.partition.broadcast_event(event, is_priority)

    def headroom(self, limit: int) -> int:
        """Of the next `limit` records, how many this output takes before it turns
        unavailable; generic records (their sizes unknown ahead) are not capped."""
        if not self.fixed_width:
            return limit
        return self.writer.records_before_unavailable(self.writer.serializer.format.wire_size, limit)

    def writable_prefix(self, records: Records) -> int:
        """`headroom`, exact for these records (their channels known); generic records are
        not capped."""
        if not self.fixed_width:
            return len(records)
        return self.writer.writable_prefix(records)

    async def write(self, records: Records) -> None:
        n = len(records)
        if n == 0:
            return
        if self.fixed_width:
            if not isinstance(records, FixedWidthRecords):
                raise TypeError(f"generic records sent to a fixed-width edge of {self.writer.partition.owner_name}")
            await self.writer.emit_batch(records)
        else:
            emit = self.writer.emit
            for value, timestamp in as_generic(records):
                await emit(value, timestamp)
        self.io.num_records_out += n


class Output:
    """An operator's outputs: chained operators and record writers, each for one tag."""

    def __init__(self) -> None:
        self.chained: list[tuple[OutputTag | None, StreamOperator]] = []
        self.writers: list[tuple[OutputTag | None, RecordWriterOutput]] = []

    # Asked before every step, these walk the chain in loops (not sum()/min() over
    # generators), and do not call into the output of an operator that ends the chain (a
    # sink: no chained operator, no writer), which adds nothing.

    def cost_per_record(self) -> float:
        """Modelled cost of one record through the chained operators downstream, now."""
        total = 0.0
        for _, operator in self.chained:
            cost = operator.cost_per_record()
            if operator.output.chained:
                cost += operator.output.cost_per_record()
            total += cost
        return total

    def next_flush_at(self) -> float:
        """When the first of the record writers downstream flushes next (virtual s; inf: none
        will)."""
        first = math.inf
        for _, writer in self.writers:
            first = min(first, writer.writer.next_flush_at)
        for _, operator in self.chained:
            output = operator.output
            if output.writers or output.chained:
                first = min(first, output.next_flush_at())
        return first

    def headroom(self, limit: int) -> int:
        """Of the next `limit` records, how many can go out before an output downstream in
        the chain turns unavailable (taken as one record out per record in)."""
        for _, operator in self.chained:
            output = operator.output
            if output.writers or output.chained:
                limit = output.headroom(limit)
        for _, writer in self.writers:
            limit = writer.headroom(limit)
        return limit

    def writable_prefix(self, records: Records) -> int:
        """Of `records` (for the main output), how many go out before an output turns
        unavailable: exact at the record writers, `headroom`'s estimate through chained
        operators."""
        limit = len(records)
        for _, operator in self.chained:
            limit = operator.output.headroom(limit)
        for tag, writer in self.writers:
            if tag is None:  # a side output's writer gets none of them (and keeps no channels)
                limit = min(limit, writer.writable_prefix(records))
        return limit

    async def emit(self, records: Records, tag: OutputTag | None = None) -> None:
        if not records:  # empty? (truth asks `__len__` alone: a call fewer than len())
            return
        for edge_tag, operator in self.chained:
            if edge_tag == tag:
                await operator.process(records, 0)
        for edge_tag, writer in self.writers:
            if edge_tag == tag:
                await writer.write(records)


class StreamOperator:
    """Base of all operators: `process` a run of records from input `input_index`
    (0 for one-input operators, 1 or 2 for the inputs of a two-input operator)."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        self.node = node
        self.ctx = ctx
        self.output = output

    async def process(self, records: Records, input_index: int) -> None:
        raise NotImplementedError

    def snapshot_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of this operator: its state, under keys of its own in the
        task's snapshot (most operators keep nothing)."""
        return {}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Start from the task's snapshot of the checkpoint the job restarts from."""

    @property
    def state_key(self) -> str:
        """This operator's key in its task's snapshot."""
        return f"operator/{self.node.id}"

    def cost_per_record(self) -> float:
        """The modelled cost of one record now (0 without a cost or while draining)."""
        cost = self.node.cost
        if cost is None or not self.ctx.run.costs_enabled:
            return 0.0
        return cost.at(self.ctx.run.job_time())

    def begin_step(self, ready: int) -> int:
        """Start a step of the task at this operator, the head of its chain: of `ready`
        records, how many go through the chain in it, those whose modelled cost ends within
        the context's `max_step_time` and strictly before the next flush of a record writer
        downstream, which then sees the records Flink's would have written by then (at least
        one; all of them without a cost). Notes when the step began and its cost per record."""
        now = self.ctx.step_start = kernel.current_time()
        cost = self.ctx.step_cost = self.cost_per_record() + self.output.cost_per_record()
        if cost <= 0:
            return ready
        count = int(self.ctx.max_step_time / cost + 1e-9)
        flush_in = self.output.next_flush_at() - now
        if 0 < flush_in <= count * cost:  # a flush while the step runs: the step ends before it
            count = math.ceil(flush_in / cost - 1e-9) - 1
        return max(1, min(ready, count))


def user_method(function: Any, method: str) -> Any:
    """The callable of a user function: the interface method, or the plain callable."""
    return getattr(function, method) if hasattr(function, method) else function
