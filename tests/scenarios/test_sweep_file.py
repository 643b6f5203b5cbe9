"""Sweep files: points of a grid, explicit points and seeds; one clear error for a bad file."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios.cli import main
from scenarios.scenario_file import ScenarioError
from scenarios.sweep_file import load_sweep

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"

def write_sweep(tmp_path: Path, body: str) -> Path:
    (tmp_path / "scenario.toml").write_text((LIBRARY / "slow-map.toml").read_text())
    path = tmp_path / "sweep.toml"
    path.write_text(body)
    return path


def test_grid_is_the_cartesian_product_last_key_fastest(tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep(tmp_path, """
scenario = "scenario.toml"
[grid]
"network.buffer_timeout" = ["1ms", "10ms", "100ms"]
"job.stages[SlowMap].cost" = ["1ms", "5ms"]
"""))
    assert sweep.keys == ("network.buffer_timeout", "job.stages[SlowMap].cost")
    assert [p.id for p in sweep.points] == ["p00", "p01", "p02", "p03", "p04", "p05"]
    assert sweep.points[1].overrides == {"network.buffer_timeout": "1ms", "job.stages[SlowMap].cost": "5ms"}
    assert sweep.points[-1].overrides == {"network.buffer_timeout": "100ms", "job.stages[SlowMap].cost": "5ms"}
    scenario = sweep.scenario(sweep.points[3])
    assert scenario.network.buffer_timeout == pytest.approx(0.01)
    assert scenario.job.stages[1].cost == pytest.approx(0.005)
    assert {p.seed for p in sweep.points} == {7}  # the scenario's seed


def test_explicit_points_follow_the_grid_and_seeds_repeat_every_point(tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep(tmp_path, """
scenario = "scenario.toml"
seeds = [3, 4]
[grid]
"job.stages[SlowMap].cost" = ["1ms", "2ms"]
[[points]]
"network.buffer_timeout" = "off"
"network.floating_buffers_per_gate" = 2
"""))
    assert sweep.keys == ("job.stages[SlowMap].cost", "network.buffer_timeout", "network.floating_buffers_per_gate")
    assert [(p.id, p.seed) for p in sweep.points] == [
        ("p00-s3", 3), ("p00-s4", 4), ("p01-s3", 3), ("p01-s4", 4), ("p02-s3", 3), ("p02-s4", 4)]
    explicit = sweep.points[4]
    assert explicit.written() == {"network.buffer_timeout": "off", "network.floating_buffers_per_gate": "2",
                                  "seed": "3"}
    scenario = sweep.scenario(explicit)
    assert (scenario.seed, scenario.network.buffer_timeout, scenario.network.floating_buffers_per_gate) == (3, -1, 2)


def test_tables_among_a_grid_keys_values_set_each_of_their_keys(tmp_path: Path) -> None:
    """As a table value of [[points]] does: two keys of a stage varied together, the others kept."""
    sweep = load_sweep(write_sweep(tmp_path, """
scenario = "scenario.toml"
[grid]
"job.stages[SlowMap]" = [{cost = "1ms", parallelism = 1}, {cost = "2ms"}]
"""))
    assert sweep.keys == ("job.stages[SlowMap].cost", "job.stages[SlowMap].parallelism")
    assert sweep.points[0].written() == {"job.stages[SlowMap].cost": "1ms", "job.stages[SlowMap].parallelism": "1"}
    first, second = (sweep.scenario(point).job.stages[1] for point in sweep.points)
    assert (first.cost, first.parallelism) == (pytest.approx(0.001), 1)
    assert (second.cost, second.parallelism, second.partitioner) == (pytest.approx(0.002), 2, "rebalance")


def test_a_bad_value_only_makes_its_point_invalid(tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep(tmp_path, """
scenario = "scenario.toml"
[grid]
"network.buffer_timeout" = ["1ms", "10 parsecs"]
"""))
    sweep.scenario(sweep.points[0])
    with pytest.raises(ScenarioError, match="network.buffer_timeout: '10 parsecs' is not a duration"):
        sweep.scenario(sweep.points[1])


@pytest.mark.parametrize("body, message", [
    ('scenaro = "scenario.toml"', "sweep.toml: unknown key 'scenaro' (did you mean 'scenario'?)"),
    ('[grid]\nseed = [1]', "sweep.toml: missing key 'scenario'"),
    ('scenario = "scenario.toml"', "sweep.toml: give a [grid] of keys with lists of values, or [[points]]"),
    ('scenario = "scenario.toml"\ngrid = {}', "sweep.toml: grid: is empty"),
    ('scenario = "scenario.toml"\n[grid]\nseed = 3', "sweep.toml: grid 'seed': must be a non-empty list of values"),
    ('scenario = "scenario.toml"\n[grid]\nseed = []', "sweep.toml: grid 'seed': must be a non-empty list of values"),
    ('scenario = "missing.toml"\n[grid]\nseed = [1]', "sweep.toml: scenario: "),
    ('scenario = "scenario.toml"\n[grid]\n"network.bufer_size" = ["1kb"]',
     "sweep.toml: 'network.bufer_size': not in scenario.toml: unknown key 'network.bufer_size' "
     "(did you mean 'network.buffer_size'?)"),
    ('scenario = "scenario.toml"\n[grid]\n"job.stages[Nope].cost" = ["1ms"]', "there is no job.stages[Nope]"),
    ('scenario = "scenario.toml"\n[grid]\n"job.stages[Seq].cost" = ["1ms", "bad"]',
     "a 'source' stage takes no 'cost'"),
    ('scenario = "scenario.toml"\n[grid]\n"duration.x" = [1]', "'duration' is not a table"),
    ('scenario = "scenario.toml"\nseeds = [1, 1]\n[grid]\nduration = ["1s"]', "sweep.toml: seeds: must be distinct"),
    ('scenario = "scenario.toml"\nseeds = [1]\n[grid]\nseed = [2]', "sweep.toml: seeds: the points set 'seed' too"),
    ('scenario = "scenario.toml"\n[grid]\nmode = ["realtime"]', "sweep.toml: sweeps run in sim mode"),
    ('scenario = "scenario.toml"\npoints = [1]', "sweep.toml: points[0]: must be a table of overrides"),
])
def test_bad_sweep_files(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_sweep(write_sweep(tmp_path, body))
    assert message in str(info.value)


def test_a_bad_sweep_file_is_one_line_and_exit_2_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(tmp_path, 'scenario = "scenario.toml"\n[grid]\n"network.bufer_size" = ["1kb"]')
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"shufflesim: error: {sweep}: ") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_the_library_sweeps_load() -> None:
    for path in sorted((LIBRARY / "sweeps").glob("*.toml")):
        assert load_sweep(path).points
