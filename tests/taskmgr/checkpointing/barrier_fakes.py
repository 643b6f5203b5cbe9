"""Fakes for driving a barrier handler without a network: a gate that logs what the handler
does to it (and which channels it blocked), a task that logs triggers and aborts, a clock
with timers, and a driver that hands events to the handler through `CheckpointedInputGate`
as the task's input processor would."""

from __future__ import annotations

from shuffle.api.events import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfPartitionEvent,
    EventAnnouncement,
)
from shuffle.consumer.input_channel import InputChannelInfo
from shuffle.consumer.single_input_gate import BufferOrEvent
from taskmgr.checkpointing.checkpointed_input_gate import CheckpointedInputGate

ALIGNED = CheckpointOptions()


def ch(i: int, gate: int = 0) -> InputChannelInfo:
    return InputChannelInfo(gate, i)


def barrier(checkpoint_id: int, options: CheckpointOptions = ALIGNED, ts_s: float = 10.0) -> CheckpointBarrier:
    return CheckpointBarrier(checkpoint_id, int(ts_s * 1000), options)


class FakeGate:
    """Logs the handler's calls; `blocked` is what a gate with blocking channels would hold."""

    gate_index = 0

    def __init__(self, log: list) -> None:
        self.log = log
        self.blocked: set[int] = set()

    def block_consumption(self, channel):
        self.log.append(("block", channel.channel_index))
        self.blocked.add(channel.channel_index)

    def resume_consumption(self, channel):
        self.log.append(("resume", channel.channel_index))
        self.blocked.discard(channel.channel_index)

    def checkpoint_started(self, barrier): self.log.append(("started", barrier.id))
    def checkpoint_stopped(self, checkpoint_id): self.log.append(("stopped", checkpoint_id))
    def convert_to_priority_event(self, channel, seq): self.log.append(("prioritize", channel.channel_index, seq))


class FakeTask:
    def __init__(self, log: list) -> None:
        self.log = log
        self.metrics = {}
        self.options = {}

    def init_inputs_checkpoint(self, barrier): self.log.append(("init", barrier.id))
    def alignment_started(self, checkpoint_id, start_delay_ns): pass

    def trigger_checkpoint_on_barrier(self, barrier, metrics):
        self.log.append(("trigger", barrier.id, "unaligned" if barrier.options.is_unaligned else "aligned"))
        self.metrics[barrier.id] = metrics
        self.options[barrier.id] = barrier.options

    def abort_checkpoint_on_barrier(self, checkpoint_id, reason): self.log.append(("abort", checkpoint_id, reason))
    def inputs_finished(self, checkpoint_id): self.log.append(("inputs_finished", checkpoint_id))
    def inputs_failed(self, checkpoint_id, reason): self.log.append(("inputs_failed", checkpoint_id, reason))

    def triggered(self) -> list[int]:
        return [entry[1] for entry in self.log if entry[0] == "trigger"]

    def aborted(self) -> list[int]:
        return [entry[1] for entry in self.log if entry[0] == "abort"]


class Clock:
    """Seconds; timers fire on `advance` (or `run_timers`, to fire late)."""

    def __init__(self) -> None:
        self.now = 10.0
        self.timers = []

    def __call__(self) -> float:
        return self.now

    def register(self, delay, action):
        timer = [self.now + delay, action, False]
        self.timers.append(timer)
        return lambda: timer.__setitem__(2, True)

    def advance(self, to: float) -> None:
        self.now = to
        self.run_timers()

    def run_timers(self) -> None:
        for timer in list(self.timers):
            if timer[0] <= self.now and not timer[2]:
                timer[2] = True
                timer[1]()


class Setup:
    """A handler over one `FakeGate`, with its log, clock, task and a `Driver`."""

    def __init__(self, factory, channels: int = 2, **kwargs) -> None:
        self.log, self.clock = [], Clock()
        self.task = FakeTask(self.log)
        self.gate = FakeGate(self.log)
        self.handler = factory(self.task, [self.gate], channels, self.clock, self.clock.register, **kwargs)
        self.driver = Driver(self.handler, self.gate, self.clock)
        self.feed = self.driver.feed


def make(factory, channels=2):
    """(handler, log, clock, task) of a `Setup`."""
    s = Setup(factory, channels)
    return s.handler, s.log, s.clock, s.task


class Driver:
    """Hands buffers and events to `handler` through a `CheckpointedInputGate` over `gate`.

    Items: ("data", channel, size), ("barrier", id, channel[, options[, created_s]]),
    ("cancel", id, channel), ("eop", channel), ("announce", id, channel, sequence_number[,
    options[, created_s]]); a barrier is created now unless `created_s` says when.
    """

    def __init__(self, handler, gate: FakeGate, clock: Clock | None = None) -> None:
        self.handler = handler
        self.clock = clock
        self.input = CheckpointedInputGate([gate], input_index=0, handler=handler)

    def feed(self, *items) -> None:
        for item in items:
            kind = item[0]
            if kind == "data":
                self.handler.add_processed_bytes(item[2])
                continue
            if kind == "barrier":
                event, channel = self._barrier(item[1], *item[3:]), item[2]
            elif kind == "cancel":
                event, channel = CancelCheckpointMarker(item[1]), item[2]
            elif kind == "eop":
                event, channel = EndOfPartitionEvent.INSTANCE, item[1]
            elif kind == "announce":
                event, channel = EventAnnouncement(self._barrier(item[1], *item[4:]), item[3]), item[2]
            else:
                raise ValueError(f"unknown item {item!r}")
            self.input.handle_event(BufferOrEvent(None, event, ch(channel), False, False, 0))

    def _barrier(self, checkpoint_id: int, options: CheckpointOptions = ALIGNED,
                 created_s: float | None = None) -> CheckpointBarrier:
        if created_s is None:
            created_s = self.clock.now if self.clock is not None else 10.0
        return barrier(checkpoint_id, options, created_s)
