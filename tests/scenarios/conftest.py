"""A small sweep shared by the sweep tests, and its points run one by one as `shufflesim run` would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scenarios.run import run_scenario
from scenarios.scenario_file import ScenarioError, load_scenario
from scenarios.sweep_file import load_sweep

SLOW_MAP = Path(__file__).resolve().parents[2] / "scenarios" / "library" / "slow-map.toml"

#: 4 grid points, one whose job fails, one whose override is invalid; 2 s of virtual time each.
SWEEP = f"""
scenario = "{SLOW_MAP}"
[grid]
duration = ["2s"]
"network.buffer_timeout" = ["1ms", "100ms"]
"job.stages[SlowMap].cost" = ["1ms", "5ms"]

[[points]]  # two network buffers cannot serve the job: it fails
duration = "2s"
"cluster.network_memory" = "64kb"

[[points]]
duration = "2s"
"network.buffer_timeout" = "10 parsecs"
"""



@pytest.fixture(scope="module")
def sweep_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "sweep.toml"
    path.write_text(SWEEP)
    return path


@pytest.fixture(scope="module")
def one_by_one(sweep_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Point id -> the summary of `shufflesim run slow-map.toml --set ...` of its overrides
    (or the ScenarioError it gives)."""
    out = tmp_path_factory.mktemp("one-by-one")
    summaries: dict[str, Any] = {}
    for point in load_sweep(sweep_path).points:
        overrides = [f"{key}={value}" for key, value in point.written().items()]
        try:
            summaries[point.id] = run_scenario(load_scenario(SLOW_MAP, overrides), out / point.id).summary
        except ScenarioError as e:
            summaries[point.id] = e
    return summaries


@pytest.fixture(scope="module")
def finished_points() -> list[str]:
    """The points of SWEEP whose job finishes."""
    return ["p00", "p01", "p02", "p03"]
