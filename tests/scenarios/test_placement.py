"""`shufflesim plan` shows where a scenario's subtasks will run and which channels are local:
the placement the run uses (scenarios.placement)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph import ExecutionGraph
from scenarios.build import build_program
from scenarios.cli import main
from scenarios.placement import plan_placement
from scenarios.run import run_scenario
from scenarios.scenario_file import Scenario, load_scenario

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"


def _placement_section(out: str) -> list[str]:
    return out[out.index("Placement ("):].splitlines()


def test_plan_prints_each_subtasks_task_manager_and_its_local_and_remote_channels(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(LIBRARY / "skewed-keys.toml")]) == 0
    section = _placement_section(capsys.readouterr().out)
    # both sources on tm-0 (2 slots each): keyed subtasks 0-1 read only local channels, 2-3 only remote
    assert section[:9] == [
        'Placement (cluster.placement = "ordered"; 2 TaskManagers, 2 slots each)',
        "  tm-0",
        "    slot 0  Source: Events (1/2)",
        "            CountPerKey -> Sink: Writer (1/4)   gate 0: 2 local, 0 remote",
        "    slot 1  Source: Events (2/2)",
        "            CountPerKey -> Sink: Writer (2/4)   gate 0: 2 local, 0 remote",
        "  tm-1",
        "    slot 0  CountPerKey -> Sink: Writer (3/4)   gate 0: 0 local, 2 remote",
        "    slot 1  CountPerKey -> Sink: Writer (4/4)   gate 0: 0 local, 2 remote",
    ]
    assert "inPoolUsage" in " ".join(section[9:])


def test_plan_json_has_the_placement(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(LIBRARY / "local-vs-remote.toml"), "--json"]) == 0
    placement = json.loads(capsys.readouterr().out)["placement"]
    assert (placement["policy"], placement["task_managers"], placement["unknown_after"]) == (
        "ordered", ["tm-0", "tm-1"], None)
    assert [(s["vertex"], s["task_manager"], s["gates"]) for s in placement["subtasks"]] == [
        ("Source: Events", "tm-0", []), ("Score -> Sink: Writer", "tm-1", [{"local": 0, "remote": 1}])]
    # sharing the source's slot group, the map reads a local channel
    assert main(["plan", str(LIBRARY / "local-vs-remote.toml"), "--json",
                 "--set", "job.stages[Score].slot_sharing_group=default"]) == 0
    placement = json.loads(capsys.readouterr().out)["placement"]
    assert [(s["task_manager"], s["gates"]) for s in placement["subtasks"]] == [
        ("tm-0", []), ("tm-0", [{"local": 1, "remote": 0}])]


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_the_planned_placement_is_the_runs(seed: int, tmp_path: Path) -> None:
    scenario = load_scenario(LIBRARY / "skewed-keys.toml",
                             ["duration=1s", "cluster.placement=random", f"seed={seed}"])
    outcome = run_scenario(scenario, tmp_path)
    planned = json.loads((tmp_path / "plan.json").read_text())["placement"]["subtasks"]
    ran: dict[str, list[str]] = {}
    for subtask in planned:
        ran.setdefault(subtask["vertex"], []).append(subtask["task_manager"])
    assert ran == outcome.result.placement
    sources = outcome.result.placement["Source: Events"]
    assert planned[-1]["gates"] == [{"local": sources.count(planned[-1]["task_manager"]),
                                     "remote": 2 - sources.count(planned[-1]["task_manager"])}]


def test_a_placement_that_a_lost_task_manager_changes_is_not_known_before_running() -> None:
    kill = ['faults=[{at = "2s", kind = "kill_task_manager", task_manager = "tm-1"}]']
    scenario = load_scenario(LIBRARY / "slow-map.toml", [*kill, "restart.strategy=fixed_delay"])
    graph_plan = plan_placement(scenario, _graph(scenario))
    assert graph_plan.unknown_after is not None
    assert "faults[0] (kill_task_manager at 2 s) can end a TaskManager" in graph_plan.render()
    # without restarts the first attempt is the only one: its placement holds
    scenario = load_scenario(LIBRARY / "slow-map.toml", kill)
    assert plan_placement(scenario, _graph(scenario)).unknown_after is None
    # a restart after a fault that ends no TaskManager keeps the placement
    scenario = load_scenario(LIBRARY / "link-failure.toml", ["restart.strategy=fixed_delay"])
    assert plan_placement(scenario, _graph(scenario)).unknown_after is None


def test_a_job_the_cluster_cannot_hold_has_no_placement(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(LIBRARY / "slow-map.toml"), "--set", "cluster.task_managers=1"]) == 0
    section = _placement_section(capsys.readouterr().out)
    assert section[0] == 'Placement (cluster.placement = "ordered"; 1 TaskManager, 1 slot each)'
    assert "the job needs 2 slots, the cluster has 1" in section[1]


def _graph(scenario: Scenario) -> ExecutionGraph:
    return build_program(scenario).get_execution_graph()
