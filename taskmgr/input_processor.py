"""The task's input side: the one place records and events come in (Flink's
`StreamOneInputProcessor` / `StreamMultipleInputProcessor` over `CheckpointedInputGate`s).

`CheckpointedInputGate` reads one logical input (one gate, or several gates of a union,
round-robin) and passes every event through a barrier handler; the handler is a
pass-through until barriers arrive (a later issue), and this is its hook.
`StreamInputProcessor` deserializes buffers per channel, recycles them at once (that is
what gives credit back), and hands the records to the operator chain in chunks of at
most `MAX_CHUNK_TIME` of modelled cost, so that the mailbox checks output availability
between chunks as Flink does between records.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

import trio

from shuffle.consumer.input_channel import InputChannelInfo
from shuffle.consumer.single_input_gate import BufferOrEvent, SingleInputGate
from shuffle.serialization.spanning_deserializer import SpanningRecordDeserializer
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.operators.base import OperatorContext, StreamOperator
from taskmgr.operators.formats import RecordFormat
from taskmgr.operators.records import Records, split

#: Longest modelled processing time of one chunk of records (seconds).
MAX_CHUNK_TIME = 0.010


class InputStatus(enum.Enum):
    MORE_AVAILABLE = "more_available"
    NOTHING_AVAILABLE = "nothing_available"
    END_OF_INPUT = "end_of_input"


class TaskInput(Protocol):
    """What the mailbox loop drives: an input processor, or a source."""

    async def process_input(self) -> InputStatus: ...

    async def wait_available(self) -> None: ...


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
    async with trio.open_nursery() as nursery:
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


class StreamInputProcessor:
    """Deserializes the task's inputs and feeds the head operator, one chunk per call."""

    def __init__(self, inputs: Sequence[CheckpointedInputGate], formats: dict[int, RecordFormat],
                 head: StreamOperator, chain_cost: Callable[[], float], io: TaskIOMetricGroup,
                 ctx: OperatorContext) -> None:
        self.inputs = list(inputs)
        self.head = head
        self.chain_cost = chain_cost
        self.io = io
        self.ctx = ctx
        self._deserializers = {
            (gate.gate_index, channel.channel_index): SpanningRecordDeserializer(formats[gate.gate_index])
            for checkpointed in inputs for gate in checkpointed.gates for channel in gate.channels
        }
        self._pending: deque[tuple[Records, int, InputChannelInfo]] = deque()
        self._next = 0

    async def process_input(self) -> InputStatus:
        if self._pending:
            await self._process_chunk()
            return InputStatus.MORE_AVAILABLE
        inputs = self.inputs
        for _ in range(len(inputs)):
            checkpointed = inputs[self._next]
            self._next = (self._next + 1) % len(inputs)
            result = checkpointed.poll_next()
            if result is not None:
                self._take(result, checkpointed.input_index)
                return InputStatus.MORE_AVAILABLE
        if all(checkpointed.is_finished for checkpointed in inputs):
            return InputStatus.END_OF_INPUT
        return InputStatus.NOTHING_AVAILABLE

    def _take(self, result: BufferOrEvent, input_index: int) -> None:
        self.io.num_bytes_in += result.size
        buffer = result.buffer
        if buffer is None:
            return  # EndOfPartition: the gate tracks it; other events need no action yet
        channel = result.channel_info
        deserializer = self._deserializers[channel.gate_index, channel.channel_index]
        try:
            deserializer.add_buffer(buffer.memory())
        finally:
            buffer.recycle()
        records = deserializer.read()
        if len(records):
            self._pending.append((records, input_index, channel))

    async def _process_chunk(self) -> None:
        records, input_index, channel = self._pending[0]
        cost = self.chain_cost()
        n = len(records) if cost <= 0 else max(1, int(MAX_CHUNK_TIME / cost))
        if n >= len(records):
            self._pending.popleft()
            chunk = records
        else:
            chunk, rest = split(records, n)
            self._pending[0] = (rest, input_index, channel)
        self.io.num_records_in += len(chunk)
        self.ctx.current_channel = channel
        await self.head.process(chunk, input_index)

    async def wait_available(self) -> None:
        await wait_any_available([c.wait_available for c in self.inputs if not c.is_finished])
