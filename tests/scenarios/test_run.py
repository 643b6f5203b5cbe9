"""`shufflesim run`, `plan` and `bench`: outputs, summary contract, user errors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from scenarios import bench
from scenarios.cli import main
from scenarios.outputs import read_metrics
from scenarios.run import format_table, run_scenario
from scenarios.scenario_file import load_scenario

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"


def test_run_writes_outputs_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["run", str(LIBRARY / "slow-map.toml"), "--out", str(out), "--trace", "--set", "duration=6s"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "SlowMap -> Sink: Writer" in printed and "high" in printed
    for name in ("plan.json", "metrics.parquet", "summary.json", "trace.jsonl"):
        assert (out / name).stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["scenario"], summary["mode"], summary["duration_s"]) == ("slow-map", "sim", 6.0)
    source, slow = summary["vertices"]
    assert (source["name"], source["parallelism"], source["backpressure_level"]) == ("Source: Seq", 1, "high")
    assert slow["backpressure_level"] == "ok"
    assert slow["metrics"]["numRecordsInPerSecond"] == pytest.approx(200, rel=0.05)
    assert {"numRecordsInPerSecond", "numRecordsOutPerSecond", "busyTimeMsPerSecond"} <= set(slow["metrics"])
    assert [s["task_manager"] for s in slow["subtasks"]] == ["tm-0", "tm-1"]
    assert summary["records"]["emitted"] == summary["records"]["received"] > 0
    assert summary["invariants"]["buffers_leaked"] == 0
    assert summary["invariants"]["credit_violations"] == 0
    assert summary["invariants"]["violations"] == []
    assert summary["checkpoints"] == []  # ARCHITECTURE.md: one entry per checkpoint (none are taken yet)
    assert "steady_state_from_s" not in summary  # it ran its duration: the second half of that
    assert summary["cluster"] == {"engine": "local", "master": None, "task_managers": [
        {"name": f"tm-{i}", "address": f"tm-{i}", "pid": os.getpid(), "executor_id": None} for i in (0, 1)]}
    metrics = read_metrics(out)
    assert set(metrics["vertex"].to_pylist()) == {"Source: Seq", "SlowMap -> Sink: Writer"}
    events = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
    assert {"partition_request", "buffer_sent", "buffer_received"} <= {e["event"] for e in events}


def _vertex(name: str, busy: list[float]) -> dict:
    """A summary.json vertex whose subtasks have the given busy times (idle the rest)."""
    subtasks = [{"index": i, "metrics": {"busyTimeMsPerSecond": b, "idleTimeMsPerSecond": 1000 - b}}
                for i, b in enumerate(busy)]
    mean = sum(busy) / len(busy)
    return {"name": name, "parallelism": len(busy), "backpressure_level": "ok", "subtasks": subtasks,
            "metrics": {"busyTimeMsPerSecond": mean, "idleTimeMsPerSecond": 1000 - mean}}


def test_table_shows_the_busiest_subtask_as_flinks_web_ui_does() -> None:
    # Flink's job graph node reads "Busy (max)": one hot subtask of four shows as 1000, not
    # hidden in the vertex mean (skewed keys); the mean columns still stack to 1000.
    table = format_table({"vertices": [_vertex("CountPerKey", [1000, 200, 100, 0])]})
    header, row = table.splitlines()
    assert header.split()[3:8] == ["bp", "max", "busy", "max", "backpressured"]
    assert row.split() == ["CountPerKey", "4", "ok", "-", "1000", "-", "325", "675", "-", "-", "-", "-"]


@pytest.mark.parametrize("argv, message", [
    (["run", "missing.toml", "--out", "x"], "cannot read"),
    (["run", str(LIBRARY / "slow-map.toml"), "--out", "x", "--set", "network.bogus=1"], "network.bogus"),
    (["plan", "no_such_module:program"], "cannot import"),
    (["bench", "no_such_figure"], "unknown figure"),
    (["run", str(LIBRARY / "slow-map.toml"), "--out", "x", "--engine", "spark"],
     "mode = 'sim': --engine spark runs in realtime mode"),  # found before Spark starts
    (["run", str(LIBRARY / "slow-map.toml"), "--out", "x", "--master", "local[2]"],
     "--master local[2] needs --engine spark"),
])
def test_user_mistakes_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shufflesim: error:") and message in err and "\n" not in err


def test_plan_prints_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(LIBRARY / "skewed-keys.toml")]) == 0
    assert "CountPerKey -> Sink: Writer" in capsys.readouterr().out
    assert main(["plan", str(LIBRARY / "skewed-keys.toml"), "--json"]) == 0
    assert "job_graph" in json.loads(capsys.readouterr().out)


def test_bench_registry_prints_json_lines(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench, "FIGURES", {})
    bench.register_figure("answer")(lambda: [{"figure": "answer", "value": 42}])
    bench.register_figure("pair")(lambda: [{"figure": "pair_a", "value": 1}, {"figure": "pair_b", "value": 2}])
    assert main(["bench"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line) for line in out.splitlines()] == [
        {"figure": "answer", "value": 42}, {"figure": "pair_a", "value": 1}, {"figure": "pair_b", "value": 2}]
    assert err.splitlines() == ["bench: answer (1/2)...", "bench: pair (2/2)..."]  # stdout stays JSON only
    assert main(["bench", "pair", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and err == ""


def test_bench_takes_the_name_of_a_figure_returned_beside_another(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # the README lists virtual_to_wall and spark_startup_local2_s among the figures to name
    assert bench.ALSO == {"virtual_to_wall": "keyed_shuffle_records_per_s",
                          "spark_startup_local2_s": "sweep_speedup_local2"}
    monkeypatch.setattr(bench, "FIGURES", {})
    monkeypatch.setattr(bench, "ALSO", {})
    bench.register_figure("answer")(lambda: [{"figure": "answer", "value": 42}])
    bench.register_figure("pair", also=("pair_b",))(
        lambda: [{"figure": "pair", "value": 1}, {"figure": "pair_b", "value": 2}])
    assert main(["bench", "pair_b", "--quiet"]) == 0
    assert [json.loads(line)["figure"] for line in capsys.readouterr().out.splitlines()] == ["pair", "pair_b"]
    assert main(["bench", "nope"]) == 2
    assert "known: answer, pair, pair_b" in capsys.readouterr().err


PROGRAMS = {
    "raising_prog": "def build(env):\n    raise ValueError('boom in the user program')\n",
    "syntax_prog": "def build(env)\n    pass\n",
    "rejected_prog": ("from graph import DiscardingSink\n"
                      "def build(env):\n"
                      "    env.from_generator().map(cost='1ms').set_parallelism(0)"
                      ".sink_to(DiscardingSink())\n"),
    "import_raising_prog": "raise RuntimeError('cannot start')\n",
}


@pytest.mark.parametrize("module, message", [
    ("raising_prog", "ValueError: boom in the user program (raising_prog.py, line 2)"),
    ("syntax_prog", "SyntaxError"),
    ("rejected_prog", "IllegalArgumentException: The parallelism of an operator must be at least 1, or "
                      "ExecutionConfig.PARALLELISM_DEFAULT (use system default). (rejected_prog.py, line 3)"),
    ("import_raising_prog", "RuntimeError: cannot start"),
])
@pytest.mark.parametrize("command", ["plan", "run"])
def test_program_mistakes_exit_2_with_one_line(module: str, message: str, command: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / f"{module}.py").write_text(PROGRAMS[module])
    scenario = tmp_path / "job.toml"
    scenario.write_text(f'duration = "1s"\n[job]\nprogram = "{module}:build"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, module, raising=False)
    argv = ["plan", f"{module}:build"] if command == "plan" else ["run", str(scenario), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shufflesim: error:") and message in err and "\n" not in err
    assert module in err


def test_plan_takes_a_program_in_a_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    # a dotted module, as a scenario's job.program takes it (it was refused as "no such file")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "mine.py").write_text("def build(env):\n    env.from_sequence(1, 10).name('Seq').print()\n")
    monkeypatch.chdir(tmp_path)
    for module in ("jobs", "jobs.mine"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    assert main(["plan", "jobs.mine:build"]) == 0
    assert "Source: Seq -> Sink: Print to Std. Out" in capsys.readouterr().out
    assert main(["plan", "some/where.txt:build"]) == 2
    assert "some/where.txt:build: no such file" in capsys.readouterr().err


def test_unwritable_out_is_a_user_mistake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", str(LIBRARY / "slow-map.toml"), "--out", str(blocker / "out"), "--set", "duration=1s"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shufflesim: error: --out") and str(blocker / "out") in err and "\n" not in err


@pytest.mark.parametrize("overrides, message", [
    (["cluster.task_managers=1"], "slow-map.toml: cluster: the job needs 2 slots, the cluster has 1"),
    (["network.debloat=true", "network.starting_segment_size=100b"],
     "slow-map.toml: network.starting_segment_size: must lie between min_segment_size (256)"),
    (["checkpoints.interval=1s", "checkpoints.aligned_timeout=1s"], "slow-map.toml: checkpoints.aligned_timeout needs mode"),
])
def test_scenarios_the_runtime_cannot_run_exit_2(overrides: list[str], message: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", str(LIBRARY / "slow-map.toml"), "--out", str(tmp_path / "o"), "--set", "duration=1s"]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shufflesim: error:") and message in err and "\n" not in err


def test_interrupt_exits_130_without_traceback(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import scenarios.run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(scenarios.run, "run_scenario", interrupted)
    assert main(["run", str(LIBRARY / "slow-map.toml"), "--out", str(tmp_path / "o")]) == 130
    assert capsys.readouterr().err.strip() == "shufflesim: interrupted"


def test_runs_in_one_process_repeat_number_for_number(tmp_path: Path) -> None:
    """A serial sweep or a reused Spark worker runs many scenarios in one process: each run
    must give what `shufflesim run` gives in a fresh process."""
    from scenarios.run import run_scenario
    from scenarios.scenario_file import load_scenario

    def vertices(*overrides: str) -> list:
        scenario = load_scenario(LIBRARY / "slow-map.toml", ["duration=3s", *overrides])
        return run_scenario(scenario, tmp_path).summary["vertices"]

    first = vertices("job.stages[SlowMap].cost=1ms")
    for _ in range(3):  # nothing a run leaves in the process may change the next one
        vertices("network.buffer_timeout=1ms")
    assert vertices("job.stages[SlowMap].cost=1ms") == first


def test_a_run_whose_metrics_outgrow_an_rpc_frame_ends_with_them(tmp_path: Path) -> None:
    """4,000 samples of slow-map: each TaskManager's metrics are ~14 MB, more than one 10 MiB
    RPC frame (the run used to fail at its end with the JobManager closing the connection)."""
    out = tmp_path / "long"
    assert main(["run", str(LIBRARY / "slow-map.toml"), "--out", str(out), "--quiet",
                 "--set", "metrics.sample_period=50ms", "--set", "duration=200s"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "FINISHED"
    times = read_metrics(out).column("t").to_pylist()
    assert max(times) == pytest.approx(200, abs=0.01) and len(set(times)) > 3990  # every 50 ms sample


def test_runs_under_other_hash_seeds_write_the_same_bytes(tmp_path: Path) -> None:
    """Users diff run outputs: metrics.parquet and the trace must not depend on the order of a
    set of strings, which changes with the interpreter's hash seed."""
    import subprocess

    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"seed{seed}"
        subprocess.run([sys.executable, "-m", "scenarios.cli", "run", str(LIBRARY / "slow-map.toml"),
                        "--out", str(out), "--trace", "--set", "duration=3s"],
                       env={**os.environ, "PYTHONHASHSEED": seed}, check=True, capture_output=True)
        outputs.append(((out / "metrics.parquet").read_bytes(), (out / "trace.jsonl").read_bytes()))
    assert len(outputs[0][0]) > 1000 and outputs[0][1]
    assert outputs[0] == outputs[1]


def test_a_run_stopped_before_half_its_duration_takes_its_latency_over_the_second_half_of_what_ran(
        tmp_path: Path) -> None:
    """Latency, like the vertices' steady state, is the samples from half of what ran on (those of
    metrics.parquet's per-period latency), and the summary, the report and the table say so."""
    asked = iter(range(1_000_000))
    scenario = load_scenario(LIBRARY / "slow-map.toml", ["duration=100s"])
    out = tmp_path / "run"
    summary = run_scenario(scenario, out, should_stop=lambda: next(asked) >= 3).summary
    start = summary["steady_state_from_s"]
    assert summary["duration_s"] < 50 and start == summary["duration_s"] / 2
    metrics = read_metrics(out).to_pylist()
    maxima = [r["value"] for r in metrics if r["metric"] == "latencyMaxMs" and r["t"] >= start]
    assert len(maxima) >= 2 and summary["latency_ms"]["max"] == pytest.approx(max(maxima))
    (sink,) = [v for v in summary["vertices"] if "latency_ms" in v]
    assert sink["latency_ms"] == summary["latency_ms"]
    assert "steady_state_from_s (at_s / 2)" in summary["interrupted"]["note"]
    window = f"the samples from {start:.3f} s on: the second half of the {summary['duration_s']:.3f} s that ran"
    assert window in (out / "report.html").read_text()


def test_a_job_that_failed_early_has_the_latency_of_the_second_half_of_what_ran(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", str(LIBRARY / "link-failure.toml"), "--out", str(out), "--quiet"]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "FAILED" and summary["duration_s"] < 10  # of 20 s
    assert summary["steady_state_from_s"] == summary["duration_s"] / 2 and summary["latency_ms"]["p50"] > 0
    assert (f"steady state (this table, latency_ms): the samples from {summary['steady_state_from_s']:.3f} s on"
            in capsys.readouterr().out)
