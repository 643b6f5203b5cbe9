"""Bounds on the JobManager <-> TaskManager connections: a peer that authenticates and then
idles is disconnected; a JobManager's requests cannot grow a TaskManager's outbox."""

from __future__ import annotations

import pytest

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.transport.sim_link import SimNetwork
from taskmgr.cluster import ClusterConfig, MiniCluster
from taskmgr.rpc import FIRST_MESSAGE_TIMEOUT, RegisterTaskManager, RpcConnection, encode_message
from taskmgr.taskmanager import TaskManager


async def test_a_connection_that_does_not_register_is_closed(sim_kernel):
    async with kernel.open_nursery() as nursery:
        mini = MiniCluster(ClusterConfig(task_managers=1))
        await mini.start(nursery)
        idle = await mini.transport.connect(mini.jobmanager.address)  # it has the secret
        start = kernel.current_time()
        assert await idle.receive_some() == b""
        assert kernel.current_time() - start == pytest.approx(FIRST_MESSAGE_TIMEOUT, abs=0.01)
        assert sorted(mini.jobmanager.task_managers) == ["tm-0"]
        await mini.shutdown()
        nursery.cancel_scope.cancel()


async def test_heartbeat_requests_of_a_jobmanager_that_does_not_read_queue_one_answer(sim_kernel):
    network = SimNetwork(1e9, 1e-4, 65536)
    requests = 20_000
    sent = kernel.Event()

    async def flooding_jobmanager(stream) -> None:
        connection = RpcConnection(stream)
        assert isinstance(await connection.receive(), RegisterTaskManager)
        frame = encode_message("heartbeat_request")
        for _ in range(requests):  # and never reads the answers
            await stream.send_all(frame)
        sent.set()
        await kernel.sleep_forever()

    async with kernel.open_nursery() as nursery:
        address = await nursery.start(network.serve, "jobmanager", flooding_jobmanager)
        tm = TaskManager("tm-0", address, network, NetworkConfig())
        nursery.start_soon(tm.run)
        await sent.wait()
        await kernel.sleep(1.0)
        # The answers fill the socket buffer; one more waits behind it, not one per request.
        assert len(tm._outbox) <= 1
        nursery.cancel_scope.cancel()
