"""Restart strategies (taskmgr.restart_strategy), against Flink 2.3's RestartBackoffTimeStrategy
implementations: when a job may restart and after how long."""

import random

import pytest

from taskmgr.restart_strategy import RestartStrategy


def failures(strategy: RestartStrategy, times: list[float], seed: int = 0) -> list[tuple[bool, bool, float]]:
    """(new attempt?, can restart?, backoff s) after a failure at each of `times`."""
    backoff = strategy.create(random.Random(seed))
    return [(backoff.notify_failure(t), backoff.can_restart(), backoff.backoff_time) for t in times]


def test_unset_is_flinks_default_exponential_delay_with_checkpointing_and_none_without() -> None:
    assert RestartStrategy().resolve(checkpointing=True).strategy == "exponential_delay"
    assert RestartStrategy().resolve(checkpointing=False).strategy == "none"
    assert RestartStrategy("fixed_delay").resolve(checkpointing=True).strategy == "fixed_delay"
    assert not RestartStrategy("none").restarts and not RestartStrategy("fixed_delay", attempts=0).restarts
    with pytest.raises(ValueError, match="resolve"):
        RestartStrategy().create(random.Random(0))


def test_none_never_restarts_and_fixed_delay_restarts_its_attempts() -> None:
    assert failures(RestartStrategy("none"), [1.0]) == [(True, False, 0.0)]
    fixed = failures(RestartStrategy("fixed_delay", attempts=2, delay=0.5), [1.0, 5.0, 9.0])
    assert [can for _, can, _ in fixed] == [True, True, False]
    assert {delay for *_, delay in fixed} == {0.5}
    assert [can for _, can, _ in failures(RestartStrategy("fixed_delay"), [1.0, 5.0])] == [True, False]  # 1 attempt


def test_failure_rate_refuses_a_restart_once_more_than_its_maximum_failures_fell_in_its_interval() -> None:
    """Flink's FailureRateRestartBackoffTimeStrategy: it keeps the last max + 1 failure times
    and restarts unless the oldest is within the interval of the latest (strictly more)."""
    default = RestartStrategy("failure_rate")  # Flink's defaults: 1 failure per 1 min, 1 s delay
    assert failures(default, [10.0, 20.0]) == [(True, True, 1.0), (True, False, 1.0)]
    assert [can for _, can, _ in failures(default, [10.0, 71.0])] == [True, True]
    two = RestartStrategy("failure_rate", max_failures_per_interval=2, failure_rate_interval=10.0, delay=0.0)
    assert [can for _, can, _ in failures(two, [1.0, 2.0, 3.0])] == [True, True, False]
    assert [can for _, can, _ in failures(two, [1.0, 2.0, 11.0])] == [True, True, False]  # 10 s: not more
    assert [can for _, can, _ in failures(two, [1.0, 2.0, 11.001, 12.5])] == [True, True, True, True]
    assert {delay for *_, delay in failures(two, [1.0])} == {0.0}


def test_exponential_delay_grows_by_its_multiplier_up_to_its_maximum() -> None:
    strategy = RestartStrategy("exponential_delay", jitter_factor=0, max_backoff=5)
    # failures each after the previous restart: 1 s, 1.5 s, 2.25 s, 3.375 s, then 5 s (the maximum)
    times, now = [], 10.0
    for _ in range(6):
        times.append(now)
        now += 10
    backoffs = [delay for _, _, delay in failures(strategy, times)]
    assert backoffs == [1.0, 1.5, 2.25, 3.375, 5.0, 5.0]


def test_exponential_delay_jitter_stays_within_its_factor_and_never_below_the_initial_backoff() -> None:
    strategy = RestartStrategy("exponential_delay")  # Flink's defaults: 1 s, x1.5, 1 min, jitter 0.1
    for seed in range(50):
        first, second, third = (d for *_, d in failures(strategy, [10.0, 20.0, 30.0], seed))
        assert 1.0 <= first <= 1.1  # max(initial, 1 s +- 10 %): Flink measured 1.029-1.064 s
        assert 1.35 <= second <= 1.65 and 2.025 <= third <= 2.475
    # the jitter comes from the job's seed: the same seed, the same backoffs
    assert failures(strategy, [10.0, 20.0], seed=3) == failures(strategy, [10.0, 20.0], seed=3)


def test_exponential_delay_merges_failures_while_a_restart_is_pending_and_resets_after_the_threshold() -> None:
    strategy = RestartStrategy("exponential_delay", jitter_factor=0, reset_backoff_threshold=100)
    result = failures(strategy, [10.0, 10.5, 20.0, 200.0])
    assert result[1] == (False, True, 1.0)  # before the restart at 11 s: the same attempt
    assert result[2][2] == 1.5  # the second attempt
    assert result[3][2] == 1.0  # 178.5 s after the last restart (>= 100 s): back to the initial backoff


def test_a_failure_at_the_instant_of_the_restart_is_the_next_attempt() -> None:
    """A deployment into a dead TaskManager's slot fails as the restart happens: Flink merges
    it only within that millisecond and redeploys at once, and counts the next failure as
    a new attempt, with the longer backoff."""
    strategy = RestartStrategy("exponential_delay", jitter_factor=0)
    assert failures(strategy, [10.0, 11.0, 12.5]) == [(True, True, 1.0), (True, True, 1.5), (True, True, 2.25)]
    # the restart instant as the kernel reaches it can be a float's last bit short of
    # failed-at + backoff: still the same millisecond, still the next attempt
    failed_at = 3.232150436456945
    restart = 4.232150436456944
    assert restart < failed_at + 1.0
    assert failures(strategy, [failed_at, restart]) == [(True, True, 1.0), (True, True, 1.5)]


def test_exponential_delay_attempts_count_until_the_backoff_resets() -> None:
    strategy = RestartStrategy("exponential_delay", attempts=2, jitter_factor=0, reset_backoff_threshold=100)
    assert [can for _, can, _ in failures(strategy, [10.0, 20.0, 30.0])] == [True, True, False]
    assert [can for _, can, _ in failures(strategy, [10.0, 20.0, 200.0])] == [True, True, True]


def test_exponential_delay_saturates_at_its_maximum_after_many_failures() -> None:
    """Java's long cast saturates where the power overflows; here too, no OverflowError."""
    strategy = RestartStrategy("exponential_delay", backoff_multiplier=2.0, jitter_factor=0.1)
    backoffs = [delay for *_, delay in failures(strategy, [100.0 * i for i in range(1, 1200)])]  # each its own attempt
    assert backoffs[-1] == 60.0 and max(backoffs) == 60.0


@pytest.mark.parametrize("settings, message", [
    ({"strategy": "failurerate"}, "one of none, fixed_delay, failure_rate, exponential_delay"),
    ({"strategy": "failure_rate", "max_failures_per_interval": 0}, "max_failures_per_interval must be >= 1"),
    ({"strategy": "failure_rate", "failure_rate_interval": 0.0}, "failure_rate_interval must be >= 1 ms"),
    ({"strategy": "fixed_delay", "attempts": -1}, ">= 0"),
    ({"strategy": "exponential_delay", "attempts": 0}, "attempts must be >= 1 for exponential_delay"),
    # unset: Flink's default strategy takes its default settings, whatever restart-strategy.*.* says
    ({"initial_backoff": 5.0}, "restart initial_backoff without a strategy would do nothing"),
    ({"attempts": 3, "delay": 2.0}, "restart attempts, delay without a strategy would do nothing"),
    ({"strategy": "exponential_delay", "initial_backoff": 120.0}, "initial_backoff must be >= 1 ms and <= max_backoff"),
    ({"strategy": "exponential_delay", "backoff_multiplier": 1.0}, "backoff_multiplier must be > 1"),
    ({"strategy": "exponential_delay", "jitter_factor": 1.5}, "jitter_factor must be between 0 and 1"),
])
def test_a_restart_strategy_checks_its_settings(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RestartStrategy(**settings)


def test_a_strategy_names_itself_as_flink_does_when_it_suppresses_recovery() -> None:
    backoff = RestartStrategy("fixed_delay", attempts=1, delay=1.0).create(random.Random(0))
    assert str(backoff) == "FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=1, backoffTimeMS=1000)"
    assert str(RestartStrategy("failure_rate").create(random.Random(0))) == (
        "FailureRateRestartBackoffTimeStrategy(FailureRateRestartBackoffTimeStrategy(failuresIntervalMS=60000,"
        "backoffTimeMS=1000,maxFailuresPerInterval=1)")
    assert str(RestartStrategy("exponential_delay").create(random.Random(0))).startswith(
        "ExponentialDelayRestartBackoffTimeStrategy(initialBackoffMS=1000, maxBackoffMS=60000, backoffMultiplier=1.5")
