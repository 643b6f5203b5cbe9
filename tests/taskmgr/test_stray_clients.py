"""Strangers on the ports of a realtime run (loopback TCP): they cannot register, cannot
request a partition, get nothing but a disconnect, and the job finishes as without them."""

from __future__ import annotations

import random

import pytest
import trio

from graph import CollectSink, StreamExecutionEnvironment
from shuffle.config import NetworkConfig
from shuffle.netty.messages import ErrorResponse, FrameDecoder, PartitionRequest, encode
from shuffle.partition.result_partition_id import readable_partition_id
from shuffle.transport.auth import AuthenticatedTransport, AuthenticationError
from shuffle.transport.tcp import TcpTransport
from taskmgr.cluster import ClusterConfig, MiniCluster, execute
from taskmgr.jobmanager import JobConfig, JobStatus
from taskmgr.rpc import RegisterTaskManager
from taskmgr.rpc import encode as encode_rpc
from taskmgr.taskmanager import TaskManager

pytestmark = pytest.mark.tcp

NETWORK = NetworkConfig(partition_request_timeout=0.2)


def program() -> StreamExecutionEnvironment:
    """A bounded job (about a second in real time) with a remote channel between two TaskManagers."""
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(rate=1000, count=1000).set_parallelism(2)
        .rebalance().map(lambda r: r.seq).set_parallelism(2).sink_to(CollectSink("out")))
    return env


async def stray(address: str, payload: bytes) -> bytes:
    """Connect without the secret, send `payload`: what comes back before the disconnect."""
    stream = await TcpTransport().connect(address)
    try:
        await stream.send_all(payload)
        return await stream.receive_some()  # b"": the server closed without a byte
    except trio.BrokenResourceError:
        return b""  # reset: the server closed with our bytes unread
    finally:
        await stream.aclose()


async def run_with_strangers(mini: MiniCluster) -> dict:
    """While the job runs, strangers try the JobManager's and the TaskManagers' ports."""
    seen: dict = {}
    jobmanager = mini.jobmanager
    tm0, tm1 = mini.task_managers.values()
    while not tm0.env.partition_manager.partitions:  # wait until the job is deployed and running
        await trio.sleep(0.01)
    hit_and_run = await TcpTransport().connect(jobmanager.address)  # the bug of issue 11
    await hit_and_run.send_all(random.Random(6).randbytes(200))
    await hit_and_run.aclose()
    seen["jm garbage"] = await stray(jobmanager.address, random.Random(7).randbytes(200))
    seen["jm register"] = await stray(jobmanager.address, encode_rpc(
        RegisterTaskManager("tm-0", "127.0.0.1:1", 64)))
    partition = tm0.env.partition_manager.partitions[0]
    request = b"".join(encode(PartitionRequest(partition.partition_id, 0, 1, 1000)))
    seen["tm request"] = await stray(tm0.env.address, request)
    seen["tm garbage"] = await stray(tm1.env.address, random.Random(8).randbytes(200))
    seen["registered"] = sorted(jobmanager.task_managers)
    seen["jm shuffle address of tm-0"] = jobmanager.task_managers["tm-0"].shuffle_address
    impostor = TaskManager("tm-9", jobmanager.address, AuthenticatedTransport(TcpTransport(), b"w" * 32), NETWORK,
                           shuffle_address="127.0.0.1:0")
    try:
        await impostor.run()
    except* AuthenticationError:
        seen["impostor refused"] = True
    seen["registered after impostor"] = sorted(jobmanager.task_managers)

    # A peer with the secret but not the attempt id cannot read a partition either.
    stream = await mini.transport.connect(tm0.env.address)
    guessed = readable_partition_id(partition.partition_id)
    await stream.send_all(b"".join(encode(PartitionRequest(guessed, 0, 2, 2))))
    decoder = FrameDecoder()
    decoder.feed(await stream.receive_some())
    seen["guessed id"] = list(decoder)
    seen["partition still served"] = partition in tm0.env.partition_manager.partitions
    await stream.aclose()
    return seen


async def run_job() -> tuple:
    graph = program().get_execution_graph()
    with trio.fail_after(60):
        return await _run_job(graph)


async def _run_job(graph) -> tuple:
    async with trio.open_nursery() as nursery:
        mini = MiniCluster(ClusterConfig("realtime", 2, 2, NETWORK))
        await mini.start(nursery)
        seen = {}

        async def strangers():
            seen.update(await run_with_strangers(mini))

        nursery.start_soon(strangers)
        result = await mini.execute(graph, JobConfig(30.0, task_managers=2))
        await mini.shutdown()
        nursery.cancel_scope.cancel()
    return result, seen, mini


def test_strangers_cannot_join_read_or_stop_a_realtime_job():
    result, seen, mini = trio.run(run_job)
    assert result.status is JobStatus.FINISHED, result.error
    assert result.invariant_violations() == []
    baseline = execute(program(), duration=30.0, task_managers=2, slots_per_task_manager=2)  # sim, no strangers
    assert sorted(result.collected["out"]) == sorted(baseline.collected["out"])
    assert len(result.collected["out"]) == 2000
    for stranger in ("jm garbage", "jm register", "tm request", "tm garbage"):
        assert seen[stranger] == b"", stranger  # not one byte back, then the disconnect
    assert seen["impostor refused"]
    assert seen["registered"] == seen["registered after impostor"] == ["tm-0", "tm-1"]
    assert seen["jm shuffle address of tm-0"] == mini.task_managers["tm-0"].env.address
    (answer,) = seen["guessed id"]
    assert isinstance(answer, ErrorResponse) and answer.error_class == "PartitionNotFoundError"
    assert answer.receiver_id == 2 and seen["partition still served"]
