"""The pytest plugin as a user's test suite meets it: run pytest on a test file of theirs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """pytest on one test file in `tmp_path`, with this checkout's plugin (installed as an entry point)."""
    (tmp_path / "test_user.py").write_text(source)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_sync_test_asking_for_credit_flow_fails_saying_why(tmp_path: Path) -> None:
    # Without `async`, `credit_flow(...)` is a coroutine never awaited: the test would pass, testing nothing.
    result = run_pytest(tmp_path, "def test_credit(credit_flow):\n    h = credit_flow(channels=1)\n")
    assert result.returncode == 1, result.stdout
    assert ("test_credit asks for the credit_flow fixture, which runs async tests only: "
            "write 'async def test_credit(...)'") in result.stdout
    assert "never awaited" not in result.stdout + result.stderr


def test_an_async_test_asking_for_credit_flow_runs(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "async def test_credit(credit_flow):\n"
                                  "    h = await credit_flow(channels=1)\n"
                                  "    assert h.sender(0).credit == 2\n")
    assert result.returncode == 0, result.stdout


ASYNC_FIXTURES = '''
import pytest

finished = []


@pytest.fixture
async def h(credit_flow):
    return await credit_flow(channels=1)


@pytest.fixture
async def backlogged(h):
    await h.emit_buffers(0, 3)
    yield h
    finished.append(h.closed)


async def test_an_async_fixture_opens_the_harness(h):
    assert h.sender(0).credit == 2


async def test_async_fixtures_chain_and_finish_after_the_test(backlogged, h):
    assert backlogged is h
    await h.settle()
    assert h.receiver(0).queued == 2


def test_the_generator_fixture_finished_before_its_harness_closed():
    assert finished == [False]
'''


def test_async_fixtures_of_a_credit_flow_test_run_in_its_virtual_time(tmp_path: Path) -> None:
    """A shared `async def` fixture was refused by pytest ("requested an async fixture ...
    with no plugin or hook that handled it") or, under trio_mode, reached the test as a
    pytest-trio placeholder ('TrioFixture' object has no attribute 'sender')."""
    for ini in ("", "[pytest]\ntrio_mode = true\n"):
        (tmp_path / "pytest.ini").write_text(ini or "[pytest]\n")
        result = run_pytest(tmp_path, ASYNC_FIXTURES)
        assert result.returncode == 0, result.stdout
        assert "3 passed" in result.stdout
