"""Restart strategies: whether and when a failed job is restarted (a scenario's `[restart]`).

`RestartStrategy` is the configuration (Flink's `restart-strategy.*` options); each job
gets a stateful `RestartBackoffTimeStrategy` from it (Flink's interface of that name),
which hears of every failure and answers whether the job may restart and after how long:

- `none` (`NoRestartBackoffTimeStrategy`): a task failure fails the job.
- `fixed_delay` (`FixedDelayRestartBackoffTimeStrategy`): restart after `delay`, at most
  `attempts` times (Flink's defaults: 1 attempt, 1 s).
- `failure_rate` (`FailureRateRestartBackoffTimeStrategy`): restart after `delay` unless
  this failure is the `max_failures_per_interval + 1`-th within `failure_rate_interval`
  (Flink's defaults: 1 failure per 1 min, 1 s).
- `exponential_delay` (`ExponentialDelayRestartBackoffTimeStrategy`, Flink 2.x): the n-th
  restart waits `initial_backoff * backoff_multiplier**(n-1)`, at most `max_backoff`,
  plus a random jitter of up to `jitter_factor` of it (never below `initial_backoff`); a
  failure more than `reset_backoff_threshold` after the last restart starts over from
  `initial_backoff`, and so does the count of `attempts` (unlimited by default; at least
  1). Flink's defaults: 1 s, 1 min, 1.5, 1 h, 0.1. (Flink also merges failures that come
  while a restart is pending into one attempt; a job here reports one failure per attempt.)

Unset (`strategy = None`), the strategy is Flink's default for the job
(`RestartBackoffTimeStrategyFactoryLoader`): `exponential_delay` with checkpointing on,
`none` without, with its default settings: Flink reads restart-strategy.<type>.* only for
the type set, so a setting without a strategy would do nothing and is an error here.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import deque
from dataclasses import dataclass

STRATEGIES = ("none", "fixed_delay", "failure_rate", "exponential_delay")
#: Java's Long.MAX_VALUE, where Flink's backoff in milliseconds saturates.
LONG_MAX = 2**63 - 1
#: Flink's restart-strategy.fixed-delay.attempts and .delay defaults.
DEFAULT_ATTEMPTS = 1
DEFAULT_DELAY = 1.0


@dataclass(frozen=True)
class RestartStrategy:
    """How a job recovers from task failures (seconds for durations)."""

    #: None: Flink's default for the job (`resolve`).
    strategy: str | None = None
    #: fixed_delay: restart-strategy.fixed-delay.attempts (default 1); exponential_delay:
    #: .exponential-delay.attempts-before-reset-backoff (default unlimited). None: the default.
    attempts: int | None = None
    #: restart-strategy.fixed-delay.delay and restart-strategy.failure-rate.delay.
    delay: float = DEFAULT_DELAY
    #: restart-strategy.failure-rate.max-failures-per-interval and .failure-rate-interval.
    max_failures_per_interval: int = 1
    failure_rate_interval: float = 60.0
    #: restart-strategy.exponential-delay.*
    initial_backoff: float = 1.0
    max_backoff: float = 60.0
    backoff_multiplier: float = 1.5
    reset_backoff_threshold: float = 3600.0
    jitter_factor: float = 0.1

    def __post_init__(self) -> None:
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ValueError(f"restart strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.strategy is None:
            changed = [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]
            if changed:
                raise ValueError(f"restart {', '.join(changed)} without a strategy would do nothing: Flink's "
                                 "default strategy (exponential_delay with checkpointing, none without) takes "
                                 "its default settings; set the strategy")
        if (self.attempts is not None and self.attempts < 0) or self.delay < 0:
            raise ValueError(f"restart attempts and delay must be >= 0, got {self.attempts} and {self.delay}")
        if self.strategy == "failure_rate":
            if self.max_failures_per_interval < 1:
                raise ValueError(f"restart max_failures_per_interval must be >= 1, got {self.max_failures_per_interval}")
            if not self.failure_rate_interval >= 0.001:
                raise ValueError(f"restart failure_rate_interval must be >= 1 ms, got {self.failure_rate_interval:g} s")
        if self.strategy == "exponential_delay":
            # Flink's checks (in milliseconds: at least 1 ms)
            if self.attempts == 0:
                raise ValueError("restart attempts must be >= 1 for exponential_delay (Flink's "
                                 "attempts-before-reset-backoff), got 0")
            if not 0.001 <= self.initial_backoff <= self.max_backoff:
                raise ValueError(f"restart initial_backoff must be >= 1 ms and <= max_backoff "
                                 f"({self.max_backoff:g} s), got {self.initial_backoff:g} s")
            if not self.backoff_multiplier > 1:
                raise ValueError(f"restart backoff_multiplier must be > 1, got {self.backoff_multiplier:g}")
            if not self.reset_backoff_threshold >= 0.001:
                raise ValueError(f"restart reset_backoff_threshold must be >= 1 ms, "
                                 f"got {self.reset_backoff_threshold:g} s")
            if not 0 <= self.jitter_factor <= 1:
                raise ValueError(f"restart jitter_factor must be between 0 and 1, got {self.jitter_factor:g}")

    def resolve(self, checkpointing: bool) -> RestartStrategy:
        """This strategy, or, if unset, Flink's default for a job with or without checkpointing
        (with its default settings, the only ones an unset strategy can have)."""
        if self.strategy is not None:
            return self
        return RestartStrategy("exponential_delay" if checkpointing else "none")

    @property
    def restarts(self) -> bool:
        """Whether this (resolved) strategy ever restarts a job."""
        return self.strategy not in (None, "none") and self.attempts != 0

    def create(self, rng: random.Random) -> RestartBackoffTimeStrategy:
        """The job's strategy; `rng` draws the exponential delay's jitter."""
        if self.strategy == "fixed_delay":
            return FixedDelayRestartBackoffTimeStrategy(
                DEFAULT_ATTEMPTS if self.attempts is None else self.attempts, self.delay)
        if self.strategy == "failure_rate":
            return FailureRateRestartBackoffTimeStrategy(self.max_failures_per_interval, self.failure_rate_interval,
                                                         self.delay)
        if self.strategy == "exponential_delay":
            return ExponentialDelayRestartBackoffTimeStrategy(self, rng)
        if self.strategy == "none":
            return NoRestartBackoffTimeStrategy()
        raise ValueError("resolve() the restart strategy before creating it")


class RestartBackoffTimeStrategy:
    """One job's restart decisions: `notify_failure` at each failure, then `can_restart`
    and `backoff_time` (seconds from that failure to the restart)."""

    backoff_time: float = 0.0

    def notify_failure(self, now: float) -> bool:
        """Hear of a failure at job time `now`; False if it joins the pending restart."""
        return True

    def can_restart(self) -> bool:
        return False


class NoRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    def __str__(self) -> str:
        return "NoRestartBackoffTimeStrategy"


class FixedDelayRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    def __init__(self, attempts: int, delay: float) -> None:
        self.max_attempts = attempts
        self.backoff_time = delay
        self.current_attempt = 0

    def notify_failure(self, now: float) -> bool:
        self.current_attempt += 1
        return True

    def can_restart(self) -> bool:
        return self.current_attempt <= self.max_attempts

    def __str__(self) -> str:
        return (f"FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts={self.max_attempts}, "
                f"backoffTimeMS={round(self.backoff_time * 1000)})")


class FailureRateRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    """Flink's: it keeps the times of the last `max_failures + 1` failures and refuses a
    restart when the oldest of them is no more than `interval` before the latest, that is,
    when more than `max_failures` failures fell within `interval` (times in whole ms)."""

    def __init__(self, max_failures: int, interval: float, delay: float) -> None:
        self.max_failures = max_failures
        self.interval = interval
        self.backoff_time = delay
        self.failure_times: deque[float] = deque()
        self._now = 0.0

    def notify_failure(self, now: float) -> bool:
        self._now = _ms(now)
        if self._queue_full():
            self.failure_times.popleft()
        self.failure_times.append(self._now)
        return True

    def _queue_full(self) -> bool:
        return len(self.failure_times) > self.max_failures

    def can_restart(self) -> bool:
        return not self._queue_full() or self._now - self.failure_times[0] > _ms(self.interval)

    def __str__(self) -> str:
        # Flink's string, its doubled prefix and single closing parenthesis included
        return (f"FailureRateRestartBackoffTimeStrategy(FailureRateRestartBackoffTimeStrategy("
                f"failuresIntervalMS={round(self.interval * 1000)},backoffTimeMS={round(self.backoff_time * 1000)},"
                f"maxFailuresPerInterval={self.max_failures})")


class ExponentialDelayRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    def __init__(self, config: RestartStrategy, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.max_attempts = math.inf if config.attempts is None else config.attempts
        self.current_attempt = 0
        self.next_restart_time = -math.inf

    def notify_failure(self, now: float) -> bool:
        config = self.config
        # A restart is pending: the same attempt. Flink merges up to and including the
        # millisecond of the restart (`<=`), but a failure there (a deployment into a dead
        # TaskManager's slot, noticed at once) makes Flink redeploy at once, and the failure
        # of that redeployment, a millisecond on, is the next attempt: here that failure.
        if _ms(now) < _ms(self.next_restart_time):  # Flink's timestamps are whole ms
            return False
        if now - self.next_restart_time >= config.reset_backoff_threshold:
            self.current_attempt = 0
        backoff = self._backoff()
        self.next_restart_time = now + backoff
        self.backoff_time = backoff
        self.current_attempt += 1
        return True

    def _backoff(self) -> float:
        """Flink's calculateActualBackoffTime, in whole milliseconds as Flink's (whose long
        cast saturates where the power overflows)."""
        config = self.config
        initial_ms = round(config.initial_backoff * 1000)
        try:
            current_ms = int(min(initial_ms * config.backoff_multiplier ** self.current_attempt, LONG_MAX))
        except OverflowError:
            current_ms = LONG_MAX
        offset = int(current_ms * config.jitter_factor)
        jitter = self.rng.randint(-offset, offset) if offset else 0
        return max(initial_ms, min(current_ms + jitter, round(config.max_backoff * 1000))) / 1000

    def can_restart(self) -> bool:
        return self.current_attempt <= self.max_attempts

    def __str__(self) -> str:
        config = self.config
        attempts = "unlimited" if self.max_attempts == math.inf else self.max_attempts
        return (f"ExponentialDelayRestartBackoffTimeStrategy(initialBackoffMS={round(config.initial_backoff * 1000)}, "
                f"maxBackoffMS={round(config.max_backoff * 1000)}, backoffMultiplier={config.backoff_multiplier}, "
                f"resetBackoffThresholdMS={round(config.reset_backoff_threshold * 1000)}, "
                f"jitterFactor={config.jitter_factor}, attemptsBeforeResetBackoff={attempts}, "
                f"currentRestartAttempt={self.current_attempt})")


def _ms(seconds: float) -> float:
    """A time as Flink's millisecond timestamps have it (-inf stays -inf)."""
    return seconds if math.isinf(seconds) else float(round(seconds * 1000))
