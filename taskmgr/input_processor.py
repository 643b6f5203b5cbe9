"""The task's input side: the one place records and events come in (Flink's
`StreamOneInputProcessor` / `StreamMultipleInputProcessor` over `CheckpointedInputGate`s).

`StreamInputProcessor` takes one buffer at a time per input, as Flink's deserializer of
each input holds one: the next is polled once every record of the last is processed, and
a buffer is recycled (which gives credit back) when the deserializer is done with it: as
its last record is read if that record ends the buffer, else at the input's next read after
that record is processed, as the deserializer copies the start of the next record away. It hands the
records to the operator chain in chunks, the task's steps (`StreamOperator.begin_step`: at
most the context's `max_step_time` of modelled cost, ending before an output's next
flush), so that the mailbox checks output availability (and mails, and priority events)
between chunks as Flink does between records. With several inputs (a two-input task) the
inputs take turns so that those with data get equal numbers of records, as Flink's picks
an input per record; a chunk of one input stops at what the others have in hand. An
event is handled once the records polled before it are processed, except a priority
event (unaligned barrier, announcement), which is handled at once: the records still unread then are in-flight data of an unaligned checkpoint.
The turn that handles the last channel's EndOfData says END_OF_DATA, before any event
queued behind it (as Flink's input returns it when it meets that event).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from shuffle import kernel
from shuffle.api.events import EndOfData
from shuffle.buffer.buffer import Buffer
from shuffle.channel_state import ChannelStateWriter
from shuffle.consumer.input_channel import InputChannel, InputChannelInfo
from shuffle.consumer.single_input_gate import BufferOrEvent
from shuffle.serialization.record_serializer import RecordSerializer
from shuffle.serialization.records import FixedWidthRecords
from shuffle.serialization.spanning_deserializer import SpanningRecordDeserializer
from taskmgr.checkpointing.checkpointed_input_gate import CheckpointedInputGate
from taskmgr.checkpointing.task_state import ChannelKey, channel_key
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.operators.base import OperatorContext, StreamOperator
from taskmgr.operators.formats import RecordFormat
from taskmgr.operators.records import Records, split
from taskmgr.task_input import InputStatus, TaskInput  # noqa: F401 (TaskInput: re-exported)

@dataclass(slots=True)
class _Pending:
    """Records of one buffer not processed yet (the buffer is recycled once they are), or
    an event polled after them. A slotted class, not a NamedTuple: one made per buffer, at
    one call instead of two, and a chunk's rest is noted in place."""

    records: Records | None
    #: How many records (`len(records)`, asked several times per buffer, counted once).
    count: int
    input_index: int
    channel: InputChannelInfo
    buffer: Buffer | None
    event: BufferOrEvent | None = None
    source: CheckpointedInputGate | None = None
    #: The buffer ends inside a record (the start of the next one): Flink's deserializer
    #: reads its last whole record as INTERMEDIATE_RECORD_FROM_BUFFER and gives the buffer
    #: back at its next read, when it copies that start away (PARTIAL_RECORD).
    ends_mid_record: bool = False


class StreamInputProcessor:
    """Deserializes the task's inputs and feeds the head operator, one chunk per call.

    A chunk is at most the context's `max_step_time` of modelled cost, within one buffer: a
    task holds no buffer beyond the one it reads per input (its channels' queues and credit
    are Flink's), and gives it back when Flink's `SpillingAdaptiveSpanningRecordDeserializer`
    does: as its last record is deserialized, when that record's processing starts, if the
    record ends the buffer (LAST_RECORD_FROM_BUFFER); if the buffer goes on with the start
    of the next record, at the input's next read after that record (PARTIAL_RECORD): not
    while the task waits for its output or runs mails in between.
    """

    def __init__(self, inputs: Sequence[CheckpointedInputGate], formats: dict[int, RecordFormat],
                 head: StreamOperator, io: TaskIOMetricGroup, ctx: OperatorContext) -> None:
        self.inputs = list(inputs)
        self.formats = formats
        self.head = head
        self.io = io
        self.ctx = ctx
        #: One per channel, by gate index, then channel index (a list per gate: a dict entry and
        #: a tuple key per channel cost ~100 bytes more), made when the channel's first buffer
        #: comes (`_deserializer`): a channel that never delivers data costs a list slot.
        self._deserializers: dict[int, list[SpanningRecordDeserializer | None]] = {
            gate.gate_index: [None] * len(gate.channels)
            for checkpointed in self.inputs for gate in checkpointed.gates
        }
        #: Per input (its place in `inputs`), as Flink's `StreamTaskNetworkInput` each hold a
        #: deserializer with a buffer: records of one buffer, or an event after them.
        self._pending_by_input: list[deque[_Pending]] = [deque() for _ in self.inputs]
        #: Every input's gates (`has_priority_events` asks them before every chunk).
        self._gates = [gate for checkpointed in self.inputs for gate in checkpointed.gates]
        #: The input read last (Flink's `lastReadInputIndex`, starting so that the first is read first).
        self._last = len(self.inputs) - 1
        #: Records processed per input (only their differences matter).
        self._served = [0] * len(self.inputs)
        self._single = len(self.inputs) == 1
        #: Channels whose EndOfData has been handled (all of them: end of data).
        self._end_of_data_channels = 0
        self._num_channels = sum(1 for _ in self._channels())
        #: Per input, a buffer whose records are all processed but which ends with the start
        #: of the next record: Flink's deserializer gives it back as it copies that start
        #: away (PARTIAL_RECORD), at the input's next read, so not while the task waits for
        #: its output or runs mails (`_release_held`).
        self._held: list[Buffer | None] = [None] * len(self.inputs)

    async def process_input(self) -> InputStatus:
        """One turn: a chunk of one input's records (or one event). With several inputs,
        Flink's `StreamMultipleInputProcessor` picks an input per record (round-robin among
        those with data, `fairSelectNextIndex`; a two-input task never emits a batch of
        one input's records), so inputs with data get equal numbers of records: here each
        turn goes to the input with data that has had the fewest records (ties round-robin),
        and an input without data gains no claim on later turns."""
        if self._single:
            pending = self._pending_by_input[0]
            if not pending:
                if self._held[0] is not None:
                    self._release_held(0)
                result = self.inputs[0].poll_next()
                if result is None:
                    return InputStatus.END_OF_INPUT if self.is_finished else InputStatus.NOTHING_AVAILABLE
                self._take(result, 0)
                if not pending:  # an event handled at once, or a buffer without a whole record
                    return InputStatus.MORE_AVAILABLE
            return await self._process_head(pending, 0)
        inputs = self.inputs
        n = len(inputs)
        served = self._served
        best = -1
        for k in range(1, n + 1):
            index = (self._last + k) % n
            pending = self._pending_by_input[index]
            if not pending:
                if self._held[index] is not None:
                    self._release_held(index)
                result = inputs[index].poll_next()
                if result is None:
                    continue
                self._take(result, index)
                if not pending:  # an event handled at once, or a buffer without a whole record
                    self._last = index
                    return InputStatus.MORE_AVAILABLE
            if best < 0 or served[index] < served[best]:
                best = index
        if best < 0:
            return InputStatus.END_OF_INPUT if self.is_finished else InputStatus.NOTHING_AVAILABLE
        floor = served[best]
        for index in range(n):
            if not self._pending_by_input[index] and served[index] < floor:
                served[index] = floor
        self._last = best
        return await self._process_head(self._pending_by_input[best], best)

    async def _process_head(self, pending: deque[_Pending], index: int) -> InputStatus:
        """Handle the event at the head of input `index`, or process a chunk of its buffer's
        records: one step (`StreamOperator.begin_step`), not past what the task's outputs
        take before they turn unavailable, nor past the records the other inputs have in
        hand (Flink would interleave them)."""
        head = pending[0]
        if head.records is None:
            pending.popleft()
            head.source.handle_event(head.event)
            if isinstance(head.event.event, EndOfData):
                self._end_of_data_channels += 1
                if self._end_of_data_channels == self._num_channels:
                    return InputStatus.END_OF_DATA  # before any event behind it (a barrier)
            return InputStatus.MORE_AVAILABLE
        wanted = self.head.begin_step(head.count)
        if not self._single:
            for other in self._pending_by_input:
                if other and other is not pending and other[0].records is not None:
                    wanted = min(wanted, other[0].count)
        wanted = self.head.output.headroom(wanted)
        if wanted >= head.count:
            pending.popleft()
            chunk, count, done = head.records, head.count, head.buffer
        else:
            chunk, head.records = split(head.records, wanted)
            head.count -= wanted
            count, done = wanted, None
        self.io.num_records_in += count
        ctx = self.ctx
        ctx.current_channel = head.channel
        # The buffer whose last records these are (None: more of it to come, or restored
        # records in no buffer) goes back as Flink's deserializer gives it back: if its last
        # record ends it, once that record is read, as its processing starts, one record's
        # cost before the chunk's end (an early end of the chunk gives it back then); if it
        # goes on with the start of the next record, after the chunk.
        held = [] if done is None else [done]
        if held and not head.ends_mid_record:
            if count == 1 or ctx.step_cost <= 0:
                held.pop().recycle()
            else:  # the step began now (`begin_step` noted the time)
                kernel.call_at(ctx.step_start + (count - 1) * ctx.step_cost,
                               lambda: held and held.pop().recycle())
        try:
            await self.head.process(chunk, head.input_index)
        except BaseException:
            if held:
                held.pop().recycle()
            raise
        if held:
            if head.ends_mid_record:
                self._held[index] = held.pop()
            else:
                held.pop().recycle()
        if not self._single:
            self._served[index] += count
        return InputStatus.MORE_AVAILABLE

    def _release_held(self, index: int) -> None:
        """Give back input `index`'s held buffer: the task reads that input again."""
        buffer, self._held[index] = self._held[index], None
        buffer.recycle()

    @property
    def is_finished(self) -> bool:
        """Every input gate delivered EndOfPartition on every channel."""
        for checkpointed in self.inputs:  # loops, not all()/any(): asked before every chunk
            if not checkpointed.is_finished:
                return False
        return True

    def unfinished_channels(self) -> list[InputChannelInfo]:
        """The input channels that have not ended (a checkpoint triggered at this task
        treats each as if its barrier had arrived)."""
        return [channel for checkpointed in self.inputs for channel in checkpointed.unfinished_channels()]

    def _take(self, result: BufferOrEvent, index: int) -> None:
        """Queue what input `index` (its place in `inputs`) polled: a buffer's records (a
        buffer without a whole record goes back at once), or an event after them; an event
        that overtook data, or that nothing is queued before, is handled now (EndOfData
        always waits its turn: it ends the input)."""
        self.io.num_bytes_in += result.size
        checkpointed = self.inputs[index]
        pending = self._pending_by_input[index]
        buffer = result.buffer
        channel = result.channel_info
        if buffer is None:
            if (result.has_priority or not pending) and not isinstance(result.event, EndOfData):
                checkpointed.handle_event(result)
            else:
                pending.append(_Pending(None, 0, checkpointed.input_index, channel, None, result, checkpointed))
            return
        if checkpointed.handler is not None:
            checkpointed.handler.add_processed_bytes(result.size)
        deserializer = self._deserializers[channel.gate_index][channel.channel_index] or self._deserializer(channel)
        try:
            deserializer.add_buffer(buffer.memory())
            records = deserializer.read()
        except BaseException:
            buffer.recycle()
            raise
        count = len(records)
        if count:
            pending.append(_Pending(records, count, checkpointed.input_index, channel, buffer,
                                    ends_mid_record=deserializer.has_unfinished_data))
        else:
            buffer.recycle()

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once an input has data or every input finished (one input: its
        wait itself, not a coroutine around it, without wait_any's list)."""
        if self._single:
            return self.inputs[0].wait_available()
        return kernel.wait_any([c.wait_available for c in self.inputs if not c.is_finished])

    async def before_mail(self) -> None:
        """Nothing: records wait in the gates (TaskInput)."""

    # -- priority events (Flink's "process priority event" mail) -----------------------------

    @property
    def has_priority_events(self) -> bool:
        for gate in self._gates:  # the inputs' gates themselves: asked before every chunk
            if gate.has_priority_events:
                return True
        return False

    async def wait_priority_event(self) -> None:
        await kernel.wait_any([c.wait_priority_event for c in self.inputs if not c.is_finished])

    def process_priority_events(self) -> None:
        """Handle the events that overtook data now, between two chunks of records."""
        for index, checkpointed in enumerate(self.inputs):
            while checkpointed.has_priority_events:
                result = checkpointed.poll_next()
                if result is None:
                    break
                self._take(result, index)

    def prepare_input_snapshot(self, writer: ChannelStateWriter, checkpoint_id: int) -> None:
        """Persist what was polled but not processed yet, per channel (Flink's unconsumed
        deserializer buffers): the records waiting here, then a record's partial start."""
        unread: dict[InputChannelInfo, list[bytes]] = {}
        for entry in (entry for pending in self._pending_by_input for entry in pending):
            if entry.records is not None:
                unread.setdefault(entry.channel, []).append(self._wire_bytes(entry.records, entry.channel))
        for _, channel in self._channels():
            info = channel.channel_info
            deserializer = self._deserializers[info.gate_index][info.channel_index]
            partial = deserializer.unconsumed_bytes() if deserializer is not None else b""
            writer.add_input_data(checkpoint_id, channel.channel_state_key, unread.get(info, []) + [partial])

    def restore_input_state(self, state: Mapping[ChannelKey, Sequence[bytes]]) -> None:
        """Queue the restored checkpoint's in-flight input data of each channel ahead of
        anything the channel delivers (Flink's recovered input channels). A record cut at
        the end of a channel's data is completed by what its producer recovers first."""
        for index, channel in self._channels():
            chunks = state.get(channel_key(channel.partition_id, channel.subpartition_index), ())
            if not chunks:
                continue
            info = channel.channel_info
            deserializer = self._deserializer(info)
            deserializer.add_buffer(memoryview(b"".join(chunks)))
            records = deserializer.read()
            if len(records):
                self._pending_by_input[index].append(
                    _Pending(records, len(records), self.inputs[index].input_index, info, None))

    def _deserializer(self, channel: InputChannelInfo) -> SpanningRecordDeserializer:
        """The channel's deserializer, made on first use."""
        per_gate = self._deserializers[channel.gate_index]
        deserializer = per_gate[channel.channel_index]
        if deserializer is None:
            deserializer = SpanningRecordDeserializer(self.formats[channel.gate_index])
            per_gate[channel.channel_index] = deserializer
        return deserializer

    def _channels(self) -> Iterator[tuple[int, InputChannel]]:
        """Every input channel of the task, with the input it belongs to (its place in `inputs`)."""
        for index, checkpointed in enumerate(self.inputs):
            for gate in checkpointed.gates:
                for channel in gate.channels:
                    yield index, channel

    def _wire_bytes(self, records: Records, channel: InputChannelInfo) -> bytes:
        if isinstance(records, FixedWidthRecords):
            return bytes(records.to_wire())
        serializer = RecordSerializer(self.formats[channel.gate_index])
        return b"".join(serializer.serialize(value, timestamp) for value, timestamp in records)

    def close(self) -> None:
        """Recycle the buffers of records that will not be processed (the task ends early)."""
        for pending in self._pending_by_input:
            while pending:
                buffer = pending.popleft().buffer
                if buffer is not None:
                    buffer.recycle()
        for index, buffer in enumerate(self._held):
            if buffer is not None:
                self._release_held(index)
