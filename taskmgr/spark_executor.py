"""A TaskManager inside a task of a Spark barrier stage (one per executor task).

The driver runs the JobManager and starts a barrier stage of one task per TaskManager;
each task runs `run_task_manager` in its executor's Python worker: it serves partitions
on the executor's own address (loopback on a local master), connects to the JobManager
at the address the task closure carries, proves the cluster's secret, and follows the
JobManager until it says shut down. The task's result is the TaskManager's identity.
No Spark barrier sync (allGather) is used: the JobManager tells everyone where everyone is.

A `kill_task_manager` fault for this TaskManager ends the executor's Python process
(`os._exit`) at its time after the job's start: Spark then fails the stage, the
JobManager loses the TaskManager.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.transport.auth import AuthenticatedTransport
from shuffle.transport.tcp import TcpTransport, parse_address
from taskmgr.faults import Fault
from taskmgr.taskmanager import TaskManager, task_manager_name

log = logging.getLogger(__name__)

#: The exit status of an executor Python process a `kill_task_manager` fault ends.
KILLED_EXIT_STATUS = 137
LOOPBACK = "127.0.0.1"
#: How often a fault waits for the job's first task (seconds).
FAULT_POLL_INTERVAL = 0.01


@dataclass(frozen=True)
class ExecutorTaskManagerSpec:
    """What every barrier task needs (it travels in the task closure)."""

    jobmanager_address: str
    secret: bytes
    network: NetworkConfig
    num_slots: int
    #: Local master: bind to loopback (else to the executor's address as Spark knows it).
    local: bool
    faults: tuple[Fault, ...] = ()


def run_task_manager(spec: ExecutorTaskManagerSpec, partition: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """The barrier task: run one TaskManager until the JobManager shuts it down."""
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    index = context.partitionId()
    executor_address = context.getTaskInfos()[index].address
    host = LOOPBACK if spec.local else parse_address(executor_address)[0]
    executor_id = os.environ.get("SPARK_EXECUTOR_ID") or ("driver" if spec.local else executor_address)
    name = task_manager_name(index)
    transport = AuthenticatedTransport(TcpTransport(host), spec.secret)
    task_manager = TaskManager(name, spec.jobmanager_address, transport, spec.network, spec.num_slots,
                               shuffle_address=f"{host}:0", executor_id=executor_id)
    faults = [fault for fault in spec.faults if fault.task_manager == name]
    kernel.run(_serve, task_manager, faults, mode="realtime")
    yield {"name": name, "pid": os.getpid(), "executor_id": executor_id}


async def _serve(task_manager: TaskManager, faults: list[Fault]) -> None:
    """Run the TaskManager and its faults."""
    async with kernel.open_nursery() as nursery:

        async def run_until_shutdown(*, task_status: Any) -> None:
            await task_manager.run(task_status=task_status)
            nursery.cancel_scope.cancel()  # shut down (or the JobManager went away): faults are moot

        await nursery.start(run_until_shutdown)
        for fault in faults:
            nursery.start_soon(_kill_at, task_manager, fault.at)


async def _kill_at(task_manager: TaskManager, at: float) -> None:
    """Exit the process `at` seconds after the job started (once its first task is here)."""
    while (start := task_manager.job_start_time()) is None:
        await kernel.sleep(FAULT_POLL_INTERVAL)
    await kernel.sleep_until(start + at)
    log.warning("fault: %s: the executor's Python process exits now", task_manager.name)
    os._exit(KILLED_EXIT_STATUS)
