"""The Flink reference run: metric names and means (fast), and one real run on Flink 2.3
(`-m slow`: it needs a JDK, and downloads Flink from PyPI on first use, ~330 MB).

The real run is slow-map (a source feeding two maps of 5 ms a record, one on each of two
TaskManagers): what Flink reports there is what the scenario file's comment, and our run,
say: the source back-pressured with 10-11 buffers queued, the remote map's input buffers all in
use with 9 queued, the local map using no input buffers.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
from pathlib import Path

import pytest
import trio

from scenarios.cli import main
from scenarios.flink_reference.compare import format_table
from scenarios.flink_reference.runner import (FlinkReferenceError, RestClient, running_job, short_name,
                                              subtask_means)

LIBRARY = Path(__file__).resolve().parents[3] / "scenarios" / "library"


def test_flink_metric_names_become_ours():
    sink = "Sink: Writer"
    assert short_name("Shuffle.Netty.Output.Buffers.outPoolUsage", sink) == "outPoolUsage"
    assert short_name("Shuffle.Netty.Input.Buffers.inputExclusiveBuffersUsage", sink) == (
        "inputExclusiveBuffersUsage")
    assert short_name("Shuffle.Netty.Input.0.debloatedBufferSize", sink) == "debloatedBufferSize"
    assert short_name("busyTimeMsPerSecond", sink) == "busyTimeMsPerSecond"
    assert short_name("checkpointStartDelayNanos", sink) == "checkpointStartDelayNanos"
    assert short_name("Sink__Writer.latencyUs_p99", sink) == "latencyP99Ms"  # as Flink's REST names it
    assert short_name("SlowMap.latencyUs_p99", sink) is None
    assert short_name("numRecordsIn", sink) is None  # counters: we compare their rates


def test_means_per_subtask_and_the_table_beside_ours():
    readings = [[60.0, "Map", 0, "outPoolUsage", 1.0], [61.0, "Map", 0, "outPoolUsage", 0.5],
                [60.0, "Map", 1, "outPoolUsage", 0.0], [60.0, "Map", 1, "latencyP50Ms", 12.5]]
    means = subtask_means(readings)
    assert means == {"Map": {0: {"outPoolUsage": 0.75}, 1: {"outPoolUsage": 0.0, "latencyP50Ms": 12.5}}}
    ours = {"vertices": [{"name": "Map", "subtasks": [{"index": 0, "metrics": {"outPoolUsage": 0.7}},
                                                      {"index": 1, "metrics": {"latencyP50Ms": 11.0}}]}]}
    lines = format_table(json.loads(json.dumps(means)), ours).splitlines()  # as read back from flink.json
    assert lines[0].split() == ["subtask", "metric", "flink", "shufflesim"]
    assert lines[1].split() == ["Map", "(0)", "outPoolUsage", "0.75", "0.7"]
    assert lines[2].split() == ["Map", "(1)", "outPoolUsage", "0", "-"]
    assert lines[3].split() == ["Map", "(1)", "latencyP50Ms", "12.5", "11"]


def test_a_scenario_flink_cannot_run_is_a_usage_error(tmp_path, capsys):
    assert main(["flink-reference", str(LIBRARY / "head-of-line.toml"), "--out", str(tmp_path)]) == 2
    assert "network.flow_control" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "message"), [
    (["--warmup", "-1"], "--warmup must be >= 0"),
    (["--seconds", "0"], "--seconds positive"),
    (["--jvm-warm-up", "-1"], "--jvm-warm-up must be >= 0"),
    (["--compare", "no-such-run"], "no-such-run: no such folder"),
])
def test_bad_options_are_usage_errors_before_flink_starts(tmp_path, capsys, extra, message):
    args = ["flink-reference", str(LIBRARY / "slow-map.toml"), "--out", str(tmp_path / "out"), *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written, nothing started


def test_a_compare_run_with_a_broken_summary_is_named_before_flink_starts(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text("{not json")
    args = ["flink-reference", str(LIBRARY / "slow-map.toml"), "--out", str(tmp_path / "out"),
            "--compare", str(tmp_path / "run")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"shufflesim: error: {tmp_path / 'run' / 'summary.json'}: invalid JSON") and \
        "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_slow_map_on_flink_reports_what_the_scenario_says(tmp_path):
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: the Flink reference needs a JDK 17+ (Debian: openjdk-17-jdk-headless)")
    out = tmp_path / "flink"
    assert main(["flink-reference", str(LIBRARY / "slow-map.toml"), "--out", str(out), "--warmup", "20",
                 "--seconds", "8", "--quiet", "--jvm-warm-up", "200"]) == 0
    result = json.loads((out / "flink.json").read_text())
    # the bounded warm-up job ran to its end before the job read; the log is at INFO by default
    log = (out / "flink.log").read_text()
    assert re.search(r"Job slow-map \(JVM warm-up\) \(\w+\) switched from state RUNNING to FINISHED\.", log)
    assert re.search(r"Task: SlowMap -> Sink: Writer \(2/2\)#0 \(\w+\) switched from INITIALIZING to RUNNING\.", log)
    # the source shares its slot with map 0; map 1 is on the other TaskManager
    assert result["placement"] == {"Source: Seq": ["tm-0"], "SlowMap -> Sink: Writer": ["tm-0", "tm-1"]}
    means = result["subtasks"]
    source, local_map, remote_map = means["Source: Seq"]["0"], *means["SlowMap -> Sink: Writer"].values()
    assert source["backPressuredTimeMsPerSecond"] > 900
    # 10 or 11 queued (runs differ in where the last record of a buffer falls), out of 10 + 1
    assert 9.9 <= source["outputQueueLength"] <= 11.1
    assert source["outPoolUsage"] > 0.9
    assert remote_map["inputQueueLength"] == pytest.approx(9, abs=0.5) and remote_map["inPoolUsage"] > 0.95
    assert local_map["inPoolUsage"] == 0  # a local channel uses no input buffers
    assert local_map["busyTimeMsPerSecond"] > 950 and remote_map["busyTimeMsPerSecond"] > 950
    # the stage's latency histogram: records wait behind full buffers (seconds, growing with the run)
    assert 1_000 < remote_map["latencyP50Ms"] < remote_map["latencyMaxMs"]


@pytest.mark.tcp
async def test_the_rest_client_reads_json_and_names_a_bad_answer():
    async def answer(stream: trio.SocketStream) -> None:
        request = await stream.receive_some(1024)
        if b"GET /jobs " in request:
            await stream.send_all(b'HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{"jobs": []}')
        else:
            await stream.send_all(b"HTTP/1.0 404 Not Found\r\n\r\n{}")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(functools.partial(trio.serve_tcp, answer, 0, host="127.0.0.1"))
        rest = RestClient(listener.socket.getsockname()[1])
        assert await rest.get("/jobs") == {"jobs": []}
        with pytest.raises(FlinkReferenceError, match="404 Not Found.*GET /nowhere"):
            await rest.get("/nowhere")
        nursery.cancel_scope.cancel()


@pytest.mark.tcp
async def test_the_job_read_is_the_one_named_not_its_jvm_warm_up_job():
    # /jobs/overview as Flink answers it while the warm-up job runs, and once it has ended
    overviews = [[("w", "slow-map (JVM warm-up)", "RUNNING"), ("j", "slow-map", "CREATED")],
                 [("w", "slow-map (JVM warm-up)", "FINISHED"), ("j", "slow-map", "RUNNING")]]
    asked = []

    async def answer(stream: trio.SocketStream) -> None:
        asked.append((await stream.receive_some(1024)).split(b" ")[1])
        jobs = [{"jid": jid, "name": name, "state": state} for jid, name, state in overviews[min(len(asked), 2) - 1]]
        await stream.send_all(b"HTTP/1.0 200 OK\r\n\r\n" + json.dumps({"jobs": jobs}).encode())
        await stream.aclose()

    class Running:
        returncode = None

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(functools.partial(trio.serve_tcp, answer, 0, host="127.0.0.1"))
        rest = RestClient(listener.socket.getsockname()[1])
        assert await running_job(rest, "slow-map", Running(), Path("flink.log")) == "j"
        assert asked == [b"/jobs/overview", b"/jobs/overview"]
        nursery.cancel_scope.cancel()
