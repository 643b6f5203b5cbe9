"""`shufflesim compare` on real runs: differing settings and steady state, and compare.html."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from scenarios.cli import main
from scenarios.compare import change, compare_runs
from scenarios.report.figures import overlay_figure

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    base = ["run", str(LIBRARY / "slow-map.toml"), "--set", "duration=4s"]
    assert main([*base, "--out", str(root / "slow")]) == 0
    assert main([*base, "--out", str(root / "fast"), "--set", "job.stages[SlowMap].cost=2ms",
                 "--set", "network.buffer_timeout=1ms"]) == 0
    return root / "slow", root / "fast"


def test_compare_prints_what_differs_and_writes_compare_html(
        runs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["compare", *map(str, runs)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    # the values are summary.json's, in seconds: "0.005  0.002" for 5ms and 2ms said no unit
    assert any(re.fullmatch(r"settings that differ \(2 of \d+; times in seconds, sizes in bytes, bandwidth in "
                            r"bytes per second\):", line) for line in lines)
    settings = lines[lines.index(next(line for line in lines if line.startswith("settings that differ"))) + 1:]
    settings = settings[1:settings.index("")]
    assert [line.split()[0] for line in settings] == ["job.stages[SlowMap].cost", "network.buffer_timeout"]
    assert settings[0].split()[1:] == ["0.005", "0.002", "(-60.0%)"]
    slow_map_in = next(line for line in lines if "SlowMap -> Sink: Writer" in line and "numRecordsInPerSecond" in line)
    before, after, change = slow_map_in.split()[-3:]  # 5 ms -> 2 ms per record
    # records count when their chunk starts: a chunk (up to 10 ms of them) may straddle a period
    assert (float(before), float(after)) == (pytest.approx(200, rel=0.01), pytest.approx(500, rel=0.01))
    assert float(change.strip("(+%)")) == pytest.approx(150, abs=1.5)
    assert not any("backpressure level" in line for line in lines)  # equal: not printed
    assert lines[-1] == "comparison compare.html"
    page = (tmp_path / "compare.html").read_text()
    assert "job.stages[SlowMap].cost" in page and page.count("Plotly.newPlot(") == 2  # one per vertex


def test_overlay_draws_each_run_in_every_panel(runs: tuple[Path, Path]) -> None:
    comparison = compare_runs(runs)
    fig = overlay_figure(comparison.runs, "SlowMap -> Sink: Writer")
    by_axis: dict[str, list[str]] = {}
    for trace in fig.data:
        by_axis.setdefault(trace.yaxis, []).append(trace.name)
    assert by_axis and all(names == ["slow", "fast"] for names in by_axis.values())
    titles = [a.text for a in fig.layout.annotations]
    assert "records in" in titles and "records out" not in titles  # a sink-chained map emits nothing


def test_a_run_compared_with_itself_differs_in_nothing(runs: tuple[Path, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["compare", str(runs[0]), str(runs[0]), "--out", str(tmp_path / "same.html")]) == 0
    printed = capsys.readouterr().out
    assert "settings: all" in printed and "results: all" in printed and "equal" in printed
    assert (tmp_path / "same.html").exists()


def test_a_run_stopped_early_is_named_so(runs: tuple[Path, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    stopped = tmp_path / "stopped"
    shutil.copytree(runs[0], stopped)
    summary = json.loads((stopped / "summary.json").read_text())
    summary |= {"duration_s": 2.5, "interrupted": {"at_s": 2.5, "note": "..."}}
    (stopped / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    assert main(["compare", str(runs[0]), str(stopped), "--out", str(tmp_path / "c.html")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "stopped early at s" in line)
    assert row.split()[-2:] == ["-", "2.5"]


def test_change_is_relative_to_the_first_run() -> None:
    assert change(200.0, 500.0) == "+150.0%"
    assert change(1000.0, 999.9) == "-0.01%"
    assert change(0.0, 3.0) == "+3"
    assert change(2, 2) == "="
    assert change("high", "ok") == ""


def test_compare_names_a_folder_that_is_no_run(runs: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs[0]), str(tmp_path)]) == 2
    assert f"{tmp_path / 'summary.json'}: no such file" in capsys.readouterr().err
    assert main(["compare", *map(str, runs), "--out", str(tmp_path / "no" / "such" / "dir.html")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_compare_shows_what_a_checkpoint_mode_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under slow-map's backpressure aligned checkpoints do not complete within 6 s where
    unaligned ones take ~12 ms: compare printed neither (only per-vertex metrics)."""
    base = ["run", str(LIBRARY / "slow-map.toml"), "--quiet", "--set", "duration=6s",
            "--set", "checkpoints.interval=1s"]
    for mode in ("aligned", "unaligned"):
        assert main([*base, "--set", f"checkpoints.mode={mode}", "--out", str(tmp_path / mode)]) in (0, 1)
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "aligned"), str(tmp_path / "unaligned"),
                 "--out", str(tmp_path / "c.html")]) == 0
    rows = {cells[1]: [cell.split()[0] for cell in cells[2:]] for cells in
            (re.split(r"\s{2,}", line) for line in capsys.readouterr().out.splitlines())
            if cells[0] == "checkpoints"}
    assert rows["completed"] == ["0", "6"]
    assert rows["in progress at the end"] == ["1", "0"]
    assert rows["p50 duration ms"][0] == "-" and 5 < float(rows["p50 duration ms"][1]) < 50
    assert "p50 duration ms" in (tmp_path / "c.html").read_text()


def test_compare_shows_the_buffers_a_buffer_timeout_sends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a buffer timeout trades against latency is buffers: the consumer's flushed buffers in
    per second (Flink's numBuffersIn*PerSecond; numBuffersOut counts finished buffers only, the
    same ~1 a second at either timeout). compare printed the latency and not them."""
    base = ["run", str(LIBRARY / "buffer-timeout-latency.toml"), "--quiet", "--set", "duration=4s"]
    for timeout in ("100ms", "5ms"):
        assert main([*base, "--set", f"network.buffer_timeout={timeout}", "--out", str(tmp_path / timeout)]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "100ms"), str(tmp_path / "5ms"), "--out", str(tmp_path / "c.html")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "numBuffersInRemotePerSecond" in line)
    before, after = (float(cell) for cell in row.split()[-3:-1])
    assert before == pytest.approx(11, abs=2) and after == pytest.approx(195, rel=0.1)
