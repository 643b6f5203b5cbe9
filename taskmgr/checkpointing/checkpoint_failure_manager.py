"""CheckpointFailureManager: when failed checkpoints fail the job (Flink's
`execution.checkpointing.tolerable-failed-checkpoints`).

Flink 2.3 counts consecutive failures of five reasons only (a checkpoint expiring, a
declined or failed asynchronous part, I/O errors, a failed finalization; not declines of
tasks that are not ready, ended inputs, subsumed or aborted checkpoints, failovers,
blocking outputs). Once more than the tolerable number (default 0: the first) have failed
in a row, the job fails with a FlinkRuntimeException, which its restart strategy then
handles. A completed checkpoint resets the count; a failure of a checkpoint older than the
last completed one does not count, nor a second failure of one checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable

#: Failure reasons Flink 2.3 counts against the tolerable number (CheckpointFailureManager's
#: checkFailureCounter).
COUNTED_REASONS = frozenset({"CHECKPOINT_EXPIRED", "CHECKPOINT_DECLINED", "CHECKPOINT_ASYNC_EXCEPTION",
                             "IO_EXCEPTION", "FINALIZE_CHECKPOINT_FAILURE"})
#: Flink's CheckpointFailureReason messages for the reasons this runtime produces.
REASON_MESSAGES = {"CHECKPOINT_EXPIRED": "Checkpoint expired before completing."}


class FlinkRuntimeException(RuntimeError):
    """Flink's generic runtime exception (here: too many checkpoints failed in a row)."""


class CheckpointFailureManager:
    def __init__(self, tolerable_failures: int, fail_job: Callable[[BaseException], None]) -> None:
        self.tolerable_failures = tolerable_failures
        self.fail_job = fail_job
        self.continuous_failures = 0
        self.last_succeeded_id = 0
        self._counted: set[int] = set()

    def handle_checkpoint_failure(self, checkpoint_id: int, reason: str) -> None:
        """A checkpoint failed for `reason` (Flink's CheckpointFailureReason name)."""
        if reason not in COUNTED_REASONS or checkpoint_id <= self.last_succeeded_id or checkpoint_id in self._counted:
            return
        self._counted.add(checkpoint_id)
        self.continuous_failures += 1
        if self.continuous_failures > self.tolerable_failures:
            self.continuous_failures = 0
            self._counted.clear()
            message = REASON_MESSAGES.get(reason, reason)
            self.fail_job(FlinkRuntimeException(
                f"Exceeded checkpoint tolerable failure threshold. The latest checkpoint failed due to {message}, "
                "view the Checkpoint History tab or the Job Manager log to find out why continuous checkpoints "
                "failed."))

    def handle_checkpoint_success(self, checkpoint_id: int) -> None:
        if checkpoint_id > self.last_succeeded_id:
            self.last_succeeded_id = checkpoint_id
            self.continuous_failures = 0
            self._counted.clear()
