"""Faults injected into a run at given times (a scenario's `[[faults]]`).

Each fault happens at `at` seconds after the job starts: at that exact virtual time in sim
mode, as close as the clock allows in realtime mode. What the job does then is the
runtime's own behaviour, as Flink's would be: a lost TaskManager or a broken connection
fails the job with Flink's cause, a paused or slow link only slows it.

| kind | parameters | what happens |
|---|---|---|
| `kill_task_manager` | `task_manager` | the process dies: its connections close, its tasks vanish |
| `drop_connection` | `between` (two TaskManagers) | their connections close (both directions) |
| `pause_link` | `between`, `duration` | their connections take no writes for `duration` (sim) |
| `slow_link` | `between`, `duration`, `bandwidth`, `latency` | their connections run at that speed for `duration` (sim) |
| `pause_task` | `vertex`, `subtask`, `duration` | the subtask processes nothing for `duration` (a GC pause) |
| `block_task` | `vertex`, `subtask`, `duration` | its user function blocks for `duration`, ignoring interrupts: a cancellation waits for it |
| `fail_task` | `vertex`, `subtask`, `message` | the subtask's user function raises `InjectedFailure` |
| `corrupt_frame` | `between` (producer, consumer) | the next message from producer to consumer arrives corrupted |
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shuffle import kernel

if TYPE_CHECKING:
    from taskmgr.cluster import MiniCluster

log = logging.getLogger(__name__)

#: Kinds that need the simulated link (they impair it).
SIM_ONLY = ("pause_link", "slow_link")
#: Kinds that can end a TaskManager's process: a kill, and a blocked task that a cancellation
#: waits for longer than task.cancellation.timeout (its watchdog ends the process). A
#: restart after that places the job on the TaskManagers left.
ENDS_TASK_MANAGER = ("kill_task_manager", "block_task")
FAULT_KINDS = ("kill_task_manager", "drop_connection", "pause_link", "slow_link", "pause_task", "block_task",
               "fail_task", "corrupt_frame")


class InjectedFailure(RuntimeError):
    """The exception a `fail_task` fault makes a user function raise."""


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    task_manager: str | None = None
    between: tuple[str, str] | None = None
    vertex: str | None = None
    subtask: int = 0
    duration: float = 0.0
    bandwidth: float | None = None
    latency: float | None = None
    message: str = "injected failure"

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(FAULT_KINDS)}")


async def inject_faults(mini: MiniCluster, faults: Sequence[Fault]) -> None:
    """Apply each fault at its time after now (the job's start); run until cancelled."""
    start = kernel.current_time()
    async with kernel.open_nursery() as nursery:
        for fault in sorted(faults, key=lambda f: f.at):
            await kernel.sleep_until(start + fault.at)
            log.info("fault at %.3f s: %s", fault.at, fault)
            _apply(mini, fault, nursery)


def _apply(mini: MiniCluster, fault: Fault, nursery: Any) -> None:
    kind = fault.kind
    if kind == "kill_task_manager":
        mini.kill_task_manager(fault.task_manager)
    elif kind in ("drop_connection", "pause_link", "slow_link"):
        streams = _connections_between(mini, *fault.between)
        if kind == "drop_connection":
            for stream in streams:
                nursery.start_soon(kernel.aclose_forcefully, stream)
        else:
            impairment = ({"paused": True} if kind == "pause_link"
                          else {"bandwidth": fault.bandwidth, "latency": fault.latency})
            nursery.start_soon(_impair_for, streams, impairment, fault.duration)
    elif kind == "corrupt_frame":
        producer, consumer = fault.between
        client = mini.task_managers[consumer].env.connection_manager.client(_address(mini, producer))
        if client is not None:
            client.stream.corrupt_next_inbound()
    else:
        # Task faults run in the task's mailbox, between records, but are none of Flink's
        # mails: not counted in mailboxMails (a pause stands for a stall, e.g. a GC pause).
        task = mini.find_task(fault.vertex, fault.subtask)
        if task is None:
            log.warning("fault %s: no running subtask %s of %r", kind, fault.subtask, fault.vertex)
        elif kind == "pause_task":
            task.send_mail(lambda: kernel.sleep(fault.duration), counted=False)
        elif kind == "block_task":
            task.send_mail(lambda: task.run_uninterruptibly(fault.duration), counted=False)
        else:
            task.send_mail(_raiser(InjectedFailure(fault.message)), counted=False)


def _address(mini: MiniCluster, name: str) -> Any:
    return mini.task_managers[name].env.address


def _connections_between(mini: MiniCluster, a: str, b: str) -> list[Any]:
    """The client ends of the connections a -> b and b -> a that exist now."""
    streams = []
    for consumer, producer in ((a, b), (b, a)):
        client = mini.task_managers[consumer].env.connection_manager.client(_address(mini, producer))
        if client is not None and not client.closed:
            streams.append(client.stream)
    if not streams:
        log.warning("fault: no connection between %s and %s", a, b)
    return streams


async def _impair_for(streams: list[Any], impairment: dict[str, Any], duration: float) -> None:
    for stream in streams:
        stream.impair_link(**impairment)
    await kernel.sleep(duration)
    for stream in streams:
        stream.impair_link()


def _raiser(error: BaseException) -> Any:
    async def raise_it() -> None:
        raise error
    return raise_it
