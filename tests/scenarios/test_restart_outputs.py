"""`[restart]` in scenario files: parsed as Flink's settings, and restarts shown in the
summary, the printed run table and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scenarios.cli import main
from scenarios.scenario_file import ScenarioError, load_scenario

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"
LINK_FAILURE = str(LIBRARY / "link-failure.toml")


def test_restart_settings_default_to_flinks_and_are_checked() -> None:
    restart = load_scenario(LINK_FAILURE).restart
    # unset: Flink's default for the job (exponential_delay with checkpoints, none without)
    assert (restart.strategy, restart.attempts, restart.delay) == (None, None, 1.0)
    assert (restart.initial_backoff, restart.max_backoff, restart.backoff_multiplier,
            restart.reset_backoff_threshold, restart.jitter_factor) == (1.0, 60.0, 1.5, 3600.0, 0.1)
    restart = load_scenario(LINK_FAILURE, ["restart.strategy=exponential_delay", "restart.initial_backoff=200ms",
                                           "restart.backoff_multiplier=2", "restart.jitter_factor=0"]).restart
    assert (restart.strategy, restart.initial_backoff, restart.backoff_multiplier, restart.jitter_factor) == (
        "exponential_delay", 0.2, 2, 0)
    restart = load_scenario(LINK_FAILURE, ["restart.strategy=fixed_delay", "restart.attempts=3",
                                           "restart.delay=250ms"]).restart
    assert (restart.strategy, restart.attempts, restart.delay) == ("fixed_delay", 3, 0.25)
    restart = load_scenario(LINK_FAILURE, ["restart.strategy=failure_rate"]).restart
    assert (restart.max_failures_per_interval, restart.failure_rate_interval, restart.delay) == (1, 60.0, 1.0)
    restart = load_scenario(LINK_FAILURE, ["restart.strategy=failure_rate", "restart.max_failures_per_interval=3",
                                           "restart.failure_rate_interval=10s", "restart.delay=0s"]).restart
    assert (restart.max_failures_per_interval, restart.failure_rate_interval, restart.delay) == (3, 10.0, 0.0)
    with pytest.raises(ScenarioError, match="restart.max_failures_per_interval"):
        load_scenario(LINK_FAILURE, ["restart.strategy=failure_rate", "restart.max_failures_per_interval=0"])
    with pytest.raises(ScenarioError, match="restart.attempts: the 'failure_rate' strategy does not use it"):
        load_scenario(LINK_FAILURE, ["restart.strategy=failure_rate", "restart.attempts=3"])
    with pytest.raises(ScenarioError, match="restart.strategy"):
        load_scenario(LINK_FAILURE, ["restart.strategy=exponential"])
    with pytest.raises(ScenarioError, match="restart.attempts"):
        load_scenario(LINK_FAILURE, ["restart.attempts=-1"])
    with pytest.raises(ScenarioError, match="restart.backoff"):
        load_scenario(LINK_FAILURE, ["restart.backoff=1s"])
    with pytest.raises(ScenarioError, match="restart.jitter_factor: .* must be"):
        load_scenario(LINK_FAILURE, ["restart.strategy=exponential_delay", "restart.jitter_factor=1.5"])
    with pytest.raises(ScenarioError, match="restart.backoff_multiplier: .* must be"):
        load_scenario(LINK_FAILURE, ["restart.strategy=exponential_delay", "restart.backoff_multiplier=1"])
    # without a strategy, Flink's default one takes its default settings: a setting would do nothing
    with pytest.raises(ScenarioError, match="restart.initial_backoff: Flink's default strategy without checkpoints"):
        load_scenario(LINK_FAILURE, ["restart.initial_backoff=5s"])


def test_restart_settings_that_do_not_fit_together_are_one_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", LINK_FAILURE, "--out", "/nonexistent/never-written", "--set", "restart.strategy=exponential_delay",
                 "--set", "restart.initial_backoff=2min"])
    assert code != 0
    assert "[restart]: restart initial_backoff must be >= 1 ms and <= max_backoff (60 s)" in capsys.readouterr().err


def test_a_checkpointed_job_restarts_by_flinks_default_exponential_delay(tmp_path: Path) -> None:
    """No `[restart]`, checkpoints on: Flink 2.x restarts with exponential-delay; its first
    backoff is 1 s plus up to 10 % jitter (Flink measured 1.029 and 1.064 s)."""
    out = tmp_path / "out"
    assert main(["run", LINK_FAILURE, "--out", str(out), "--set", "duration=10s",
                 "--set", "checkpoints.interval=1s", "--set", "checkpoints.mode=unaligned"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["restarts"] == 1
    assert 1000 <= summary["restart_history"][0]["downtime_ms"] <= 1110
    assert summary["records"]["emitted"] == summary["records"]["received"] > 0


def test_a_restarted_run_shows_its_restarts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["run", LINK_FAILURE, "--out", str(out), "--set", "duration=10s",
                 "--set", "restart.strategy=fixed_delay"])
    printed = capsys.readouterr().out
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["invariants"]["violations"] == []
    assert summary["records"]["emitted"] == summary["records"]["received"] > 0
    assert summary["restarts"] == 1
    [restart] = summary["restart_history"]
    assert restart["cause"].startswith("RemoteTransportError: Lost connection to task manager 'tm-0'")
    assert restart["attempt"] == 0 and 5.0 < restart["failed_at_s"] < 6.0
    assert (restart["task"], restart["task_manager"]) == ("SlowMap -> Sink: Writer (1/1)", "tm-1")
    assert restart["downtime_ms"] == pytest.approx(1000, abs=10)
    assert summary["records_replayed"] == restart["records_replayed"] > 0
    assert f"restarts 1 (failed at {restart['failed_at_s']:.3f} s; downtime 1000 ms" in printed
    report = (out / "report.html").read_text()
    assert 'id="restarts"' in report and "Restarted 1 time(s)" in report


def test_a_failure_without_restarts_says_recovery_was_suppressed(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["run", LINK_FAILURE, "--out", str(out), "--set", "duration=8s"]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "FAILED" and summary["restarts"] == 0 and summary["restart_history"] == []
    assert summary["recovery_suppressed_by"] == "NoRestartBackoffTimeStrategy"
    report = (out / "report.html").read_text()
    assert "Recovery is suppressed by NoRestartBackoffTimeStrategy" in report
    # which task failed, where and when: printed, and in the report's lead
    origin = f"at {summary['failure']['failed_at_s']:.3f} s in SlowMap -&gt; Sink: Writer (1/1) on tm-1"
    assert f"failed {origin.replace('&gt;', '>')}\n" in capsys.readouterr().out
    assert f"Failed {origin}: RemoteTransportError" in report


def test_a_run_with_checkpoints_restarts_from_the_last_one(tmp_path: Path) -> None:
    from scenarios.run import run_scenario

    scenario = load_scenario(LINK_FAILURE, ["restart.strategy=fixed_delay", "checkpoints.interval=1s",
                                            "checkpoints.mode=unaligned"])
    run_scenario(scenario, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["restarts"] == 1
    [restart] = summary["restart_history"]
    completed_before = [c for c in summary["checkpoints"]
                        if c["status"] == "COMPLETED" and c["trigger_s"] < restart["failed_at_s"]]
    assert completed_before  # so the restart restores one
    # the source had emitted ~20,000 records by the failure (the map's 5 s and the
    # buffers in flight); only those after the last checkpoint's barriers come again
    # (none here: back-pressured since before it, the source waits for a buffer until it
    # is cancelled, its partition kept for it as Flink's producer is one of its users)
    assert summary["records_replayed"] < 5000


def test_a_restart_waits_for_a_task_stuck_in_user_code(tmp_path: Path) -> None:
    """`block_task`: the source's user code ignores interrupts from 4 s to 8 s; the map fails
    at 5.645 s (the dropped connection) and Flink restarts once the source has ended too."""
    blocked = tmp_path / "blocked.toml"
    blocked.write_text(Path(LINK_FAILURE).read_text() + '\n[[faults]]\nat = "4s"\nkind = "block_task"\n'
                       'vertex = "Source: Seq"\nduration = "4s"\n')
    scenario = load_scenario(blocked, ["restart.strategy=fixed_delay", "cluster.task_cancellation_timeout=30s"])
    assert scenario.cluster.task_cancellation_timeout == 30.0
    from scenarios.run import run_scenario

    summary = run_scenario(scenario, tmp_path / "out").summary
    assert summary["status"] == "FINISHED"
    [restart] = summary["restart_history"]
    assert restart["failed_at_s"] == pytest.approx(5.645, abs=0.001)
    assert restart["restarted_at_s"] == pytest.approx(8.0, abs=0.001)  # not 6.645: 1 s after the failure
