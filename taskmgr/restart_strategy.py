"""Restart strategies: whether and when a failed job is restarted (a scenario's `[restart]`).

As Flink's `RestartBackoffTimeStrategy` (option `restart-strategy.type`):

- `none` (Flink's `NoRestartBackoffTimeStrategy`): a task failure fails the job.
- `fixed_delay` (Flink's `FixedDelayRestartBackoffTimeStrategy`): the job is restarted
  after `delay` seconds, at most `attempts` times; the failure after the last allowed
  restart fails the job with its cause. Flink's defaults: `restart-strategy.fixed-delay.attempts`
  1, `restart-strategy.fixed-delay.delay` 1 s.

Flink's default is `none` when checkpointing is off. With checkpointing on, Flink 1.19+ and
2.x default to `exponential-delay` (before 1.19: `fixed-delay` with Integer.MAX_VALUE
attempts and 1 s delay); this runtime takes no checkpoints yet, so `none` is the default.
"""

from __future__ import annotations

from dataclasses import dataclass

STRATEGIES = ("none", "fixed_delay")
#: Flink's restart-strategy.fixed-delay.attempts and .delay defaults.
DEFAULT_ATTEMPTS = 1
DEFAULT_DELAY = 1.0


@dataclass(frozen=True)
class RestartStrategy:
    """How a job recovers from task failures; `none` never restarts."""

    strategy: str = "none"
    attempts: int = DEFAULT_ATTEMPTS
    #: Seconds between the failure's cancellation and the redeployment.
    delay: float = DEFAULT_DELAY

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"restart strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.attempts < 0 or self.delay < 0:
            raise ValueError(f"restart attempts and delay must be >= 0, got {self.attempts} and {self.delay}")

    def can_restart(self, restarts_so_far: int) -> bool:
        """Whether a failure after `restarts_so_far` restarts may be followed by another."""
        return self.strategy == "fixed_delay" and restarts_so_far < self.attempts

    def describe(self) -> str:
        """Flink's name of the strategy and its settings (its "Recovery is suppressed by ...")."""
        if self.strategy == "none":
            return "NoRestartBackoffTimeStrategy"
        return (f"FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts={self.attempts}, "
                f"backoffTimeMS={round(self.delay * 1000)})")
