"""`shufflesim trace`: trace.perfetto.json of real runs, checked against the trace-event format."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from trace_event_format import check_trace_events

from scenarios.cli import main
from scenarios.perfetto import PERFETTO_FILE, perfetto_trace

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios" / "library"


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "slow-map"
    assert main(["run", str(LIBRARY / "slow-map.toml"), "--out", str(out), "--trace", "--set", "duration=3s"]) == 0
    return out


def _names(events: list[dict]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    return processes, threads


def test_trace_of_a_real_run_is_valid_and_shows_tasks_channels_and_flows(
        traced_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(traced_run)]) == 0
    assert str(traced_run / PERFETTO_FILE) in capsys.readouterr().out
    trace = json.loads((traced_run / PERFETTO_FILE).read_text())
    assert check_trace_events(trace) == []
    events = trace["traceEvents"]
    processes, threads = _names(events)
    assert sorted(processes.values()) == ["tm-0", "tm-1"]
    assert {"Source: Seq (1/1)", "SlowMap -> Sink: Writer (1/2)", "SlowMap -> Sink: Writer (2/2)",
            "ds0#0#1 send", "ds0#0#1 receive"} <= set(threads.values())

    # Task tracks: per sample period the three states fill the period; the source is back-pressured.
    per_period: dict[tuple[str, float], float] = defaultdict(float)
    by_state: dict[tuple[str, str], float] = defaultdict(float)
    for e in events:
        if e["ph"] == "X" and e.get("cat") == "task":
            task = threads[e["pid"], e["tid"]]
            per_period[task, e["ts"] // 1e6] += e["dur"]
            by_state[task, e["name"]] += e["dur"]
    assert per_period and all(total == pytest.approx(1e6, abs=5) for total in per_period.values())
    assert by_state["Source: Seq (1/1)", "back-pressured"] > 0.99 * 3e6
    assert by_state["SlowMap -> Sink: Writer (2/2)", "busy"] > 0.99 * 2e6

    # Flows: one per buffer received, from the sender's send track to the receiver's receive track.
    received = [json.loads(line) for line in (traced_run / "trace.jsonl").read_text().splitlines()]
    received = [e for e in received if e["event"] == "buffer_received"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == len(received) > 0 and starts.keys() == ends.keys()
    remote = [i for i, e in ends.items() if threads[e["pid"], e["tid"]] == "ds0#0#1 receive"]
    assert remote
    for flow_id in remote:
        start, end = starts[flow_id], ends[flow_id]
        assert threads[start["pid"], start["tid"]] == "ds0#0#1 send"
        assert (processes[start["pid"]], processes[end["pid"]]) == ("tm-0", "tm-1")
        assert end["ts"] > start["ts"]  # the link takes time
    in_flight = [e for e in events if e["ph"] == "b"]
    assert len(in_flight) == len(received)

    # Counters: the remote channel's credit starts at its 2 exclusive buffers and never goes
    # negative; the local channel has no credit.
    credit = [e["args"]["credit"] for e in events if e["ph"] == "C" and e["name"] == "ds0#0#1" and "credit" in e["args"]]
    assert credit[0] == 2 and min(credit) >= 0
    assert not [e for e in events if e["ph"] == "C" and e["name"] == "ds0#0#0" and "credit" in e["args"]]
    assert any(e["ph"] == "C" and e["name"] == "ds0#0#0" and "backlog" in e["args"] for e in events)


def test_trace_without_trace_jsonl_shows_the_tasks(traced_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.parquet").write_bytes((traced_run / "metrics.parquet").read_bytes())
    assert main(["trace", str(tmp_path / "run"), "--out", str(out)]) == 0
    trace = json.loads(out.read_text())
    assert check_trace_events(trace) == []
    assert {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"} == {"busy", "back-pressured", "idle"}


def test_checkpoint_spans_and_other_events() -> None:
    events = [
        {"t": 1.0, "event": "checkpoint_triggered", "checkpoint_id": 1},
        {"t": 1.1, "event": "alignment_started", "tm": "tm-1", "task": "Map (1/2)", "checkpoint_id": 1},
        {"t": 1.3, "event": "alignment_completed", "tm": "tm-1", "task": "Map (1/2)", "checkpoint_id": 1},
        {"t": 1.5, "event": "checkpoint_completed", "checkpoint_id": 1},
        {"t": 2.0, "event": "alignment_started", "tm": "tm-1", "task": "Map (1/2)", "checkpoint_id": 2},
        {"t": 2.1, "event": "barrier_received", "tm": "tm-1", "channel": "ds0#0#0", "checkpoint_id": 2},
    ]
    trace = perfetto_trace(None, events)
    assert check_trace_events(trace) == []
    _, threads = _names(trace["traceEvents"])
    spans = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert spans["alignment"]["ts"] == pytest.approx(1.1e6) and spans["alignment"]["dur"] == pytest.approx(0.2e6)
    assert threads[spans["alignment"]["pid"], spans["alignment"]["tid"]] == "Map (1/2) barriers"
    assert spans["checkpoint"]["dur"] == pytest.approx(0.5e6)
    instants = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "i"}
    assert instants["alignment_started"]["args"]["checkpoint_id"] == 2  # never completed: kept as an instant
    assert threads[instants["barrier_received"]["pid"], instants["barrier_received"]["tid"]] == "ds0#0#0 receive"


def _x(ts: float, dur: float, tid: int = 1) -> dict:
    return {"name": "s", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": tid}


@pytest.mark.parametrize("events, error", [
    ([{"name": "a", "ph": "X", "ts": 0, "pid": 1, "tid": 1}], "without a number 'dur'"),
    ([_x(0, 10), _x(5, 10)], "partially overlaps"),
    ([{"name": "a", "ph": "C", "ts": 0, "pid": 1, "tid": 1, "args": {"v": "x"}}], "counter"),
    ([{"name": "a", "ph": "b", "cat": "c", "id": 1, "ts": 0, "pid": 1, "tid": 1}], "never ended"),
    ([_x(0, 10), {"name": "f", "ph": "s", "cat": "c", "id": 7, "ts": 1, "pid": 1, "tid": 1}], "1 starts and 0 ends"),
    ([_x(0, 10), _x(20, 10, tid=2), {"name": "f", "ph": "s", "cat": "c", "id": 7, "ts": 15, "pid": 1, "tid": 1},
      {"name": "f", "ph": "f", "bp": "e", "cat": "c", "id": 7, "ts": 25, "pid": 1, "tid": 2}], "inside no slice"),
    ([{"name": "a", "ph": "i", "ts": -1, "pid": 1, "tid": 1}], "'ts'"),
    ([{"name": "bogus", "ph": "M", "pid": 1, "tid": 1, "args": {}}], "unknown metadata"),
    ([{"name": "a", "ph": "Q", "ts": 0, "pid": 1, "tid": 1}], "unknown phase"),
])
def test_the_format_checker_finds_broken_traces(events: list[dict], error: str) -> None:
    errors = check_trace_events({"traceEvents": events})
    assert any(error in message for message in errors), errors
    assert check_trace_events({"traceEvents": [_x(0, 10), _x(2, 3), _x(10, 5)]}) == []  # nested and adjacent
