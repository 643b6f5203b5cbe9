import json
import math

import pyarrow as pa

from scenarios.outputs import (
    read_metrics,
    write_metrics,
    write_plan,
    write_summary,
    write_trace,
)
from taskmgr.metrics.summary import VertexLayout, vertex_summaries
from taskmgr.metrics.table import MetricTable


def test_metrics_parquet_round_trip_and_summary(tmp_path):
    table = MetricTable()
    for t in (1.0, 2.0, 3.0, 4.0):
        table.append(t, "Source: Seq", 0, "tm-0", "backPressuredTimeMsPerSecond", 900.0)
        table.append(t, "Map -> Sink", 1, "tm-1", "numRecordsIn", 100.0 * t)
    write_metrics(tmp_path / "run", table.to_arrow())
    back = read_metrics(tmp_path / "run")
    assert back.schema.names == ["t", "vertex", "subtask", "task_manager", "metric", "value"]
    assert back.schema.field("subtask").type == pa.int32()
    assert back.schema.field("t").type == pa.float64()
    assert back.num_rows == 8
    assert back.to_pylist()[1] == {
        "t": 1.0, "vertex": "Map -> Sink", "subtask": 1, "task_manager": "tm-1", "metric": "numRecordsIn", "value": 100.0
    }

    vertices = vertex_summaries(back, [VertexLayout("Source: Seq", ["tm-0"]), VertexLayout("Map -> Sink", ["tm-0", "tm-1"])])
    write_summary(tmp_path / "run", {"vertices": vertices, "busy": math.nan})
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["busy"] is None  # NaN is not JSON
    source, map_sink = summary["vertices"]
    assert source["backpressure_level"] == "high"
    assert map_sink["subtasks"][1]["metrics"]["numRecordsIn"] == 300.0  # mean of t = 2, 3, 4 (t >= 4 / 2)
    assert map_sink["subtasks"][0]["metrics"] == {}


def test_plan_json(tmp_path):
    path = write_plan(tmp_path, {"nodes": [{"id": 1, "type": "Source: Seq"}]})
    assert json.loads(path.read_text()) == {"nodes": [{"id": 1, "type": "Source: Seq"}]}


def test_trace_jsonl(tmp_path):
    events = [
        {"t": 0.001, "event": "partition_request", "tm": "tm-1", "channel": "p0#0", "initial_credit": 2},
        {"t": 0.002, "event": "buffer_sent", "tm": "tm-0", "channel": "p0#0", "seq": 0, "backlog": 1, "bytes": 100},
        {"t": 0.003, "event": "credit_announced", "tm": "tm-1", "channel": "p0#0", "credit": 1},
    ]
    path = write_trace(tmp_path, events)
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == events
