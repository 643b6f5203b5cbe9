"""The cluster secret (`[cluster] secret` or $SHUFFLESIM_SECRET) and `network.max_frame_size`."""

import json
from pathlib import Path

import pytest

from scenarios.cli import main
from scenarios.run import SECRET_VARIABLE, cluster_secret
from scenarios.scenario_file import ScenarioError, load_scenario

SLOW_MAP = Path(__file__).parents[2] / "scenarios" / "library" / "slow-map.toml"
SECRET = "correct-horse-battery-staple"


def test_secret_from_the_scenario_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv(SECRET_VARIABLE, "from-the-environment-0123")
    scenario = load_scenario(SLOW_MAP, [f"cluster.secret={SECRET}"])
    assert cluster_secret(scenario) == SECRET.encode()
    assert SECRET not in repr(scenario)


def test_secret_from_the_environment_or_none(monkeypatch):
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    assert cluster_secret(load_scenario(SLOW_MAP)) is None  # the cluster draws a random one
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    assert cluster_secret(load_scenario(SLOW_MAP)) == SECRET.encode()


@pytest.mark.parametrize("value, message", [("hunter2", "at least 16 characters"), ("12", "must be a string")])
def test_bad_secret_in_the_scenario_names_the_key_not_the_value(value, message):
    with pytest.raises(ScenarioError, match=f"cluster.secret: .*{message}") as error:
        load_scenario(SLOW_MAP, [f"cluster.secret={value}"])
    assert "hunter2" not in str(error.value)


def test_bad_secret_in_the_environment_exits_2_with_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(SECRET_VARIABLE, "hunter2")
    assert main(["run", str(SLOW_MAP), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"shufflesim: error: {SECRET_VARIABLE}:") and "\n" not in err and "hunter2" not in err


def test_max_frame_size():
    assert load_scenario(SLOW_MAP, ["network.max_frame_size=4mb"]).network_config().frame_size_limit == 4 << 20
    with pytest.raises(ScenarioError, match="network.max_frame_size: must hold one buffer plus"):
        load_scenario(SLOW_MAP, ["network.max_frame_size=64kb"])


def test_a_runs_outputs_do_not_show_the_secret(tmp_path):
    """summary.json's settings (and the report's table of them) once held the secret as
    given: whoever reads a shared run folder could run code in that cluster's TaskManagers."""
    out = tmp_path / "out"
    assert main(["run", str(SLOW_MAP), "--out", str(out), "--quiet", "--set", "duration=1s",
                 "--set", f"cluster.secret={SECRET}"]) == 0
    for path in out.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path.name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["cluster"]["secret"] == "(hidden)"
