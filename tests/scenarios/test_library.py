"""The library scenarios show what their header comments say (sim mode, shortened where
the effect is already steady)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios.run import run_scenario
from scenarios.scenario_file import load_scenario

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"


def run(tmp_path: Path, name: str, *overrides: str) -> dict:
    scenario = load_scenario(LIBRARY / f"{name}.toml", overrides)
    summary = run_scenario(scenario, tmp_path / name).summary
    assert summary["status"] == "FINISHED" and summary["invariants"]["violations"] == []
    return {vertex["name"].split(" -> ")[0].removeprefix("Source: "): vertex for vertex in summary["vertices"]}


def subtask(vertex: dict, index: int) -> dict:
    return vertex["subtasks"][index]["metrics"]


def test_head_of_line_blocking_starves_the_fast_channel_only_without_credit(tmp_path: Path) -> None:
    tcp = run(tmp_path, "head-of-line", "duration=12s")
    credit = run(tmp_path, "head-of-line", "duration=12s", "network.flow_control=credit")
    for vertices in (tcp, credit):
        assert subtask(vertices["Work"], 1)["busyTimeMsPerSecond"] > 990
        assert all(subtask(vertices["Events"], i)["backPressuredTimeMsPerSecond"] > 900 for i in (1, 2))
    # Without credit the fast subtask starves behind the slow one's channel ...
    assert subtask(tcp["Events"], 0)["backPressuredTimeMsPerSecond"] > 900
    assert subtask(tcp["Work"], 0)["numRecordsInPerSecond"] == pytest.approx(500, rel=0.1)
    assert subtask(tcp["Work"], 0)["idleTimeMsPerSecond"] > 400
    # ... with credit it runs at its source's rate.
    assert subtask(credit["Events"], 0)["backPressuredTimeMsPerSecond"] < 100
    assert subtask(credit["Work"], 0)["numRecordsInPerSecond"] == pytest.approx(900, rel=0.02)


def test_skewed_keys_hot_subtask_is_the_bottleneck_and_backpressures_the_sources(tmp_path: Path) -> None:
    from shuffle.partitioner.key_groups import assign_key_to_parallel_operator

    vertices = run(tmp_path, "skewed-keys", "duration=20s")
    hot = assign_key_to_parallel_operator(0, 128, 4)
    reduce = vertices["CountPerKey"]
    assert subtask(reduce, hot)["busyTimeMsPerSecond"] > 990
    assert subtask(reduce, hot)["inPoolUsage"] > 0.9
    assert all(subtask(reduce, i)["busyTimeMsPerSecond"] < 300 for i in range(4) if i != hot)
    assert vertices["Events"]["backpressure_level"] == "high"
    assert all(subtask(vertices["Events"], i)["backPressuredTimeMsPerSecond"] > 900 for i in range(2))


def test_slow_sink_window_backpressure_only_while_the_sink_is_slow(tmp_path: Path) -> None:
    from scenarios.outputs import read_metrics

    run(tmp_path, "slow-sink-window")
    rows = read_metrics(tmp_path / "slow-sink-window").to_pylist()

    def series(vertex: str, metric: str) -> dict[int, float]:
        values: dict[int, list[float]] = {}
        for row in rows:
            if row["vertex"].startswith(vertex) and row["metric"] == metric:
                values.setdefault(round(row["t"]), []).append(row["value"])
        return {t: max(v) for t, v in values.items()}

    backpressured = series("Source: Orders", "backPressuredTimeMsPerSecond")
    busy = series("Warehouse", "busyTimeMsPerSecond")
    assert all(backpressured[t] == 0 for t in [*range(1, 11), *range(22, 31)])
    assert all(backpressured[t] > 900 for t in range(13, 21))
    assert all(busy[t] < 100 for t in [*range(1, 10), *range(22, 31)])
    assert all(busy[t] > 990 for t in range(12, 21))
