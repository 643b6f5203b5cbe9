"""User mistakes a daily user of `shufflesim` makes: each is one clear line and exit code 2
(argparse's usage errors: its usage and one line), never a traceback or a silent wrong run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from scenarios.cli import _parser, main
from scenarios.run import failure_text
from scenarios.scenario_file import ScenarioError, load_scenario
from scenarios.sweep_file import load_sweep
from shuffle.buffer.network_buffer_pool import InsufficientBuffersError

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"
SLOW_MAP = LIBRARY / "slow-map.toml"


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("shufflesim: error:") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, message", [
    # typos get the full dotted key as the hint
    (["plan", str(SLOW_MAP), "--set", "job.stage=1"], "unknown key 'job.stage' (did you mean 'job.stages'?)"),
    (["plan", str(SLOW_MAP), "--set", "job.stages[SlowMap].cots=1ms"],
     "unknown key 'job.stages[1] (SlowMap).cots' (did you mean 'job.stages[1] (SlowMap).cost'?)"),
    # a stage name that does not exist: the names, or the close one
    (["plan", str(SLOW_MAP), "--set", "job.stages[SlowMapp].cost=1ms"],
     "--set job.stages[SlowMapp].cost='1ms': there is no job.stages[SlowMapp] (did you mean 'SlowMap'?)"),
    (["plan", str(SLOW_MAP), "--set", "job.stages[-1].cost=1ms"], "(names: Seq, SlowMap, Sink)"),
    # faults are indexed too, and are not stages
    (["plan", str(LIBRARY / "link-failure.toml"), "--set", "faults[5].at=1s"],
     "there is no faults[5] (the scenario has 1, numbered from 0)"),
    (["plan", str(SLOW_MAP), "--set", "faults[0].at=1s"], "'faults' is not a list of tables in the scenario"),
    # Flink's minimum checkpoint interval and timeout; 1ns would run (nearly) forever
    (["plan", str(SLOW_MAP), "--set", "checkpoints.interval=1ns"],
     "checkpoints.interval: '1ns' must be >= \"10ms\" (Flink's minimum)"),
    (["plan", str(SLOW_MAP), "--set", "checkpoints.timeout=5ms"], "checkpoints.timeout: '5ms' must be >= \"10ms\""),
    # checkpoint settings without an interval: checkpointing stays off, they would do nothing
    (["plan", str(SLOW_MAP), "--set", "checkpoints.mode=unaligned"],
     "slow-map.toml: checkpoints.mode: does nothing without checkpoints.interval (no interval: no checkpoints): "
     "give one, e.g. \"3s\" (from --set checkpoints.mode)"),
    # a [restart] key the job's strategy does not read would do nothing (with checkpoints the
    # default is exponential_delay, which has no 'delay')
    (["plan", str(LIBRARY / "checkpoints-slow-map.toml"), "--set", "restart.delay=5s"],
     "restart.delay: Flink's default strategy with checkpoints, 'exponential_delay', takes its default settings "
     "and does not read it (a setting of fixed_delay, failure_rate): set restart.strategy (from --set restart.delay)"),
    # not even its own: Flink reads restart-strategy.exponential-delay.* only when the type is set
    (["plan", str(LIBRARY / "checkpoints-slow-map.toml"), "--set", "restart.initial_backoff=5s"],
     "restart.initial_backoff: Flink's default strategy with checkpoints, 'exponential_delay', takes its default "
     "settings and does not read it (a setting of exponential_delay): set restart.strategy"),
    (["plan", str(LIBRARY / "link-failure.toml"), "--set", "restart.strategy=fixed_delay",
      "--set", "restart.initial_backoff=2s"],
     "restart.initial_backoff: the 'fixed_delay' strategy does not use it (a setting of exponential_delay)"),
    # a source paced at 1e12 records/s drew pacing steps of billions of records: the OOM killer ended it
    (["plan", str(SLOW_MAP), "--set", "job.stages[Seq].rate=1e12"],
     "job.stages[0] (Seq).rate: 1000000000000.0 is more than 1e+09 records/s per subtask (0: as fast as downstream "
     "allows) (from --set job.stages[Seq].rate)"),
    # a buffer larger than the default network memory: was a traceback from the network stack
    (["plan", str(SLOW_MAP), "--set", 'network.buffer_size="1gb"'],
     "network.buffer_size: 1073741824 bytes is more than a TaskManager's network memory (cluster.network_memory, "
     "by default 67108864 bytes) (from --set network.buffer_size)"),
    # a billion metric samples would run (nearly) forever
    (["plan", str(SLOW_MAP), "--set", "metrics.sample_period=1ns", "--set", "duration=1s"],
     "metrics.sample_period: a duration of 1 s sampled every 1e-09 s is 1e+09 samples, at most 100,000"),
    (["plan", str(SLOW_MAP), "--set", "duration=1000000s"], "is 1e+06 samples, at most 100,000"),
    # a period longer than the run: its one sample, at the end, covered the run's start-up and the
    # table printed that as the steady state, saying nothing
    (["plan", str(SLOW_MAP), "--set", "metrics.sample_period=10s", "--set", "duration=5s"],
     "slow-map.toml: metrics.sample_period: 10 s is longer than the run (duration 5 s): it would take one "
     "sample, at its end, start-up included, for the steady state of its second half: make it at most the "
     "duration (from --set metrics.sample_period)"),
    # a bad value from --set says so: the file holds another value
    (["plan", str(SLOW_MAP), "--set", "seed=3", "--set", "job.stages[SlowMap].cost=abc"],
     "slow-map.toml: job.stages[1] (SlowMap).cost: 'abc' is not a duration (e.g. \"100ms\") "
     "(from --set job.stages[SlowMap].cost)"),
    # a value of the file an override beside it made wrong: the override is named too
    (["plan", str(LIBRARY / "skewed-keys.toml"), "--set", "job.stages[Events].keys.distribution=zipf"],
     "job.stages[0] (Events).keys.hot_fraction: only for distribution = \"hot_key\" "
     "(a value of the file, beside --set job.stages[Events].keys.distribution)"),
    (["plan", str(SLOW_MAP), "--set", "network.bufer_size=1kb"],
     "(did you mean 'network.buffer_size'?) (from --set network.bufer_size)"),
    # a duration or bandwidth without its unit: "5" could mean 5 s or 5 ms; it is not taken as seconds
    (["plan", str(SLOW_MAP), "--set", 'job.stages[SlowMap].cost="5"'],
     "job.stages[1] (SlowMap).cost: '5' has no unit (e.g. \"100ms\") (from --set job.stages[SlowMap].cost)"),
    # a stage is named by index and by the name it ends up with (one --set renames it)
    (["plan", str(SLOW_MAP), "--set", "job.stages[1].cost=abc", "--set", "job.stages[1].name=Slow"],
     "job.stages[1] (Slow).cost: 'abc' is not a duration (e.g. \"100ms\") (from --set job.stages[1].cost)"),
    (["plan", str(SLOW_MAP), "--set", 'duration="30"'], "duration: '30' has no unit (e.g. \"100ms\")"),
    (["plan", str(SLOW_MAP), "--set", 'network.link_bandwidth="10"'],
     "network.link_bandwidth: '10' has no unit (e.g. \"10gbit\" or \"200mb/s\")"),
    # a negative buffer timeout is a duration, but below 0 (Flink's -1 is "off" here)
    (["plan", str(SLOW_MAP), "--set", "network.buffer_timeout=-1ms"],
     "network.buffer_timeout: '-1ms' must be >= 0 (or \"off\": flush only full buffers)"),
    # numbers and booleans in quotes are strings in TOML
    (["plan", str(SLOW_MAP), "--set", 'network.debloat="false"'],
     "network.debloat: 'false' is not true or false (write it without quotes)"),
    (["plan", str(SLOW_MAP), "--set", 'job.stages[1].parallelism="2"'],
     "job.stages[1] (SlowMap).parallelism: '2' is not an integer (write it without quotes) "
     "(from --set job.stages[1].parallelism)"),
    (["plan", str(SLOW_MAP), "--set", 'job.stages[0].rate="1e3"'], "'1e3' is not a number (write it without quotes)"),
    # settings each valid alone that the graph API refuses together: the key, and where its value came from
    (["plan", str(LIBRARY / "skewed-keys.toml"), "--set", "job.stages[0].record_size=8"],
     "skewed-keys.toml: job.stages[0] (Events).record_size: 8 leaves no room for keys (a record of 8 bytes is "
     "its own key, a Long): with 'keys' it must be >= 16 (from --set job.stages[0].record_size)"),
    # a job the compiler rejects (Flink's message): the file, for each command that compiles it
    *[(argv + [str(SLOW_MAP), "--set", "job.stages[SlowMap].partitioner=forward"],
       "slow-map.toml: the job does not compile: Forward partitioning does not allow change of parallelism")
      for argv in (["plan"], ["run", "--out", "never-written"], ["flink-reference", "--out", "never-written"])],
    # a value the Flink reference job cannot take, found before the JVM starts (it exited on it)
    (["flink-reference", str(SLOW_MAP), "--out", "never-written", "--set", "job.stages[Seq].keys.num_keys=10000000000"],
     "slow-map.toml: job.stages[0] (Seq): keys.num_keys = 10000000000 (the reference job reads it as a Java int"),
    # a cluster too small for the job: flink-reference refuses it as run does (Flink ran it on more)
    (["flink-reference", str(SLOW_MAP), "--out", "never-written", "--set", "cluster.task_managers=1"],
     "slow-map.toml: cluster: the job needs 2 slots, the cluster has 1 (task_managers = 1"),
    # flink-reference --compare names a run folder that is not there as such (before any download)
    (["flink-reference", str(SLOW_MAP), "--out", "never-written", "--compare", "no/such/run"],
     "no/such/run: no such folder (give the --out folder of a 'shufflesim run')"),
    # a program's file where its module is meant
    (["plan", "my_prog.py"], "my_prog.py: a Python file; give the program as 'module:function', e.g. my_prog:build"),
    (["plan", "my_prog.py:make"], "e.g. my_prog:make (the module is looked up from the current folder)"),
    (["plan", str(SLOW_MAP), "--set", 'job.program="my_prog.py:build"'],
     "job.program: 'my_prog.py:build' names a file: give its module, \"my_prog:build\""),
    # the wrong kind of file for the command
    (["run", str(LIBRARY / "sweeps" / "source-rate.toml"), "--out", "x"],
     "source-rate.toml: this is a sweep file (it has 'scenario' and a [grid] or [[points]]): run it with "
     "'shufflesim sweep'"),
    (["sweep", str(SLOW_MAP), "--out", "x", "--master", "serial"],
     "slow-map.toml: this is a scenario file: run it with 'shufflesim run'"),
])
def test_scenario_and_override_mistakes(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in one_error_line(capsys)


def test_a_program_that_adds_no_operators_is_a_user_mistake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty_prog.py").write_text("def build(env):\n    pass\n")
    (tmp_path / "job.toml").write_text('duration = "1s"\n[job]\nprogram = "empty_prog:build"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "empty_prog", raising=False)
    assert main(["run", "job.toml", "--out", "o"]) == 2
    assert "job.toml: job.program 'empty_prog:build' added no operators" in one_error_line(capsys)
    assert main(["plan", "empty_prog:build"]) == 2
    assert "empty_prog:build added no operators" in one_error_line(capsys)


@pytest.mark.parametrize("argv, message", [
    (["run", str(SLOW_MAP), "--out", ""], "argument --out: an empty path"),
    (["sweep", "s.toml", "--out", " "], "argument --out: an empty path"),
    (["report", "run", "--out", "."], "argument --out: . is a folder; give a file name"),
    (["compare", "a", "b", "--out", "."], "argument --out: . is a folder; give a file name"),
    (["trace", ""], "argument RUN_DIR: an empty path"),
])
def test_bad_path_arguments_are_usage_errors(argv: list[str], message: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # an empty --out used to write the run into the current folder


def test_an_out_folder_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", str(SLOW_MAP), "--out", str(blocker)]) == 2
    assert one_error_line(capsys).endswith(f"--out {blocker}: a file, not a folder")
    assert main(["report", str(blocker)]) == 2
    assert f"{blocker}: a file, not a folder (give the --out folder" in one_error_line(capsys)


def test_fuzz_replay_mistakes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--replay", str(tmp_path / "nope.bin")]) == 2
    assert f"{tmp_path / 'nope.bin'}: cannot read: No such file or directory" in one_error_line(capsys)
    (tmp_path / "x.bin").write_bytes(b"\x00\x00\x00\x05ab")
    (tmp_path / "x.txt").write_text("decoder: nope\ncuts: []\n")
    assert main(["fuzz", "--replay", str(tmp_path / "x.bin")]) == 2
    assert "x.txt: not what fuzz saves (lines 'decoder: NAME', NAME one of netty, rpc" in one_error_line(capsys)
    assert main(["fuzz", "--replay", str(tmp_path / "x.bin"), "--inputs", "5"]) == 2
    assert "--replay decodes one saved input: it takes no --inputs or --seconds" in one_error_line(capsys)
    (tmp_path / "x.txt").write_text("decoder: netty\ncuts: [1]\n")
    assert main(["fuzz", "--replay", str(tmp_path / "x.bin")]) == 0
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'x.bin'}: 0 messages decoded, then CorruptedStreamError: " \
                                              "Network stream corrupted: frame length N"


SCENARIO = SLOW_MAP.read_text().replace('buffer_timeout = "100ms"', 'buffer_timeout = "5ms"')


def test_bare_dotted_keys_in_a_sweep_set_one_key_not_the_whole_table(tmp_path: Path) -> None:
    """In TOML `network.buffer_size = ...` is a nested table: it must not replace the scenario's [network]."""
    (tmp_path / "scenario.toml").write_text(SCENARIO)
    (tmp_path / "sweep.toml").write_text('scenario = "scenario.toml"\n'
                                         '[grid]\nnetwork.buffer_size = ["8kb", "16kb"]\n'
                                         '[[points]]\nnetwork.floating_buffers_per_gate = 3\n'
                                         '"job.stages[Seq]".rate = 10\n')
    sweep = load_sweep(tmp_path / "sweep.toml")
    assert sweep.keys == ("network.buffer_size", "network.floating_buffers_per_gate", "job.stages[Seq].rate")
    scenarios = [sweep.scenario(point) for point in sweep.points]
    assert [s.network.buffer_size for s in scenarios] == [8192, 16384, 32768]
    assert all(s.network.buffer_timeout == pytest.approx(0.005) for s in scenarios)
    assert scenarios[2].network.floating_buffers_per_gate == 3
    assert scenarios[2].job.stages[0].rate == 10 and scenarios[2].job.stages[0].record_size == 16


def test_too_little_network_memory_names_the_scenario_keys(tmp_path: Path) -> None:
    scenario = load_scenario(SLOW_MAP, ["cluster.network_memory=64kb"])
    text = failure_text(scenario, InsufficientBuffersError("Insufficient number of network buffers"))
    assert text == ("InsufficientBuffersError: Insufficient number of network buffers In the scenario: "
                    "cluster.network_memory (65536 bytes per TaskManager) holds 2 buffers of network.buffer_size "
                    "(32768 bytes): raise cluster.network_memory, or lower network.buffer_size, "
                    "network.exclusive_buffers_per_channel or network.floating_buffers_per_gate.")
    assert failure_text(scenario, RuntimeError("boom")) == "RuntimeError: boom"


def test_a_job_that_cannot_deploy_says_which_keys_to_change(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", str(SLOW_MAP), "--out", str(tmp_path / "o"), "--quiet", "--set", "duration=1s",
            "--set", "cluster.network_memory=64kb"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("shufflesim: job failed: InsufficientBuffersError") and "\n" not in err
    assert "raise cluster.network_memory, or lower network.buffer_size" in err


def test_every_command_and_option_has_help() -> None:
    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    missing = [name for name, text in helps.items() if not text]
    for name, sub in commands.choices.items():
        missing += [f"{name} {action.dest}" for action in sub._actions if not action.help]
    assert set(helps) == set(commands.choices) and missing == []


def test_an_unquoted_set_value_with_a_space_gets_the_commands_usage_and_a_hint(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--set network.buffer_size=8 kb` (a shell splits it) printed shufflesim's top-level usage and
    `unrecognized arguments: kb`, where the scenario's own values may have spaces ("10 ms")."""
    with pytest.raises(SystemExit) as info:
        main(["run", str(SLOW_MAP), "--out", "never-written", "--set", "network.buffer_size=8", "kb"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("usage: shufflesim run ")
    assert err.splitlines()[-1] == ("shufflesim run: error: unrecognized arguments: kb (a --set value with a "
                                    "space goes in quotes: --set 'KEY=10 ms')")
    with pytest.raises(SystemExit):
        main(["plan", str(SLOW_MAP), "--jsn"])
    assert capsys.readouterr().err.splitlines()[-1] == "shufflesim plan: error: unrecognized arguments: --jsn"


def test_run_and_sweep_help_say_what_ctrl_c_does_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Ctrl-C (or SIGTERM) stops the run early and writes complete outputs that say so" in text
    assert "Exit codes: 0 done, 1 the job failed or an invariant broke, 2 a mistake" in text and "130" in text
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "Ctrl-C (or SIGTERM) cancels the points running, writes no results, says which points are done and " \
           "exits with 130" in \
        " ".join(capsys.readouterr().out.split())


def test_a_task_manager_dropped_for_a_protocol_error_says_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Internal failures propagate with their root cause: here the job report of 3000 samples per
    metric, sent whole (as before reports went in parts), is larger than an RPC frame may be,
    and the JobManager drops the connection."""
    from taskmgr import rpc

    monkeypatch.setattr(rpc, "REPORT_PART_SIZE", 64 * rpc.MAX_FRAME_SIZE)
    argv = ["run", str(SLOW_MAP), "--out", str(tmp_path / "o"), "--quiet", "--set", "duration=3s",
            "--set", "metrics.sample_period=1ms"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "is lost (the JobManager closed its connection: message length" in err
    assert "(must be 1 to 10485760 bytes))" in err


@pytest.mark.parametrize("argv", [
    ["sweep", "missing.toml", "--master", "bogus"],
    ["run", str(SLOW_MAP), "--engine", "spark", "--master", "Local", "--set", "mode=realtime"],
])
def test_a_master_spark_would_refuse_is_refused_before_spark_starts(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert f"--master {argv[-1] if argv[0] == 'sweep' else 'Local'}: not a Spark master (local[*], local[N]" \
        in one_error_line(capsys)
    assert not (tmp_path / "o").exists()


def test_a_run_into_the_folder_of_an_earlier_run_leaves_none_of_its_files(tmp_path: Path) -> None:
    """An earlier run's trace.jsonl (or trace.perfetto.json) next to this run's metrics would show
    in this run's report and trace as if this run had made it."""
    out = tmp_path / "o"
    assert main(["run", str(SLOW_MAP), "--out", str(out), "--quiet", "--trace", "--set", "duration=1s"]) == 0
    assert main(["trace", str(out)]) == 0
    (out / "notes.txt").write_text("mine")
    assert main(["run", str(SLOW_MAP), "--out", str(out), "--quiet", "--set", "duration=1s"]) == 0
    assert sorted(path.name for path in out.iterdir()) == [
        "metrics.parquet", "notes.txt", "plan.json", "report.html", "summary.json"]


def test_a_fault_or_cost_change_after_the_end_of_the_run_is_pointed_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import scenarios.run

    def interrupted(*args, **kwargs):  # the warning comes before the run; no need to run it
        raise KeyboardInterrupt

    monkeypatch.setattr(scenarios.run, "run_scenario", interrupted)
    scenario = LIBRARY / "link-failure.toml"
    assert main(["run", str(scenario), "--out", str(tmp_path / "o"), "--set", "duration=2s"]) == 130
    assert capsys.readouterr().err.splitlines()[0] == (
        f"shufflesim: warning: {scenario}: faults[0] at 5 s is not before the end of the run (2 s): "
        "it will not happen")

    # likewise a change of a stage's cost (slow-sink-window's sink slows down from 10 s)
    scenario = LIBRARY / "slow-sink-window.toml"
    assert main(["run", str(scenario), "--out", str(tmp_path / "o"), "--set", "duration=5s"]) == 130
    assert capsys.readouterr().err.splitlines()[0] == (
        f"shufflesim: warning: {scenario}: job.stages[2] (Warehouse).cost_changes[0] from 10 s is not before the end of the "
        "run (5 s): it will not happen")


def test_a_sweep_into_the_folder_of_an_earlier_sweep_keeps_only_its_own_points(tmp_path: Path) -> None:
    """The earlier sweep's p01 ran; this sweep's p01 is INVALID: its folder must not hold the old run."""
    out = tmp_path / "out"
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text(f'scenario = "{SLOW_MAP}"\n[grid]\nduration = ["1s", "2s"]\n')
    second.write_text(f'scenario = "{SLOW_MAP}"\n[grid]\nduration = ["1s", "10 parsecs"]\n')
    assert main(["sweep", str(first), "--out", str(out), "--master", "serial", "--quiet"]) == 0
    assert sorted(path.name for path in (out / "points").iterdir()) == ["p00", "p01"]
    assert main(["sweep", str(second), "--out", str(out), "--master", "serial", "--quiet"]) == 1
    assert sorted(path.name for path in (out / "points").iterdir()) == ["p00"]


def test_version_and_flags_that_need_another(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("shufflesim ")
    assert main(["run", str(SLOW_MAP), "--out", "x", "--verbose"]) == 2
    assert "--verbose shows Spark's log: it needs --engine spark" in one_error_line(capsys)


@pytest.mark.parametrize("command", ["report", "trace"])
def test_a_folder_of_runs_given_as_a_run_names_one_of_them(command: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "points" / "p00").mkdir(parents=True)
    (tmp_path / "points" / "p00" / "summary.json").write_text("{}")
    assert main([command, str(tmp_path)]) == 2
    assert f"no such file ({tmp_path} holds runs: give one, e.g. {tmp_path / 'points' / 'p00'})" \
        in one_error_line(capsys)


def test_a_realtime_run_warns_of_the_simulated_link_s_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """slow-link's 10 Mbit/s, 5 ms link is the simulated link's: over real TCP it would be ignored, silently."""
    from scenarios.cli import _warn_of_unused_settings

    realtime = load_scenario(LIBRARY / "slow-link.toml", ["mode=realtime", "network.send_window=64kb"])
    assert realtime.unused_settings() == ["network.link_bandwidth", "network.link_latency", "network.send_window"]
    _warn_of_unused_settings(realtime)
    assert capsys.readouterr().err.splitlines()[0] == (
        f"shufflesim: warning: {LIBRARY / 'slow-link.toml'}: network.link_bandwidth is for sim mode: a realtime run "
        "sends over real TCP and does not use it")
    assert load_scenario(LIBRARY / "slow-link.toml").unused_settings() == []  # sim mode uses them
    assert load_scenario(SLOW_MAP, ["mode=realtime"]).unused_settings() == []  # defaults: nothing to warn of


def test_a_sweep_whose_points_are_all_invalid_names_no_run_folders(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "bad.toml"
    sweep.write_text(f'scenario = "{LIBRARY / "slow-map-throttled.toml"}"\n[grid]\n"job.stages[Seq].rate" = ["abc"]\n')
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--master", "serial", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert f"results in {tmp_path / 'out' / 'results.parquet'} (no point ran: no run folders)" in out
    assert not (tmp_path / "out" / "points").exists()


def test_an_interrupted_sweep_leaves_only_its_own_points_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The earlier sweep's points (other settings under the same names), table and plot are gone
    from the start: beside this sweep's p00 they would pass for its runs. The point running is gone too."""
    import scenarios.sweep

    out, first, second = tmp_path / "out", tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text(f'scenario = "{SLOW_MAP}"\n[grid]\nduration = ["1s", "2s", "3s"]\n')
    second.write_text(f'scenario = "{SLOW_MAP}"\n[grid]\nduration = ["2s", "4s"]\n')
    assert main(["sweep", str(first), "--out", str(out), "--master", "serial", "--quiet"]) == 0
    (out / "notes.txt").write_text("mine")
    run_scenario = scenarios.sweep.run_scenario

    def ctrl_c_in_p01(scenario, point_dir, **kwargs):
        if point_dir.name == "p01":
            point_dir.mkdir()  # as a run makes its folder
            raise KeyboardInterrupt
        return run_scenario(scenario, point_dir, **kwargs)

    monkeypatch.setattr(scenarios.sweep, "run_scenario", ctrl_c_in_p01)
    assert main(["sweep", str(second), "--out", str(out), "--master", "serial", "--quiet"]) == 130
    assert sorted(path.name for path in out.iterdir()) == ["notes.txt", "points"]
    assert [path.name for path in (out / "points").iterdir()] == ["p00"]
    assert json.loads((out / "points" / "p00" / "summary.json").read_text())["duration_s"] == 2.0


def test_a_sweep_over_seed_in_its_grid_shows_one_seed_column(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "seeds.toml"
    sweep.write_text(f'scenario = "{SLOW_MAP}"\n[grid]\nduration = ["1s"]\nseed = [1, 2]\n')
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--master", "serial", "--quiet"]) == 0
    header, first = capsys.readouterr().out.splitlines()[:2]
    assert header.split() == ["point", "seed", "duration", "status", "source", "backpressure", "sink", "records/s",
                              "latency", "p50", "/", "p99", "ms"]
    assert first.split()[:3] == ["p00", "1", "1s"]
