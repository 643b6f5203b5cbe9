"""Failover: how the JobManager restarts a failed job as a new attempt.

On a task failure the job's restart strategy (taskmgr.restart_strategy; unset, Flink's
default: exponential-delay with checkpointing, none without) decides whether the job
restarts and after how long. If it does:

1. every task of the job is cancelled: each TaskManager cancels its tasks of the job,
   waits until they have ended and released their partitions (every network buffer back
   in its pool), ends the attempt's accounting, and answers `attempt_cancelled` with the
   records its sources emitted in the attempt (a task in user code that ignores the
   cancellation ends when that code returns; one still running the job's task
   cancellation timeout later ends its TaskManager, which the JobManager then finds lost:
   the restart waits for either, as Flink's scheduler waits for every cancelled task);
2. the strategy's backoff time passes (at the same time as step 1);
3. slots are allocated again (a lost TaskManager's slots are gone: too few slots fail the
   job with `NoResourceAvailableError`; a dead one not yet found lost still offers its
   slots, and a deployment there fails at once), and every subtask is deployed as the
   job's next attempt, with new random attempt ids in its partition ids, from the restore
   point.

The restore point is the last completed checkpoint (Flink's default: restart from the
latest checkpoint): every subtask starts from its share of it (taskmgr.checkpointing.
task_state). Sources rewind to their checkpointed positions, stateful operators and
verifying sinks get their state back, and the in-flight data an unaligned checkpoint
persisted is replayed first: each producer writes its persisted output back into its
subpartitions, each consumer processes its persisted input before anything it reads.
Records emitted after the checkpoint are emitted again, so the verifying sinks see every
record once across the restart. Without a completed checkpoint the new attempt starts
from the beginning and the sinks count that attempt only. Checkpoints pending at the
failure have failed already (`CHECKPOINT_COORDINATOR_SUSPEND`: the periodic scheduler stops
as soon as a task or the job stops running); their ids are not reused.

All tasks restart, as with Flink's `full` failover strategy. Flink 2.x defaults to
`region` (jobmanager.execution.failover-strategy), which restarts the pipelined region of
the failed task: the subtasks connected to it by pipelined exchanges. In a connected
streaming job with an all-to-all exchange (keyBy, rebalance, broadcast) that region is the
whole job; a job of unconnected pipelines, one whose exchanges are all forward or rescale
at a parallelism above 1, or a BATCH job (BLOCKING exchanges) would restart less in Flink
(README, differences).

Downtime is Flink's: from the failure until the new attempt is deployed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from graph import ExecutionGraph
from graph.stream_graph import IterationBroker
from shuffle import kernel
from taskmgr.checkpointing.task_state import TaskStateSnapshot
from taskmgr.payloads import dump_object
from taskmgr.restart_strategy import RestartStrategy
from taskmgr.rpc import CancelAttempt
from taskmgr.scheduler import NoResourceAvailableError, SlotOffer, allocate_slots, placement_rng

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
    #: The task that failed, as Flink names it (``SlowMap -> Sink: Writer (1/1)``), and its
    #: TaskManager (Flink's exception history: taskName, location); None for a failure of
    #: the job itself (e.g. too many failed checkpoints).
    task: str | None
    task_manager: str | None
    restarted_at_s: float
    downtime_ms: float
    #: Records the failed attempt's sources emitted after the checkpoint the job restarts
    #: from (all of them without one). They are emitted, and processed, again.
    records_replayed: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RestoreNotSupportedError(ValueError):
    """The job takes checkpoints and may restart, but has state a restore cannot bring back."""


def check_restartable(graph: ExecutionGraph, strategy: RestartStrategy) -> None:
    """`RestoreNotSupportedError` if the job may restart from a checkpoint and has an
    iteration, whose feedback edge Flink's checkpoints do not cover either."""
    checkpointing = graph.job_graph.checkpointing
    if checkpointing is None or not checkpointing.enabled:
        return
    resolved = strategy.resolve(checkpointing=True)
    if not resolved.restarts:
        return
    for node in graph.job_graph.stream_graph.nodes.values():
        if isinstance(node.source, IterationBroker):
            default = "" if strategy.strategy else " (Flink's default with checkpointing)"
            raise RestoreNotSupportedError(
                f"restart strategy {resolved.strategy!r}{default} with checkpointing: {node.operator_name!r} is an "
                "iteration; records on its feedback edge are not in checkpoints (as in Flink), so it cannot "
                "restore exactly once; use no restarts (strategy \"none\") or no checkpoints")


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
        #: What the next attempt starts from (`restore_point`), set by `recover`.
        self.next_restore: Mapping[str, bytes] | None = None
        checkpointing = graph.job_graph.checkpointing
        strategy = config.restart.resolve(checkpointing=checkpointing is not None and checkpointing.enabled)
        #: The job's restart decisions (its jitter drawn from the job's seed).
        self.backoff = strategy.create(random.Random(f"{config.seed}/restart-strategy"))

    def restore_point(self) -> tuple[Mapping[str, bytes] | None, int]:
        """The state each subtask (by execution id) of the next attempt starts from, as it
        travels in its deployment descriptor: its share of the last completed checkpoint
        (None: every subtask starts from the beginning); and the records the sources had
        emitted at that point."""
        coordinator = self.job.checkpoint_coordinator
        checkpoint = coordinator.restore_latest_checkpointed_state() if coordinator is not None else None
        if checkpoint is None:
            return None, 0
        snapshots = {eid: TaskStateSnapshot.from_ack(ack) for eid, ack in checkpoint.task_states().items()}
        return ({eid: dump_object(snapshot) for eid, snapshot in snapshots.items()},
                sum(snapshot.records_emitted for snapshot in snapshots.values()))

    async def recover(self) -> bool:
        """After the job's tasks stopped waiting: True if the job failed and its next
        attempt is ready to deploy (placement allocated, failure cleared); False if there
        is nothing to recover or the failure stands (`job.failure`)."""
        job, backoff = self.job, self.backoff
        if job.failure is None or job.stopped_early:
            return False
        failed_at = job.failed_at - self.start
        backoff.notify_failure(failed_at)
        if not backoff.can_restart():
            job.recovery_suppressed_by = str(backoff)
            return False
        cause = job.failure
        task, task_manager = job.failure_origin(self.graph)
        log.info("job %s attempt %d failed at %.3f s (%s); restarting in %g s", job.job_id, job.attempt,
                 failed_at, describe_error(cause), backoff.backoff_time)
        emitted = await self._cancel_attempt()
        if emitted is None:
            return False
        restore, restored_position = self.restore_point()
        # emitted after the checkpoint restored (a lost TaskManager's sources cannot answer)
        replayed = max(0, emitted - restored_position)
        # as Flink's scheduler: the backoff runs from the failure, while the tasks are being cancelled
        await kernel.sleep(max(0.0, failed_at + backoff.backoff_time - self._job_time()))
        if self._job_time() >= self.config.duration or job.stopped_early:
            return False  # the run is over before the job could restart: the failure stands
        try:
            placement = self._allocate()
        except NoResourceAvailableError as exc:
            job.supersede_failure(exc)
            return False
        restarted_at = self._job_time()
        job.restart_history.append(RestartRecord(
            job.attempt, round(failed_at, 6), describe_error(cause), task, task_manager, round(restarted_at, 6),
            round((restarted_at - failed_at) * 1000, 3), replayed))
        job.new_attempt(placement)
        self.next_restore = restore
        return True

    def _job_time(self) -> float:
        return kernel.current_time() - self.start

    async def _cancel_attempt(self) -> int | None:
        """Cancel the job's tasks on every TaskManager and wait, as Flink's scheduler does
        before a restart, until each has answered that they ended or is lost; the records
        their sources had emitted since the job began (a restored position included). None
        if that did not happen within the run (a task stuck in user code that ignores the
        cancellation, on a TaskManager whose watchdog has not ended it yet)."""
        job, jobmanager = self.job, self.jobmanager
        hosts = []
        job.cancelled_attempt.clear()
        for task_manager in dict.fromkeys(job.placement.values()):
            # a cancel RPC that fails (an unreachable TaskManager) ends the cancelling at once, as in Flink
            if await jobmanager._send(task_manager, CancelAttempt(job.job_id, job.attempt)):
                hosts.append(task_manager)
        with kernel.move_on_at(self.start + self.config.duration):
            # a TaskManager that dies now is waited for until the JobManager finds it lost
            await job.wait_for(lambda: job.stopped_early or all(
                tm in job.cancelled_attempt or tm not in jobmanager.task_managers for tm in hosts))
            if not job.stopped_early:
                return sum(job.cancelled_attempt.values())
        return None

    def _allocate(self) -> dict[str, str]:
        offers = [SlotOffer(tm.name, tm.num_slots) for tm in self.jobmanager.task_managers.values()]
        rng = placement_rng(self.config.placement, self.config.seed)
        return {eid: slot.task_manager for eid, slot in allocate_slots(self.graph, offers, rng).items()}
