"""Failover: how the JobManager restarts a failed job as a new attempt.

On a task failure the job's `RestartStrategy` decides whether the job restarts. If it does:

1. every task of the job is cancelled: each TaskManager cancels its tasks of the job,
   waits until they have ended and released their partitions (every network buffer back
   in its pool), ends the attempt's accounting, and answers `attempt_cancelled` with the
   records its sources emitted in the attempt;
2. the strategy's delay passes;
3. slots are allocated again (a lost TaskManager's slots are gone: too few slots fail the
   job with `NoResourceAvailableError`), and every subtask is deployed as the job's next
   attempt, with new random attempt ids in its partition ids, from the restore point.

The restore point is the state of the last completed checkpoint, per subtask; without one
the new attempt starts from the beginning: sources emit their records again (all the
failed attempt emitted is replayed) and the counting sinks count the new attempt only, so
the final attempt sees every record once. Restoring a checkpoint (sources rewound to their
checkpointed positions, persisted in-flight data replayed first) is not modelled yet, so
a job that takes checkpoints cannot restart (`check_restartable`): starting it from the
beginning would not be what Flink does.

All tasks restart, as with Flink's `full` failover strategy. Flink 2.x defaults to
`region` (jobmanager.execution.failover-strategy), which restarts the pipelined region of
the failed task: the subtasks connected to it by pipelined exchanges. In a streaming job
with an all-to-all exchange (keyBy, rebalance, broadcast) that region is the whole job;
only jobs made of separate forward-connected pipelines would restart less in Flink.

Downtime is Flink's: from the failure until the new attempt is deployed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from graph import ExecutionGraph
from shuffle import kernel
from taskmgr.restart_strategy import RestartStrategy
from taskmgr.rpc import CancelAttempt
from taskmgr.scheduler import NoResourceAvailableError, SlotOffer, allocate_slots

if TYPE_CHECKING:
    from taskmgr.jobmanager import JobConfig, JobManager, _JobExecution

log = logging.getLogger(__name__)


@dataclass
class RestartRecord:
    """One restart of a job (summary.json's `restart_history`); times in seconds of the job."""

    #: The attempt that failed (0 is the first).
    attempt: int
    failed_at_s: float
    cause: str
    restarted_at_s: float
    downtime_ms: float
    #: Records the failed attempt's sources emitted after the restore point: all of them
    #: when it restarts from the beginning. They are emitted, and processed, again.
    records_replayed: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RestoreNotSupportedError(ValueError):
    """The job takes checkpoints and may restart: restoring a checkpoint is not modelled yet."""


def check_restartable(graph: ExecutionGraph, strategy: RestartStrategy) -> None:
    """`RestoreNotSupportedError` if the job may restart and takes checkpoints."""
    checkpointing = graph.job_graph.checkpointing
    if strategy.strategy != "none" and checkpointing is not None and checkpointing.enabled:
        raise RestoreNotSupportedError(
            f"restart strategy {strategy.strategy!r} with checkpointing: restarting from a checkpoint (sources "
            "rewound, in-flight data replayed) is not modelled yet; use no restarts or no checkpoints")


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class Failover:
    """Restarts one job after its failures, as long as its restart strategy allows."""

    def __init__(self, jobmanager: JobManager, job: _JobExecution, graph: ExecutionGraph,
                 config: JobConfig, start: float) -> None:
        self.jobmanager = jobmanager
        self.job = job
        self.graph = graph
        self.config = config
        self.start = start

    def restore_point(self) -> Mapping[str, Any] | None:
        """The state each subtask (by execution id) of the next attempt starts from: the last
        completed checkpoint's. None: every subtask starts from the beginning (restartable
        jobs take no checkpoints, see `check_restartable`)."""
        return None

    async def recover(self) -> bool:
        """After the job's tasks stopped waiting: True if the job failed and its next
        attempt is ready to deploy (placement allocated, failure cleared); False if there
        is nothing to recover or the failure stands (`job.failure`)."""
        job, strategy = self.job, self.config.restart
        if job.failure is None or job.stopped_early:
            return False
        if not strategy.can_restart(len(job.restart_history)):
            job.recovery_suppressed_by = strategy.describe()
            return False
        failed_at = self._job_time()
        cause = job.failure
        log.info("job %s attempt %d failed at %.3f s (%s); restarting in %g s", job.job_id, job.attempt,
                 failed_at, describe_error(cause), strategy.delay)
        replayed = await self._cancel_attempt()
        if replayed is None:
            return False
        await kernel.sleep(strategy.delay)
        if self._job_time() >= self.config.duration or job.stopped_early:
            return False  # the run is over before the job could restart: the failure stands
        try:
            placement = self._allocate()
        except NoResourceAvailableError as exc:
            exc.__cause__ = cause
            job.failure = exc
            return False
        restarted_at = self._job_time()
        job.restart_history.append(RestartRecord(
            job.attempt, round(failed_at, 6), describe_error(cause), round(restarted_at, 6),
            round((restarted_at - failed_at) * 1000, 3), replayed))
        job.new_attempt(placement)
        return True

    def _job_time(self) -> float:
        return kernel.current_time() - self.start

    async def _cancel_attempt(self) -> int | None:
        """Cancel the job's tasks on every TaskManager and wait until each has answered that
        they ended (or is lost); the records the attempt emitted, None if that took too long."""
        job, jobmanager = self.job, self.jobmanager
        hosts = [tm for tm in dict.fromkeys(job.placement.values()) if tm in jobmanager.task_managers]
        job.cancelled_attempt.clear()
        for task_manager in hosts:
            await jobmanager._send(task_manager, CancelAttempt(job.job_id, job.attempt))
        with kernel.move_on_after(self.config.cancel_timeout):
            await job.wait_for(lambda: all(tm in job.cancelled_attempt or tm not in jobmanager.task_managers
                                           for tm in hosts))
            return sum(job.cancelled_attempt.values())
        cause = TimeoutError(f"the tasks of attempt {job.attempt} did not end within "
                             f"{self.config.cancel_timeout:g} s of their cancellation")
        cause.__cause__ = job.failure
        job.failure = cause
        return None

    def _allocate(self) -> dict[str, str]:
        offers = [SlotOffer(tm.name, tm.num_slots) for tm in self.jobmanager.task_managers.values()]
        return {eid: slot.task_manager for eid, slot in allocate_slots(self.graph, offers).items()}
