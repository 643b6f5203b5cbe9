"""A master nobody answers at is named before Spark starts on it (scenarios/spark_master.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from scenarios.cli import main
from scenarios.spark_master import master_addresses, unreachable_master

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"


@pytest.fixture
def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("master, addresses", [
    ("spark://host-a:7077", [("host-a", 7077)]),
    ("spark://host-a:7077,host-b:7078", [("host-a", 7077), ("host-b", 7078)]),
    ("spark://host-a", []),  # Spark refuses it itself, at once
    ("k8s://https://api.example:6443", [("api.example", 6443)]),
    ("k8s://api.example", [("api.example", 443)]),
    ("k8s://http://api.example", [("api.example", 80)]),
    ("local[2]", []),
    ("yarn", []),
])
def test_the_addresses_a_driver_connects_to(master: str, addresses: list[tuple[str, int]]) -> None:
    assert master_addresses(master) == addresses


def test_a_master_that_refuses_connections_is_named(closed_port: int) -> None:
    problem = unreachable_master(f"spark://127.0.0.1:{closed_port}")
    assert problem == f"cannot reach the Spark master at 127.0.0.1:{closed_port} (Connection refused)"
    assert "Kubernetes API server at 127.0.0.1" in unreachable_master(f"k8s://https://127.0.0.1:{closed_port}")


def test_one_answering_master_of_several_is_enough(closed_port: int, listening_port: int) -> None:
    assert unreachable_master(f"spark://127.0.0.1:{listening_port}") is None
    assert unreachable_master(f"spark://127.0.0.1:{closed_port},127.0.0.1:{listening_port}") is None


def test_yarn_needs_a_hadoop_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    assert unreachable_master("yarn") == ("set HADOOP_CONF_DIR or YARN_CONF_DIR to the folder of the "
                                          "cluster's Hadoop configuration")
    monkeypatch.setenv("YARN_CONF_DIR", str(tmp_path))
    assert unreachable_master("yarn") is None


@pytest.mark.parametrize("command", [
    ["sweep", str(LIBRARY / "sweeps" / "source-rate.toml")],
    ["run", str(LIBRARY / "slow-map.toml"), "--engine", "spark", "--set", "mode=realtime"],
])
def test_sweep_and_run_fail_at_once_on_a_master_nobody_answers_at(
        command: list[str], closed_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    master = f"spark://127.0.0.1:{closed_port}"
    assert main([*command, "--out", str(tmp_path / "o"), "--master", master, "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"shufflesim: error: --master {master}: cannot reach the Spark master at 127.0.0.1:{closed_port} "
        "(Connection refused)")
