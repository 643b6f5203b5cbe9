"""Hostile bytes on a JobManager/TaskManager connection: the RPC decoder raises RpcError and
nothing else, refuses oversized frames from their length field, and a peer that breaks the
protocol is disconnected and logged: the JobManager and the TaskManager go on.
Random and mutated inputs in random chunks: tests/scenarios/test_fuzz.py."""

from __future__ import annotations

import logging
import random
import struct

import msgpack
import pytest
from shuffle import kernel
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffle.config import NetworkConfig
from shuffle.transport.sim_link import SimNetwork
from taskmgr.jobmanager import JobManager
from graph import DiscardingSink, StreamExecutionEnvironment
from taskmgr.deployment import JobInformation, create_descriptor, execution_id, new_attempt_ids
from taskmgr.metrics.table import MetricTable
from taskmgr.payloads import dump_object, dump_table, load_object, load_table
from taskmgr.rpc import (MESSAGES, RPC_MAGIC, DeployJob, DeployTask, RegisterTaskManager, RpcConnection, RpcDecoder,
                         RpcError, RpcMessage, Shutdown, TaskExecutionState, encode)
from taskmgr.taskmanager import TaskManager

LIMIT = 4096
VALUES = {str: st.text(max_size=30), int: st.integers(-(2**63), 2**64 - 1), bytes: st.binary(max_size=30),
          float: st.floats(allow_nan=False),
          dict: st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5), max_size=4)}


@st.composite
def messages(draw) -> RpcMessage:
    cls = MESSAGES[draw(st.sampled_from(sorted(MESSAGES)))]
    return cls(**{name: draw(VALUES[t]) for name, (t, required) in cls.FIELDS.items()
                  if required or draw(st.booleans())})


def raw_frame(body: bytes, magic: int = RPC_MAGIC, length: int | None = None) -> bytes:
    return struct.pack(">II", len(body) if length is None else length, magic) + body


def decode(data: bytes, cuts: list[int] = (), limit: int = LIMIT) -> list[dict]:
    decoder = RpcDecoder(limit)
    out = []
    for start, end in zip([0, *cuts], [*cuts, len(data)]):
        decoder.feed(data[start:end])
        out.extend(decoder)
    return out


@settings(max_examples=200)
@given(st.lists(messages(), max_size=6), st.lists(st.integers(0, 2000), max_size=8))
def test_valid_frames_round_trip_in_any_chunking(msgs, cuts):
    data = b"".join(encode(m) for m in msgs)
    assert decode(data, sorted(c for c in cuts if c <= len(data)), limit=1 << 20) == msgs


def test_oversized_frame_is_refused_from_its_length_field():
    decoder = RpcDecoder(LIMIT)
    decoder.feed(struct.pack(">II", LIMIT + 1, RPC_MAGIC))
    with pytest.raises(RpcError, match=f"message length {LIMIT + 1}"):
        next(decoder)
    decoder.feed(b"x" * 100_000)
    assert decoder.buffered_bytes == 0
    with pytest.raises(RpcError):
        next(decoder)


GARBAGE = {
    "wrong magic": raw_frame(msgpack.packb({"type": "shutdown"}), magic=0xBADC0FFE),
    "zero length": raw_frame(b""),
    "array of 2**32": raw_frame(b"\xdd\xff\xff\xff\xff"),
    "map of 2**32": raw_frame(b"\xdf\xff\xff\xff\xff"),
    "str of 2**32": raw_frame(b"\x81\xa4type\xdb\xff\xff\xff\xff"),
    "deep nesting": raw_frame(b"\x81\xa4type" + b"\x91" * 5000 + b"\xc0"),
    "ext type": raw_frame(b"\x81\xa4type\xd6\xff\x00\x00\x00\x01"),
    "not a map": raw_frame(msgpack.packb(["shutdown"])),
    "no type": raw_frame(msgpack.packb({"job_id": "j"})),
    "unknown type": raw_frame(msgpack.packb({"type": "become_jobmanager"})),
    "missing field": raw_frame(msgpack.packb({"type": "stop_sources"})),
    "extra field": raw_frame(msgpack.packb({"type": "shutdown", "now": True})),
    "wrong field type": raw_frame(msgpack.packb({"type": "register_task_manager", "task_manager": "tm",
                                                 "shuffle_address": "a", "num_slots": True})),
    "trailing bytes": raw_frame(msgpack.packb({"type": "shutdown"}) + b"\x00"),
    "int map key": raw_frame(b"\x81\x01\x02"),
}


@pytest.mark.parametrize("data", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_raises_rpc_error(data):
    with pytest.raises(RpcError):
        decode(data)


# -- the JobManager and the TaskManager disconnect a peer that breaks the protocol -------


class _Closed:
    """A stream that delivers `data`, then EOF."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def receive_some(self, max_bytes=None) -> bytes:
        await kernel.checkpoint()
        data, self.data = self.data, b""
        return data

    async def send_all(self, data) -> None:
        await kernel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await kernel.checkpoint()

    async def aclose(self) -> None:
        await kernel.checkpoint()


async def test_connection_closed_in_the_middle_of_a_message():
    connection = RpcConnection(_Closed(encode(Shutdown())[:-1]))
    with pytest.raises(RpcError, match="closed in the middle of a message"):
        await connection.receive()


async def test_jobmanager_disconnects_a_garbage_peer_and_goes_on(sim_kernel, caplog):
    network = SimNetwork(1e9, 1e-4, 65536)
    jobmanager = JobManager(network)
    async with kernel.open_nursery() as nursery:
        address = await nursery.start(jobmanager.run)
        stray = await network.connect(address)
        await stray.send_all(random.Random(1).randbytes(200))
        await stray.aclose()
        rogue = RpcConnection(await network.connect(address))
        await rogue.send(RegisterTaskManager("tm-rogue", "x", 1))
        await kernel.sleep(0.01)
        assert "tm-rogue" in jobmanager.task_managers
        await rogue.stream.send_all(raw_frame(msgpack.packb({"type": "task_state", "job_id": 1})))
        assert await rogue.receive() is None  # disconnected
        assert "tm-rogue" not in jobmanager.task_managers
        honest = RpcConnection(await network.connect(address))
        await honest.send(RegisterTaskManager("tm-0", "tm-0", 1))
        await kernel.sleep(0.01)
        assert list(jobmanager.task_managers) == ["tm-0"]
        nursery.cancel_scope.cancel()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("broke the protocol" in w for w in warnings)


async def test_taskmanager_disconnects_from_a_jobmanager_that_breaks_the_protocol(sim_kernel, caplog):
    network = SimNetwork(1e9, 1e-4, 65536)

    async def bad_jobmanager(stream):
        connection = RpcConnection(stream)
        assert isinstance(await connection.receive(), RegisterTaskManager)
        await stream.send_all(raw_frame(msgpack.packb({"type": "deploy_task", "descriptor": "not a map"})))
        await kernel.sleep_forever()

    async with kernel.open_nursery() as nursery:
        await nursery.start(network.serve, "jobmanager", bad_jobmanager)
        task_manager = TaskManager("tm-0", "jobmanager", network, NetworkConfig())
        with kernel.fail_after(5):
            await task_manager.run()  # returns: no crash, no hang
        nursery.cancel_scope.cancel()
    assert any("tm-0: disconnecting from the JobManager" in r.getMessage() for r in caplog.records)


# -- serialized payloads: opened by the receiver, a broken one is the peer's protocol error ---


def test_payloads_round_trip_and_garbage_is_an_rpc_error():
    table = MetricTable()
    table.append(1.0, "Sink", 0, "tm-0", "numRecordsIn", 5.0)
    assert load_table(dump_table(table.to_arrow())).equals(table.to_arrow())
    assert load_object(dump_object(lambda x: x + 1), "code")(1) == 2  # code travels by value
    with pytest.raises(RpcError, match="cannot load the job graph payload"):
        load_object(b"\x80\x05garbage", "job graph")
    with pytest.raises(RpcError, match="metrics table"):
        load_table(b"not arrow")


def _source_descriptor() -> dict:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator().sink_to(DiscardingSink())
    graph = env.get_execution_graph()
    [vertex] = graph.all_execution_vertices
    info = JobInformation("job-0", 7, 0.0, 1.0, 1.0)
    return create_descriptor(vertex, info, {execution_id(vertex): "tm-0"}, new_attempt_ids(graph)).to_message()


async def test_a_job_graph_that_does_not_load_fails_its_tasks_with_the_cause(sim_kernel):
    network = SimNetwork(1e9, 1e-4, 65536)
    states = []

    async def jobmanager(stream):
        connection = RpcConnection(stream)
        assert isinstance(await connection.receive(), RegisterTaskManager)
        await connection.send(DeployJob("job-0", b"\x80\x05garbage"))
        await connection.send(DeployTask(_source_descriptor()))
        states.append(await connection.receive())
        await connection.send(Shutdown())

    async with kernel.open_nursery() as nursery:
        await nursery.start(network.serve, "jobmanager", jobmanager)
        with kernel.fail_after(5):
            await TaskManager("tm-0", "jobmanager", network, NetworkConfig()).run()
        nursery.cancel_scope.cancel()
    [state] = states
    assert isinstance(state, TaskExecutionState) and state.state == "FAILED"
    assert state.error.startswith("cannot load the job graph payload")


def test_an_all_to_all_graph_of_many_subtasks_travels():
    """Pickling recurses through partitions and gates: 200 x 200 subtasks go beyond Python's
    default recursion limit, and the recursion limit is back to what it was afterwards."""
    import sys

    from graph import build_execution_graph

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(200)
    env.from_generator(record_size=32).key_by(lambda record: record.key).map().sink_to(DiscardingSink())
    limit = sys.getrecursionlimit()
    graph = load_object(dump_object(build_execution_graph(env.get_job_graph())), "job graph")
    assert sys.getrecursionlimit() == limit
    assert len(graph.all_execution_vertices) == 400


def test_a_report_larger_than_a_frame_travels_in_parts():
    """A long run's metrics outgrow the 10 MiB frame: the report goes as parts that each
    fit a frame, and the JobManager joins them back byte for byte."""
    from taskmgr.rpc import MAX_FRAME_SIZE, JobReport, JobReportPart, ReportAssembler, job_report_messages

    rng = random.Random(3)
    report = rng.randbytes(3 * 1024 * 1024)
    metrics = rng.randbytes(21 * 1024 * 1024)
    messages = job_report_messages("job-0", report, metrics)
    assert [type(m) for m in messages] == [JobReportPart] * (len(messages) - 1) + [JobReport]
    assert len(messages) == 5
    assert all(len(encode(m)) <= MAX_FRAME_SIZE for m in messages)
    assert [m.TYPE for m in decode(b"".join(encode(m) for m in messages), limit=MAX_FRAME_SIZE)] \
        == [m.TYPE for m in messages]
    assembler = ReportAssembler()
    for part in messages[:-1]:
        assembler.add(part)
    assert assembler.complete(messages[-1]) == (report, metrics)
    assert job_report_messages("job-0", b"r", b"m") == [JobReport("job-0", b"r", b"m")]  # small: one frame
    kept = ReportAssembler(max_size=1000)
    kept.add(JobReportPart("job-1", bytes(600), b""))
    kept.discard("job-1")  # the job ended before its report: its parts no longer count
    kept.add(JobReportPart("job-2", bytes(600), b""))
    with pytest.raises(RpcError, match="more than 1000 bytes"):
        small = ReportAssembler(max_size=1000)
        for part in job_report_messages("job-0", bytes(5000), b"", part_size=600)[:-1]:
            small.add(part)


def test_a_run_gets_its_whole_report_when_it_comes_in_parts(monkeypatch):
    """The same run, its TaskManagers' reports cut into 4 KiB parts: the same results."""
    from taskmgr import rpc
    from taskmgr.cluster import execute

    def run():
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_generator(rate=500).name("Gen").rebalance().map(cost="1ms").name("Work").sink_to(DiscardingSink())
        return execute(env, duration=5, task_managers=2, seed=3).raise_for_status()

    whole = run()
    monkeypatch.setattr(rpc, "REPORT_PART_SIZE", 4096)
    parted = run()
    assert len(dump_table(whole.metrics)) > 4 * 4096  # a few parts per TaskManager
    assert parted.metrics.equals(whole.metrics)
    assert (parted.records_emitted, parted.records_received) == (whole.records_emitted, whole.records_received)
