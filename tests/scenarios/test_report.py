"""report.html: written by every run, remade by `shufflesim report`, drawn by a real browser."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from browser import probe_plots, probe_tables, screenshot
from plotly.offline import get_plotlyjs

from scenarios.cli import main
from scenarios.report import REPORT_FILE, load_run, write_report
from scenarios.report.data import bucket_extremes, bucket_mean, flat_settings
from scenarios.report.figures import checkpoints_figure, latency_figure, latency_groups, plan_figure, vertex_figure
from scenarios.report.page import format_value

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"
VERTICES = ("Source: Seq", "SlowMap -> Sink: Writer")

#: summary.json entries the runtime does not produce yet, in ARCHITECTURE.md's shapes.
CHECKPOINTS = [
    {"id": 1, "status": "COMPLETED", "type": "aligned", "trigger_s": 1.0, "duration_ms": 120.0,
     "start_delay_ms": 15.0, "alignment_ms": 80.0, "processed_bytes": 65536, "persisted_bytes": 0, "state_bytes": 4096, "failure": None},
    {"id": 2, "status": "COMPLETED", "type": "unaligned", "trigger_s": 2.0, "duration_ms": 40.0,
     "start_delay_ms": 5.0, "alignment_ms": 0.0, "processed_bytes": 0, "persisted_bytes": 327680, "state_bytes": 4096, "failure": None},
    {"id": 3, "status": "FAILED", "type": "aligned", "trigger_s": 3.0, "duration_ms": 900.0,
     "start_delay_ms": 700.0, "alignment_ms": None, "processed_bytes": None, "persisted_bytes": None, "state_bytes": None,
     "failure": "CHECKPOINT_EXPIRED"},
]
LATENCY = {"mean": 12.0, "p50": 10.0, "p90": 20.0, "p99": 45.0, "p999": 60.0, "max": 75.0}


@pytest.fixture(scope="module")
def slow_map(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "slow-map"
    code = main(["run", str(LIBRARY / "slow-map.toml"), "--out", str(out), "--trace", "--set", "duration=4s"])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def synthetic(slow_map: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slow-map run with checkpoints and latency added to its summary.json."""
    folder = tmp_path_factory.mktemp("synthetic") / "with-checkpoints"
    shutil.copytree(slow_map, folder)
    summary = json.loads((folder / "summary.json").read_text())
    summary |= {"checkpoints": CHECKPOINTS, "latency_ms": LATENCY}
    for vertex in summary["vertices"]:
        if vertex["name"] == "SlowMap -> Sink: Writer":
            vertex["latency_ms"] = LATENCY
    (folder / "summary.json").write_text(json.dumps(summary))
    write_report(folder)
    return folder


def test_the_report_of_a_run_stopped_early_says_so(slow_map: Path, tmp_path: Path) -> None:
    """A run stopped by Ctrl-C has complete outputs: its report must not pass for a run of its whole duration."""
    folder = tmp_path / "stopped"
    shutil.copytree(slow_map, folder)
    summary = json.loads((folder / "summary.json").read_text())
    summary |= {"duration_s": 2.5, "interrupted": {"at_s": 2.5, "note": "..."}}
    (folder / "summary.json").write_text(json.dumps(summary))
    page = write_report(folder).read_text()
    assert "Stopped early (Ctrl-C or SIGTERM) at 2.500 s of 4 s: the results cover the run until then." in page
    assert "Stopped early" not in (slow_map / REPORT_FILE).read_text()


def _by_plot(probe: dict) -> dict[str, dict]:
    return {plot["plot"]: plot for plot in probe["plots"]}


def test_run_writes_a_self_contained_report(slow_map: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = (slow_map / REPORT_FILE).read_text()
    library = get_plotlyjs()
    assert page.count(library) == 1  # embedded once
    ours = page.replace(library, "")
    assert "<script src" not in ours and "http" not in ours  # nothing to fetch: opens offline
    assert ours.count("Plotly.newPlot(") == 1 + len(VERTICES) + 2  # plan, each vertex, channels, latency
    assert len(ours) < 300_000
    summary = json.loads((slow_map / "summary.json").read_text())
    settings = flat_settings(summary["settings"])
    assert settings["duration"] == 4.0 and settings["network.buffer_timeout"] == 0.1
    assert settings["job.stages[SlowMap].cost"] == 0.005 and settings["cluster.task_managers"] == 2
    assert "network.buffer_timeout" in page  # the settings table at the bottom
    # slow-map's local map reads inPoolUsage 0 with 9 buffers queued, as Flink's: the page says why
    assert "of remote channels only, as in Flink: a local channel reads the producer's buffers" in page

    (slow_map / REPORT_FILE).unlink()
    assert main(["report", str(slow_map)]) == 0
    assert capsys.readouterr().out.strip() == f"report {slow_map / REPORT_FILE}"
    assert (slow_map / REPORT_FILE).read_text() == page  # remade from the files alone, the same


def test_steady_state_table_shows_each_vertex_s_busiest_subtask(slow_map: Path, tmp_path: Path) -> None:
    # Flink's job graph nodes read "Busy (max)" and "Backpressured (max)": the highest subtask.
    folder = tmp_path / "uneven"
    shutil.copytree(slow_map, folder)
    summary = json.loads((folder / "summary.json").read_text())
    slow = next(v for v in summary["vertices"] if v["name"] == "SlowMap -> Sink: Writer")
    for subtask, busy in zip(slow["subtasks"], (12.5, 987.25)):
        subtask["metrics"]["busyTimeMsPerSecond"] = busy
    (folder / "summary.json").write_text(json.dumps(summary))
    write_report(folder)
    page = (folder / REPORT_FILE).read_text()
    assert "<th>back-pressured max</th><th>busy max</th>" in page
    row = page[page.index("<td>SlowMap -&gt; Sink: Writer</td>"):].split("</tr>")[0]
    cells = [c.split(">", 1)[1] for c in row.split("</td>")[:-1]]
    assert cells[4] == "987.2"  # the max column; the mean column stays summary.json's
    assert cells[6] == f"{slow['metrics']['busyTimeMsPerSecond']:.4g}"


def test_report_renders_every_plot_with_data_in_chromium(slow_map: Path, tmp_path: Path) -> None:
    probe = probe_plots(slow_map / REPORT_FILE, tmp_path)
    assert probe["plotly"] is True
    plots = _by_plot(probe)
    assert set(plots) == {"plan", "channels", "latency"} | {f"vertex:{name}" for name in VERTICES}
    for name, plot in plots.items():
        assert plot["drawn"] >= 1, f"{name} drew nothing"
        assert any(trace["points"] > 0 for trace in plot["visible"]), f"{name} has no data"
    source = plots["vertex:Source: Seq"]
    assert {"level", "back-pressured", "busy", "idle", "records out", "outPoolUsage", "outputQueueLength"} <= {
        t["name"] for t in source["visible"]}
    assert all(t["points"] >= 4 for t in source["visible"])  # 4 s sampled every second
    slow = plots["vertex:SlowMap -> Sink: Writer"]
    assert slow["menus"] == 1  # parallelism 2: a menu for all subtasks / one subtask
    assert slow["traces"] == 3 * len([t for t in slow["visible"]])  # vertex view + 2 subtask views
    assert len(plots["channels"]["visible"]) >= 3  # credit, backlog, in flight of the remote channel

    png = screenshot(slow_map / REPORT_FILE, tmp_path / "report.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(data[16:20], "big") == 1400
    assert len(data) > 100_000  # plots, not a blank page


def test_no_table_runs_off_a_1400_pixel_window(synthetic: Path, tmp_path: Path) -> None:
    # the steady-state table has 17 columns: its last ones (inputQueueLength, outputQueueLength)
    # were cut off, past the page's right edge
    for width in (1400, 700):
        layout = probe_tables(synthetic / REPORT_FILE, tmp_path, width=width)
        assert layout["window"] == width and layout["page"] <= width  # the page does not scroll sideways
        steady = next(t for t in layout["tables"] if "inPoolUsage" in t["headers"])
        assert {"inputQueueLength", "outputQueueLength"} <= set(steady["headers"])
        assert steady["wider"] is (width < 1400)  # fits at 1400, its headers broken between words
        for table in layout["tables"]:
            assert table["right"] <= width, table["headers"]
            if table["wider"]:  # what does not fit scrolls inside its box
                assert table["overflow"] in ("auto", "scroll"), table["headers"]


def test_checkpoints_and_latency_sections_from_a_synthetic_summary(synthetic: Path, tmp_path: Path) -> None:
    page = (synthetic / REPORT_FILE).read_text()
    assert "CHECKPOINT_EXPIRED" in page and "No checkpoints were taken" not in page
    plots = _by_plot(probe_plots(synthetic / REPORT_FILE, tmp_path))
    checkpoints, latency = plots["checkpoints"], plots["latency"]
    assert checkpoints["drawn"] >= 1 and latency["drawn"] >= 1
    names = {t["name"] for t in checkpoints["visible"]}
    assert {"duration", "alignment", "start delay", "processed in-flight data", "persisted in-flight data", "state",
            "failed"} == names
    assert [t["points"] for t in latency["visible"]] == [6, 6]  # all sinks, and the one sink vertex


def test_checkpoint_and_latency_figures_carry_the_values() -> None:
    fig = checkpoints_figure(CHECKPOINTS)
    traces = {t.name: t for t in fig.data}
    assert list(traces["duration"].x) == [1.0, 2.0, 3.0] and list(traces["duration"].y) == [120.0, 40.0, 900.0]
    assert list(traces["persisted in-flight data"].y) == [0, 327680, None]
    assert list(traces["processed in-flight data"].y) == [65536, 0, None]
    assert list(traces["failed"].x) == [3.0]
    assert traces["duration"].hovertext[2] == "checkpoint 3 (aligned): FAILED<br>CHECKPOINT_EXPIRED"
    no_plan = {"id": None, "status": "FAILED", "type": "CHECKPOINT", "trigger_s": 4.0,
               "failure": "NOT_ALL_REQUIRED_TASKS_RUNNING"}  # a trigger whose plan failed: no id
    assert checkpoints_figure([no_plan]).data[0].hovertext[0].startswith("checkpoint (no id: its plan failed)")
    summary = {"latency_ms": LATENCY, "vertices": [{"name": "SlowMap -> Sink: Writer", "latency_ms": LATENCY},
                                                   {"name": "Source: Seq"}]}
    bars = {t.name: list(t.y) for t in latency_figure(latency_groups(summary)).data}
    assert bars == {"all sinks": [12.0, 10.0, 20.0, 45.0, 60.0, 75.0],
                    "SlowMap -> Sink: Writer": [12.0, 10.0, 20.0, 45.0, 60.0, 75.0]}


def test_plan_figure_draws_vertices_and_ship_strategies(slow_map: Path) -> None:
    run = load_run(slow_map)
    fig = plan_figure(run.plan, {"Source: Seq": "high"})
    texts = [a.text for a in fig.layout.annotations]
    assert any("<b>SlowMap</b>" in t and "→ Sink: Writer" in t and "parallelism 2" in t for t in texts)
    assert "REBALANCE" in texts
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    assert len(arrows) == 1 and arrows[0].ax < arrows[0].x  # left to right, source to map
    assert len(fig.layout.shapes) == 2


def test_vertex_series_follow_flink_aggregation(slow_map: Path) -> None:
    run = load_run(slow_map)
    vertex = "SlowMap -> Sink: Writer"
    t0, in0 = run.metrics.subtask(vertex, "numRecordsInPerSecond", 0)
    t1, in1 = run.metrics.subtask(vertex, "numRecordsInPerSecond", 1)
    t, total = run.metrics.vertex(vertex, "numRecordsInPerSecond")
    assert len(t) == len(t0) == len(t1) >= 4
    assert np.allclose(total, in0 + in1)  # throughput: summed over subtasks
    _, pool = run.metrics.vertex(vertex, "inPoolUsage")
    _, pool0 = run.metrics.subtask(vertex, "inPoolUsage", 0)
    _, pool1 = run.metrics.subtask(vertex, "inPoolUsage", 1)
    assert np.allclose(pool, (pool0 + pool1) / 2)  # gauges: averaged, as summary.json
    fig = vertex_figure(run, run.vertices[1])
    stacked = [t for t in fig.data if getattr(t, "stackgroup", None) == "time" and t.visible]
    assert [t.name for t in stacked] == ["back-pressured", "busy", "idle"]
    assert np.allclose(np.sum([t.y for t in stacked], axis=0)[1:], 1000)  # each second adds up


def test_table_numbers_read_at_a_glance() -> None:
    """A 20 s backlog's latency read "1.503e+04" ms in the report's and compare's tables."""
    assert [format_value(v) for v in (15030.2, 88074.49, 4563.0, 0.1, 0.0, 2.5e9, 7, None)] == [
        "15030", "88074", "4563", "0.1", "0", "2.5000e+09", "7", "null"]


def test_downsampling_keeps_sums_and_peaks() -> None:
    t = np.arange(10_000, dtype=float)
    v = np.ones(10_000)
    v[5_000] = 50.0
    tm, vm = bucket_mean(t, v, 100)
    assert len(tm) == 100 and vm.sum() * 100 == pytest.approx(v.sum())
    te, ve = bucket_extremes(t, v, 100)
    assert len(te) == 100 and ve.max() == 50.0 and ve.min() == 1.0
    short = t[:5]
    assert bucket_mean(short, v[:5], 100)[0] is short  # short series stay as they are


@pytest.mark.parametrize("argv, message", [
    (["report", "no/such/run"], "no such folder"),
    (["compare", "no/such/run"], "two or more"),
    # a folder that is not there is named as such, by every command that reads a run
    (["trace", "no/such/run"], "no/such/run: no such folder (give the --out folder of a 'shufflesim run')"),
    (["trace", __file__], "test_report.py: a file, not a folder"),
])
def test_user_mistakes(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shufflesim: error:") and message in err and "\n" not in err


def test_report_of_a_folder_without_summary_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path / 'summary.json'}: no such file" in capsys.readouterr().err
