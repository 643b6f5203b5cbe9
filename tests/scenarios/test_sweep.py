"""`shufflesim sweep --master serial`: results table, per-point outputs, failures, progress, plot."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from scenarios.cli import main
from scenarios.outputs import CHECKPOINT_FIGURES
from scenarios.sweep import PointResult, VertexResult, read_results, run_sweep
from scenarios.sweep_file import load_sweep
from scenarios.sweep_report import SweepProgress, progress_line, sweep_figure

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"
SLOW_MAP = LIBRARY / "slow-map.toml"
KEYS = ["duration", "network.buffer_timeout", "job.stages[SlowMap].cost", "cluster.network_memory"]


@pytest.fixture(scope="module")
def serial(sweep_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("serial")
    run_sweep(load_sweep(sweep_path), out)
    return out


def rows_of(out: Path) -> dict[tuple[str, Any], dict[str, Any]]:
    return {(row["point"], row["vertex"]): row for row in read_results(out).to_pylist()}


def test_results_table_has_a_row_per_point_and_vertex(serial: Path) -> None:
    table = read_results(serial)
    assert table.column_names[:10] == ["point", "seed", *KEYS, "vertex", "parallelism", "status", "error"]
    assert {"backpressure_level", "backPressuredTimeMsPerSecond", "numRecordsInPerSecond"} <= set(table.column_names)
    rows = rows_of(serial)
    assert len(rows) == 4 * 2 + 2 + 1  # two vertices per finished point and the failed job; one for the invalid
    source = rows["p01", "Source: Seq"]
    assert source["seed"] == 7 and source["status"] == "FINISHED" and source["error"] is None
    assert [source[key] for key in KEYS] == ["2s", "1ms", "5ms", None]  # as written in the sweep file
    assert source["backpressure_level"] == "high" and source["parallelism"] == 1
    assert rows["p01", "SlowMap -> Sink: Writer"]["numRecordsInPerSecond"] == pytest.approx(200, rel=0.05)


def test_each_point_equals_its_run_one_by_one(serial: Path, one_by_one: dict[str, Any],
                                              finished_points: list[str]) -> None:
    rows = rows_of(serial)
    for point in finished_points:
        expected = one_by_one[point]
        assert json.loads((serial / "points" / point / "summary.json").read_text())["vertices"] == \
            json.loads(json.dumps(expected["vertices"]))
        for vertex in expected["vertices"]:
            row = rows[point, vertex["name"]]
            assert {name: row[name] for name in vertex["metrics"]} == vertex["metrics"]
            assert row["backpressure_level"] == vertex["backpressure_level"]
        assert {p.name for p in (serial / "points" / point).iterdir()} >= {"plan.json", "metrics.parquet",
                                                                           "summary.json"}


def test_failed_and_invalid_points_are_rows_with_their_root_cause(serial: Path, one_by_one: dict[str, Any],
                                                                  sweep_path: Path) -> None:
    rows = rows_of(serial)
    failed = [row for (point, _), row in rows.items() if point == "p04"]
    assert {row["status"] for row in failed} == {"FAILED"}
    assert {row["error"] for row in failed} == {one_by_one["p04"]["error"]}
    assert "InsufficientBuffersError: Insufficient number of network buffers" in failed[0]["error"]
    invalid = rows["p05", None]
    assert invalid["status"] == "INVALID" and invalid["vertex"] is None and invalid["backPressuredTimeMsPerSecond"] is None
    assert "network.buffer_timeout: '10 parsecs' is not a duration" in invalid["error"]
    # the scenario file does not hold the bad value: the sweep file's point does
    assert invalid["error"].endswith(f"(from {sweep_path}: point p05 network.buffer_timeout)")
    # as `run --set` says it (which adds where the value came from)
    assert str(one_by_one["p05"]).split(": ", 1)[1].removesuffix(" (from --set network.buffer_timeout)") \
        in invalid["error"]


def test_cli_reports_failed_points_and_exits_1(sweep_path: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    (out / "results.parquet").mkdir(parents=True)  # an earlier Spark-written table is replaced
    assert main(["sweep", str(sweep_path), "--out", str(out), "--master", "serial"]) == 1
    printed = capsys.readouterr()
    assert "6/6 points done" in printed.out
    assert "p01    7     2s        1ms" in printed.out and "FINISHED  high (999 ms/s)" in printed.out
    assert "shufflesim: 2 of 6 points failed:" in printed.err
    assert "p04: FAILED: InsufficientBuffersError" in printed.err and "p05: INVALID:" in printed.err
    assert len(read_results(out)) == 11
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quiet_prints_no_progress(sweep_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", str(sweep_path), "--out", str(tmp_path), "--master", "serial", "--quiet"]) == 1
    assert "points done" not in capsys.readouterr().out


def test_progress_lines() -> None:
    assert progress_line(0, 8, 1.2) == "0/8 points done, 0:01 elapsed, time left not known yet"
    assert progress_line(2, 8, 30) == "2/8 points done, 0:30 elapsed, about 1:30 left"
    now = iter([0.0, 5.0, 10.0])
    lines = io.StringIO()
    printer = SweepProgress(lines, clock=lambda: next(now))
    printer(1, 2), printer(1, 2), printer(2, 2)
    assert lines.getvalue().splitlines() == ["1/2 points done, 0:05 elapsed, about 0:05 left",
                                             "2/2 points done, 0:10 elapsed, about 0:00 left"]


def test_a_long_point_shows_how_far_it_is() -> None:
    """Run one by one, the running point's virtual time shows: on a log at most every 5 s."""
    now = iter([0.0, 1.0, 2.0, 6.0, 6.0, 7.0])
    lines = io.StringIO()
    printer = SweepProgress(lines, clock=lambda: next(now))
    printer(0, 2, "p00 at 10 s")  # 1.0: the first line
    printer(0, 2, "p00 at 20 s")  # 2.0: too soon
    printer(0, 2, "p00 at 30 s")  # 6.0: 5 s after the last line
    printer(1, 2)  # 7.0: a point done
    assert lines.getvalue().splitlines() == [
        "0/2 points done, 0:01 elapsed, time left not known yet; p00 at 10 s",
        "0/2 points done, 0:06 elapsed, time left not known yet; p00 at 30 s",
        "1/2 points done, 0:07 elapsed, about 0:07 left"]


def test_a_serial_sweep_reports_the_running_point(sweep_path: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int, str | None]] = []
    run_sweep(load_sweep(sweep_path), tmp_path, on_progress=lambda done, total, running=None:
              seen.append((done, total, running)))
    running = [r for _, _, r in seen if r is not None]
    assert running and all(r.startswith("p0") and r.endswith(" s") for r in running)
    assert seen[-1][:2] == (seen[-1][1], seen[-1][1]) and seen[-1][2] is None


def test_progress_on_a_terminal_redraws_one_line() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    printer = SweepProgress(screen, clock=lambda: 0.0)
    printer(0, 2), printer(1, 2)
    printer.close()
    assert screen.getvalue().count("\r") == 2 and screen.getvalue().endswith("\n")
    assert screen.getvalue().count("\n") == 1


def test_a_run_that_crashes_is_an_error_row_and_the_others_run(sweep_path: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import scenarios.sweep as sweep_module

    real = sweep_module.run_scenario

    def crashing(scenario: Any, out_dir: Path, **kwargs: Any) -> Any:
        if out_dir.name == "p01":
            raise RuntimeError("disk on fire")
        return real(scenario, out_dir, **kwargs)

    monkeypatch.setattr(sweep_module, "run_scenario", crashing)
    outcome = run_sweep(load_sweep(sweep_path), tmp_path)
    assert [(r.point, r.status, r.error) for r in outcome.failed][:1] == [("p01", "ERROR", "RuntimeError: disk on fire")]
    assert [r.status for r in outcome.results] == ["FINISHED", "ERROR", "FINISHED", "FINISHED", "FAILED", "INVALID"]


def test_a_sweep_of_checkpoint_modes_shows_what_its_checkpoints_came_to(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Aligned checkpoints under slow-map's backpressure do not complete in 6 s, unaligned ones
    take ~12 ms: neither the table nor results.parquet said so (summary.json only)."""
    path = tmp_path / "modes.toml"
    path.write_text(f'scenario = "{SLOW_MAP}"\n[grid]\nduration = ["6s"]\n"checkpoints.interval" = ["1s"]\n'
                    '"checkpoints.mode" = ["aligned", "unaligned"]\n')
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--master", "serial", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "checkpoints"
    assert lines[1].endswith("0 completed, 1 in progress") and lines[2].endswith("6 completed, p50 12 ms")
    rows = rows_of(tmp_path / "out")
    assert {point: (row["checkpoints_completed"], row["checkpoints_in_progress"], row["checkpoint_duration_p50_ms"])
            for (point, _), row in rows.items()} == {"p00": (0, 1, None), "p01": (6, 0, 12.0)}


def test_a_sweep_of_buffer_timeouts_shows_the_latency_it_trades(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a buffer timeout buys is latency: the sweep's table and results.parquet had none of
    summary.json's `latency_ms` (only each sink's mean of per-sample percentiles)."""
    path = tmp_path / "timeouts.toml"
    path.write_text(f'scenario = "{LIBRARY / "buffer-timeout-latency.toml"}"\n[grid]\nduration = ["4s"]\n'
                    '"network.buffer_timeout" = ["100ms", "5ms"]\n')
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--master", "serial", "--quiet"]) == 0
    header, *points = capsys.readouterr().out.splitlines()[:3]
    assert header.endswith("sink records/s  latency p50 / p99 ms")
    summaries = [json.loads((tmp_path / "out" / "points" / point / "summary.json").read_text())["latency_ms"]
                 for point in ("p00", "p01")]
    for line, latency in zip(points, summaries):
        assert line.endswith(f"{latency['p50']:.3g} / {latency['p99']:.3g}")
    assert 40 < summaries[0]["p50"] < 60 and summaries[1]["p50"] < 5
    rows = rows_of(tmp_path / "out")
    assert {point: (row["latency_p50_ms"], row["latency_p99_ms"]) for (point, _), row in rows.items()} == {
        point: (latency["p50"], latency["p99"]) for point, latency in zip(("p00", "p01"), summaries)}


def test_a_sweep_without_checkpoints_has_no_checkpoint_columns(serial: Path) -> None:
    assert not set(CHECKPOINT_FIGURES) & set(read_results(serial).column_names)


def test_ctrl_c_says_which_points_are_done_and_where(sweep_path: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """It said 'shufflesim: interrupted' only, whatever had run."""
    import scenarios.sweep as sweep_module

    real = sweep_module.run_scenario

    def interrupted_at_p02(scenario: Any, out_dir: Path, **kwargs: Any) -> Any:
        if out_dir.name == "p02":
            raise KeyboardInterrupt
        return real(scenario, out_dir, **kwargs)

    monkeypatch.setattr(sweep_module, "run_scenario", interrupted_at_p02)
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_path), "--out", str(out), "--master", "serial", "--quiet"]) == 130
    assert capsys.readouterr().err == (f"shufflesim: interrupted: 2 of 6 points done (p00, p01), their runs in "
                                       f"{out / 'points'}; no results.parquet (a sweep writes it once every point "
                                       "has run)\n")
    assert sorted(p.name for p in (out / "points").iterdir()) == ["p00", "p01"]


def test_sigterm_stops_a_sweep_as_ctrl_c_does(tmp_path: Path) -> None:
    """A batch system's time limit (or `timeout`) sends SIGTERM: it killed the sweep at once,
    silently, leaving the running point's hidden staging folder."""
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "sweep.toml"
    path.write_text(f'scenario = "{SLOW_MAP}"\n[[points]]\nduration = "2s"\n'
                    '[[points]]\nduration = "5000s"\n"network.buffer_timeout" = "0ms"\n')  # minutes of wall time
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "scenarios.cli", "sweep", str(path), "--out", str(out),
                                "--master", "serial", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 60
    while not list((out / "points").glob("p01/.partial-*/plan.json")):  # p00 done, p01 running
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "p01 did not start within 60 s"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.startswith("shufflesim: interrupted: 1 of 2 points done (p00)"), stderr
    assert [p.name for p in (out / "points").iterdir()] == ["p00"]


def _point(point: str, timeout: str, seed: int | None, latency: tuple[float, float] | None,
           status: str = "FINISHED") -> PointResult:
    vertices = (VertexResult("Source: Seq", 1, "high", {"backPressuredTimeMsPerSecond": 900.0}),
                VertexResult("Sink: Writer", 2, "ok", {"numRecordsInPerSecond": 100.0}))
    figures = {} if latency is None else {"latency_p50_ms": latency[0], "latency_p99_ms": latency[1]}
    return PointResult(point, seed, {"network.buffer_timeout": timeout}, status, vertices=vertices, latency=figures)


def _bar_heights(axis: Any) -> list[float]:
    return [patch.get_height() for patch in axis.patches]


def test_the_plot_has_a_latency_panel_on_a_log_scale_when_it_spans_decades() -> None:
    keys = ["network.buffer_timeout"]
    # a buffer timeout of 0 against 100 ms: 0.5 ms against 150 (the sweep of 446ace1), over two seeds
    results = [_point("p00", "0ms", 1, (0.4, 2.0)), _point("p00", "0ms", 2, (0.6, 3.0)),
               _point("p01", "100ms", 1, (150.0, 290.0)), _point("p01", "100ms", 2, (152.0, 300.0)),
               _point("p02", "1s", None, None, status="FAILED")]
    figure = sweep_figure(results, keys, "timeouts")
    backpressure, rate, latency = figure.axes
    assert "latency" in latency.get_ylabel() and latency.get_yscale() == "log"
    assert _bar_heights(backpressure)[:2] == [900.0, 900.0] and _bar_heights(rate)[:2] == [200.0, 200.0]
    heights = _bar_heights(latency)
    assert heights[:2] == pytest.approx([0.5, 151.0]) and math.isnan(heights[2])  # p50, mean over seeds
    marks = [line for line in latency.lines if line.get_gid() == "mark"]
    assert [list(line.get_ydata()) for line in marks] == [pytest.approx([2.5, 295.0, math.nan], nan_ok=True)]
    assert "FAILED" in [text.get_text() for text in latency.texts]
    plt.close(figure)

    # latencies within a decade: a linear scale
    figure = sweep_figure([_point("p00", "1ms", None, (10.0, 20.0)), _point("p01", "2ms", None, (12.0, 30.0))],
                          keys, "close")
    assert figure.axes[2].get_yscale() == "linear"
    plt.close(figure)
    # no point measured latency (no record reached a sink): no latency panel
    figure = sweep_figure([_point("p00", "1ms", None, None), _point("p01", "2ms", None, None)], keys, "none")
    assert len(figure.axes) == 2
    plt.close(figure)
