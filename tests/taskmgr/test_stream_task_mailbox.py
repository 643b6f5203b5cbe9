"""The mailbox loop of one task (StreamTask) against Flink 2.3's unit tests of its mailbox:
StreamTaskTest's metric cases, MailboxProcessor's (TaskMailboxProcessorTest) and the batch
semantics of TaskMailboxImpl. A task here runs a scripted input and outputs whose
availability the test sets (Flink's AvailabilityTestInputProcessor and
AvailabilityTestResultPartitionWriter); a test's "other thread" is a kernel task."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import pytest

from shuffle import kernel
from taskmgr.metrics.mailbox_latency import MailboxLatency
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.stream_task import StreamTask
from taskmgr.task_input import InputStatus


class ScriptedInput:
    """A task input with `available` records, one per turn of `cost` s each; without any it
    says NOTHING_AVAILABLE (the task waits idle until `add`), after `end` END_OF_INPUT."""

    def __init__(self, available: int = 0, cost: float = 0.001) -> None:
        self.available = available
        self.cost = cost
        self.ended = False
        self.processed = 0
        #: Called after each record (a step may queue follow-ups or mails), and in the turn
        #: that says END_OF_INPUT.
        self.after_record: Callable[[], None] = lambda: None
        self.at_end: Callable[[], None] = lambda: None
        self._data = kernel.Event()

    def add(self, records: int) -> None:
        self.available += records
        self._data.set()

    def end(self) -> None:
        self.ended = True
        self._data.set()

    async def process_input(self) -> InputStatus:
        if self.available:
            self.available -= 1
            await kernel.sleep(self.cost)
            self.processed += 1
            self.after_record()
            return InputStatus.MORE_AVAILABLE
        if self.ended:
            self.at_end()
            return InputStatus.END_OF_INPUT
        return InputStatus.NOTHING_AVAILABLE

    async def wait_available(self) -> None:
        self._data = kernel.Event()
        await self._data.wait()

    async def before_mail(self) -> None:
        """Nothing owed."""


class TestOutput:
    """A record writer whose availability the test sets."""

    __test__ = False

    def __init__(self, available: bool = True) -> None:
        self.available = available
        self._changed = kernel.Event()

    def is_available(self) -> bool:
        return self.available

    async def wait_available(self) -> None:
        while not self.available:
            self._changed = kernel.Event()
            await self._changed.wait()

    def set_available(self) -> None:
        self.available = True
        self._changed.set()

    def flush_all(self) -> None:
        """Nothing buffered."""


@dataclass
class Steps:
    """The cost of the record in hand, and the subtask's draws (a StepClock)."""

    step_cost: float = 0.0

    def rng(self, purpose: str) -> np.random.Generator:
        return np.random.default_rng(7)


def make_task(task_input: ScriptedInput, *outputs: TestOutput, steps: Steps | None = None) -> StreamTask:
    io = TaskIOMetricGroup()
    io.mailbox_latency = MailboxLatency(np.random.default_rng(1))
    return StreamTask(task_input, list(outputs), io, steps=steps)


def at(seconds: float, action: Callable[[], object]) -> Callable[[], Awaitable[None]]:
    """Another thread that runs `action` `seconds` from now."""
    async def later() -> None:
        await kernel.sleep(seconds)
        action()
    return later


def sleeping_mail(seconds: float, then: Callable[[], object] = lambda: None) -> Callable[[], Awaitable[None]]:
    async def mail() -> None:
        await kernel.sleep(seconds)
        then()
    return mail


def in_ms(gauge_seconds: float) -> float:
    return round(gauge_seconds * 1000, 6)


async def test_back_pressure_pauses_while_a_mail_runs(sim_kernel):
    """StreamTaskTest.testProcessWithUnAvailableOutput (and testProcessWithAvailableOutput):
    a task whose output is unavailable is soft back-pressured until a mail comes (42 ms);
    the mail's 44 ms are not back-pressure (Flink pauses the suspension timer around a mail);
    the mail makes the output available from the task's own thread, so no resume mail; the
    task then processes all its records, never idle."""
    task_input = ScriptedInput(available=10)
    task_input.end()  # after its records
    output = TestOutput(available=False)
    task = make_task(task_input, output)
    async with kernel.open_nursery() as nursery:
        nursery.start_soon(task.invoke)
        await kernel.sleep(0.042)
        task.send_mail(sleeping_mail(0.044, output.set_available))
    io = task.io
    assert task_input.processed == 10
    assert task.io.num_mails_processed == 1 + 2  # and the end's two control mails
    assert in_ms(io.soft_backpressure.accumulated()) == 42
    assert io.idle.accumulated() == 0 and io.hard_backpressure.accumulated() == 0


async def test_idle_time_pauses_while_a_mail_runs(sim_kernel):
    """StreamTaskTest.testProcessWithUnAvailableInput: idle until the mail (42 ms), not
    during its 44 ms; never back-pressured."""
    task_input = ScriptedInput()
    task = make_task(task_input, TestOutput())
    async with kernel.open_nursery() as nursery:
        nursery.start_soon(task.invoke)
        await kernel.sleep(0.042)
        task.send_mail(sleeping_mail(0.044, task_input.end))
    io = task.io
    assert in_ms(io.idle.accumulated()) == 42
    assert io.soft_backpressure.accumulated() == 0 and io.hard_backpressure.accumulated() == 0


@pytest.mark.parametrize("waits_for", ["output", "input"])
async def test_a_wait_ended_from_another_thread_takes_a_resume_mail(sim_kernel, waits_for):
    """MailboxProcessor's DefaultActionSuspension.resume from another thread than the task's
    sends the control mail "resume default action" (TaskMailboxProcessorTest
    testSignalUnAvailable), which the mail counter counts as every mail it runs: an output
    made available (a buffer recycled by a consumer) or input arriving (Netty's thread) ends
    the wait with one mail."""
    task_input = ScriptedInput(available=1 if waits_for == "output" else 0)
    output = TestOutput(available=waits_for != "output")
    task = make_task(task_input, output)
    if waits_for == "output":
        task_input.end()  # after its record
        wake = output.set_available
    else:
        def wake() -> None:
            task_input.add(1)
            task_input.end()
    async with kernel.open_nursery() as nursery:
        nursery.start_soon(task.invoke)
        nursery.start_soon(at(0.030, wake))
        await kernel.sleep(0.0305)  # the record it then takes ends at 31 ms, and the task with it
        assert task.io.num_mails_processed == 1
    assert task_input.processed == 1
    waited = task.io.soft_backpressure if waits_for == "output" else task.io.idle
    assert in_ms(waited.accumulated()) == 30


async def test_a_latency_mail_behind_other_mails_reads_their_time(sim_kernel):
    """StreamTaskTest.testMailboxMetricsMeasurement: a latency measurement, ten mails of
    5 ms and another measurement queued; the queue size gauge (Flink's `mailboxQueueSize`,
    the mails not yet run) reads them all and no latency yet; once they ran it reads 0,
    two latencies were measured, the longer one at least the ten mails' 50 ms."""
    task_input = ScriptedInput()
    task = make_task(task_input)
    task.send_mail(task._latency_measurement(Steps()))
    for _ in range(10):
        task.send_mail(sleeping_mail(0.005))
    task.send_mail(task._latency_measurement(Steps()))
    before = task.io.snapshot()
    assert before["mailboxQueueSize"] == 12
    assert "mailboxLatencyMs_max" not in before  # nothing measured yet
    start = kernel.current_time()
    async with kernel.open_nursery() as nursery:
        nursery.start_soon(task.invoke)
        await kernel.sleep(0.1)
        task_input.end()
    elapsed_ms = (kernel.current_time() - start) * 1000
    after = task.io.snapshot()
    assert after["mailboxQueueSize"] == 0
    assert len(task.io.mailbox_latency._values) == 2
    assert 50 <= after["mailboxLatencyMs_max"] <= elapsed_ms


async def test_latency_is_measured_every_second_and_the_queue_drains(sim_kernel):
    """StreamTaskTest.testMailboxMetricsScheduling: a busy task that gets a mail with every
    record measures its mailbox latency again and again (a timer mail 1,001 ms apart); its
    queue size reads above 0 while mails wait for the record in hand, and 0 at the end."""
    task_input = ScriptedInput(available=600, cost=0.005)
    task_input.end()  # after its records: 3 s
    task = make_task(task_input)
    largest_queue = 0

    async def nothing() -> None:
        """A mail."""

    def mail_and_look() -> None:
        nonlocal largest_queue
        task.send_mail(nothing)
        largest_queue = max(largest_queue, task.io.snapshot()["mailboxQueueSize"])

    task_input.after_record = mail_and_look
    async with kernel.open_nursery() as nursery:
        nursery.start_soon(task.run_mailbox_latency_measurement, Steps(0.005))
        await task.invoke()
        nursery.cancel_scope.cancel()
    assert len(task.io.mailbox_latency._values) >= 2
    assert largest_queue > 0
    assert task.io.snapshot()["mailboxQueueSize"] == 0


@pytest.mark.parametrize("steps", [Steps(0.005), None], ids=["records of 5 ms", "no step clock"])
async def test_a_mail_sent_mid_step_counts_until_flinks_record_in_hand_would_end(sim_kernel, steps):
    """Flink's busy task takes a mail after the record in hand; ours after the step (here
    steps of 10 ms: two records of 5 ms). The queue gauge reads the mail until the rest of
    the record in progress (drawn, < 5 ms) has passed, not until our step ends; a task
    without a step clock counts a mail until it runs."""
    task_input = ScriptedInput(available=3, cost=0.010)
    task_input.end()
    task = make_task(task_input, steps=steps)
    readings = {}

    async def nothing() -> None:
        """A mail."""

    async def look() -> None:
        await kernel.sleep(0.002)
        task.send_mail(nothing)
        readings["sent"] = task.io.snapshot()["mailboxQueueSize"]
        await kernel.sleep(0.0051)  # 7.1 ms into the step: past any record in progress
        readings["later"] = task.io.snapshot()["mailboxQueueSize"]
        await kernel.sleep(0.003)  # the step has ended, the mail ran
        readings["after"] = task.io.snapshot()["mailboxQueueSize"]

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(look)
        await task.invoke()
    assert readings["sent"] == 1
    assert readings["later"] == (0 if steps else 1)
    assert readings["after"] == 0


async def test_a_mail_sent_as_the_input_ends_still_runs(sim_kernel):
    """StreamTaskTest.testExecuteMailboxActionsAfterLeavingInputProcessorMailboxLoop: the
    turn that ends the input sends a mail; the task runs it before it finishes."""
    task_input = ScriptedInput()
    task_input.end()
    task = make_task(task_input)
    ran = []

    async def mail() -> None:
        ran.append(kernel.current_time())

    task_input.at_end = lambda: task.send_mail(mail)
    await task.invoke()
    assert len(ran) == 1


async def test_the_mail_counter_counts_the_control_mails_too(sim_kernel):
    """MailboxProcessor.runMail counts every mail it runs (TaskMailboxProcessorTest's mails,
    the "resume default action" and poison mails alike), so Flink's `mailboxMailsPerSecond`
    counts the mailbox's own control mails: the restore loop's (StreamTask.restoreInternal:
    a mail per input gate requesting its partitions, then suspend() ending the loop) and,
    at the end of input, suspend() and afterInvoke's allActionsCompleted()."""
    task_input = ScriptedInput()
    task_input.end()
    task = make_task(task_input)
    task.restore(num_input_gates=2)
    assert task.io.num_mails_processed == 3
    await task.invoke()
    assert task.io.num_mails_processed == 3 + 2


async def test_a_mail_that_sends_itself_does_not_starve_the_input(sim_kernel):
    """TaskMailboxProcessorTest.testAvoidStarvation (FLINK-14304): a mail that sends itself
    again runs once per turn, as TaskMailboxImpl runs a batch of the mails queued when the
    turn begins; the task still processes every record and ends."""
    task_input = ScriptedInput(available=3)
    task_input.end()
    task = make_task(task_input)
    runs = []

    async def again() -> None:
        runs.append(kernel.current_time())
        await kernel.sleep(0.0001)
        task.send_mail(again)

    task.send_mail(again)
    with kernel.fail_after(1):
        await task.invoke()
    assert task_input.processed == 3
    assert 3 <= len(runs) <= 5  # one a turn, and the one queued as the input ended


def timed_mail(ran: dict[str, float], name: str, seconds: float) -> Callable[[], Awaitable[None]]:
    """A mail that notes when it started (in `ran`, by `name`) and takes `seconds`."""
    async def run() -> None:
        ran[name] = kernel.current_time()
        await kernel.sleep(seconds)
    return run


async def test_mails_that_come_while_mails_run_wait_for_the_next_record(sim_kernel):
    """TaskMailboxImpl's batch (createBatch, tryTakeFromBatch): a busy task runs the mails
    queued when it took the batch; one that comes while they run waits for the next
    record (10 ms here)."""
    task_input = ScriptedInput(available=5, cost=0.010)
    task_input.end()
    task = make_task(task_input)
    ran: dict[str, float] = {}

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(task.invoke)
        nursery.start_soon(at(0.002, lambda: task.send_mail(timed_mail(ran, "long", 0.020))))
        nursery.start_soon(at(0.015, lambda: task.send_mail(timed_mail(ran, "late", 0))))
    assert ran["long"] == pytest.approx(0.010)  # after the first record
    assert ran["late"] == pytest.approx(0.040)  # after the long mail and the second record


async def test_a_waiting_task_takes_mails_as_they_come(sim_kernel):
    """MailboxProcessor.processMailsWhenDefaultActionUnavailable: while the default action
    is suspended (back-pressured here) the task takes each mail as it comes, no batch."""
    task_input = ScriptedInput(available=1)
    output = TestOutput(available=False)
    task = make_task(task_input, output)
    ran: dict[str, float] = {}

    async with kernel.open_nursery() as nursery:
        nursery.start_soon(task.invoke)
        nursery.start_soon(at(0.010, lambda: task.send_mail(timed_mail(ran, "long", 0.020))))
        nursery.start_soon(at(0.020, lambda: task.send_mail(timed_mail(ran, "late", 0))))
        await kernel.sleep(0.050)
        assert task_input.processed == 0
        task_input.end()
        output.set_available()
    assert ran == {"long": pytest.approx(0.010), "late": pytest.approx(0.030)}
    assert in_ms(task.io.soft_backpressure.accumulated()) == 10 + 20


async def test_a_checkpoints_synchronous_part_runs_within_its_record(sim_kernel):
    """A follow-up of a record (an aligned checkpoint's synchronous part, which Flink runs
    within the record whose barrier completed the alignment) runs before the mails that came
    during that record."""
    task_input = ScriptedInput(available=2, cost=0.010)
    task_input.end()
    task = make_task(task_input)
    order = []

    async def follow_up() -> None:
        order.append("synchronous part")

    async def mail() -> None:
        order.append("mail")

    task_input.after_record = lambda: task_input.processed == 1 and task.run_later(follow_up)
    async with kernel.open_nursery() as nursery:
        nursery.start_soon(task.invoke)
        nursery.start_soon(at(0.005, lambda: task.send_mail(mail)))
    assert order == ["synchronous part", "mail"]
