"""End-of-run invariants are checked: a broken credit loop shows as credit violations."""

from __future__ import annotations

import pytest

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle.netty.view_reader import CreditBasedSequenceNumberingViewReader
from taskmgr.cluster import execute
from taskmgr.jobmanager import JobStatus


def remote_pipeline() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator().rebalance().map(cost="1ms").slot_sharing_group("b").sink_to(DiscardingSink())
    return env


def test_healthy_run_keeps_every_invariant() -> None:
    result = execute(remote_pipeline(), duration=3, task_managers=2)
    assert result.invariants["records_match"] is True
    assert result.invariants["buffers_leaked"] == 0
    assert result.invariants["credit_violations"] == 0
    assert result.invariant_violations() == []


def test_sender_ignoring_credit_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    original = CreditBasedSequenceNumberingViewReader.add_credit
    monkeypatch.setattr(CreditBasedSequenceNumberingViewReader, "add_credit",
                        lambda self, delta: original(self, delta + 3))
    result = execute(remote_pipeline(), duration=3, task_managers=2)
    assert result.status is JobStatus.FAILED
    assert result.invariants["credit_violations"] >= 1
    assert any("credit violations" in v for v in result.invariant_violations())
