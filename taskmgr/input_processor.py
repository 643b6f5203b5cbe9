"""The task's input side: the one place records and events come in (Flink's
`StreamOneInputProcessor` / `StreamMultipleInputProcessor` over `CheckpointedInputGate`s).

`CheckpointedInputGate` reads one logical input (one gate, or several gates of a union,
round-robin) and passes every event through a barrier handler; the handler is a
pass-through until barriers arrive (a later issue), and this is its hook.
`StreamInputProcessor` deserializes buffers per channel and hands the records to the
operator chain in chunks of at most `MAX_CHUNK_TIME` of modelled cost, so that the
mailbox checks output availability between chunks as Flink does between records; a
buffer is recycled (which gives credit back) once its records are processed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from shuffle import kernel
from shuffle.buffer.buffer import Buffer
from shuffle.consumer.input_channel import InputChannelInfo
from shuffle.consumer.single_input_gate import BufferOrEvent, SingleInputGate
from shuffle.serialization.spanning_deserializer import SpanningRecordDeserializer
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.operators.base import OperatorContext, StreamOperator
from taskmgr.operators.formats import RecordFormat
from taskmgr.operators.records import Records, concat, same_kind, split
from taskmgr.task_input import InputStatus, TaskInput  # noqa: F401 (TaskInput: re-exported)

#: Longest modelled processing time of one chunk of records (seconds).
MAX_CHUNK_TIME = 0.010


class BarrierHandler(Protocol):
    def process_event(self, event: object, channel: InputChannelInfo) -> object | None:
        """The event to hand on, or None if the handler consumed it."""


class PassThroughBarrierHandler:
    """Hands every event on unchanged (no checkpoints yet)."""

    def process_event(self, event: object, channel: InputChannelInfo) -> object | None:
        return event


async def wait_any_available(waiters: Sequence[Callable[[], object]]) -> None:
    """Return once any of the `wait_available`-style coroutine functions returns."""
    if len(waiters) == 1:
        await waiters[0]()
        return
    async with kernel.open_nursery() as nursery:
        for wait in waiters:
            async def first(wait: Callable = wait) -> None:
                await wait()
                nursery.cancel_scope.cancel()
            nursery.start_soon(first)


class CheckpointedInputGate:
    """One logical input over its gates; every event passes the barrier handler."""

    def __init__(self, gates: Sequence[SingleInputGate], input_index: int, handler: BarrierHandler) -> None:
        self.gates = list(gates)
        self.input_index = input_index
        self.handler = handler
        self._next = 0

    def poll_next(self) -> BufferOrEvent | None:
        gates = self.gates
        for _ in range(len(gates)):
            gate = gates[self._next]
            self._next = (self._next + 1) % len(gates)
            while not gate.is_finished:
                result = gate.poll_next()
                if result is None:
                    break
                if result.event is None:
                    return result
                event = self.handler.process_event(result.event, result.channel_info)
                if event is not None:
                    return result._replace(event=event)
        return None

    @property
    def is_finished(self) -> bool:
        return all(gate.is_finished for gate in self.gates)

    async def wait_available(self) -> None:
        await wait_any_available([gate.wait_available for gate in self.gates if not gate.is_finished])


class _Pending(NamedTuple):
    """Records of one buffer not processed yet; the buffer is recycled once they are."""

    records: Records
    input_index: int
    channel: InputChannelInfo
    buffer: Buffer


class StreamInputProcessor:
    """Deserializes the task's inputs and feeds the head operator, one chunk per call.

    A chunk is at most `MAX_CHUNK_TIME` of modelled cost. When records are cheap, a chunk
    takes the records of several buffers (of one input; of one channel if the chain
    needs to know the channel of its records, as a verifying sink does). A buffer stays
    in use, and gives its credit back, only once all its records are processed.
    """

    def __init__(self, inputs: Sequence[CheckpointedInputGate], formats: dict[int, RecordFormat],
                 head: StreamOperator, chain_cost: Callable[[], float], io: TaskIOMetricGroup,
                 ctx: OperatorContext, per_channel: bool) -> None:
        self.inputs = list(inputs)
        self.head = head
        self.chain_cost = chain_cost
        self.io = io
        self.ctx = ctx
        self.per_channel = per_channel
        self._deserializers = {
            (gate.gate_index, channel.channel_index): SpanningRecordDeserializer(formats[gate.gate_index])
            for checkpointed in inputs for gate in checkpointed.gates for channel in gate.channels
        }
        self._pending: deque[_Pending] = deque()
        self._num_pending = 0
        self._next = 0

    async def process_input(self) -> InputStatus:
        cost = self.chain_cost()
        wanted = max(1, int(MAX_CHUNK_TIME / cost + 1e-9)) if cost > 0 else 1
        while self._num_pending < wanted and self._poll():
            pass
        if self._pending:
            if cost <= 0:
                wanted = len(self._pending[0].records)
            await self._process_chunk(wanted)
            return InputStatus.MORE_AVAILABLE
        if all(checkpointed.is_finished for checkpointed in self.inputs):
            return InputStatus.END_OF_INPUT
        return InputStatus.NOTHING_AVAILABLE

    def _poll(self) -> bool:
        """Take the next buffer or event of any input (round-robin); False if none has one."""
        inputs = self.inputs
        for _ in range(len(inputs)):
            checkpointed = inputs[self._next]
            self._next = (self._next + 1) % len(inputs)
            result = checkpointed.poll_next()
            if result is not None:
                self._take(result, checkpointed.input_index)
                return True
        return False

    def _take(self, result: BufferOrEvent, input_index: int) -> None:
        self.io.num_bytes_in += result.size
        buffer = result.buffer
        if buffer is None:
            return  # EndOfPartition: the gate tracks it; other events need no action yet
        channel = result.channel_info
        deserializer = self._deserializers[channel.gate_index, channel.channel_index]
        try:
            deserializer.add_buffer(buffer.memory())
            records = deserializer.read()
        except BaseException:
            buffer.recycle()
            raise
        if len(records):
            self._pending.append(_Pending(records, input_index, channel, buffer))
            self._num_pending += len(records)
        else:
            buffer.recycle()

    def _next_run(self, wanted: int) -> tuple[Records, list[Buffer]]:
        """Up to `wanted` records from the front of the queue that can go as one chunk."""
        first = self._pending[0]
        parts: list[Records] = []
        done: list[Buffer] = []
        taken = 0
        while self._pending and taken < wanted:
            entry = self._pending[0]
            if parts and not self._mergeable(first, entry):
                break
            n = wanted - taken
            if n >= len(entry.records):
                self._pending.popleft()
                parts.append(entry.records)
                done.append(entry.buffer)
                n = len(entry.records)
            else:
                head, rest = split(entry.records, n)
                self._pending[0] = entry._replace(records=rest)
                parts.append(head)
            taken += n
        self._num_pending -= taken
        return concat(parts), done

    def _mergeable(self, first: _Pending, entry: _Pending) -> bool:
        return (entry.input_index == first.input_index
                and (not self.per_channel or entry.channel == first.channel)
                and same_kind(first.records, entry.records))

    async def _process_chunk(self, wanted: int) -> None:
        first = self._pending[0]
        chunk, done = self._next_run(wanted)
        self.io.num_records_in += len(chunk)
        self.ctx.current_channel = first.channel
        try:
            await self.head.process(chunk, first.input_index)
        finally:
            for buffer in done:
                buffer.recycle()

    async def wait_available(self) -> None:
        await wait_any_available([c.wait_available for c in self.inputs if not c.is_finished])

    def close(self) -> None:
        """Recycle the buffers of records that will not be processed (the task ends early)."""
        while self._pending:
            self._pending.popleft().buffer.recycle()
        self._num_pending = 0
