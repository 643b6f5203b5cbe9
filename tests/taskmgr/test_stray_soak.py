"""Soak: a realtime job runs while strangers keep connecting to the JobManager's and the
TaskManagers' ports with garbage, half handshakes, wrong proofs, unauthenticated RPC and
Netty frames, and silence. The job ends as an undisturbed run of it does."""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest
import trio

from graph import StreamExecutionEnvironment
from shuffle.config import NetworkConfig
from shuffle.harness.streams import read_until_closed
from shuffle.netty.messages import PartitionRequest, encode
from shuffle.transport.auth import DEFAULT_HANDSHAKE_TIMEOUT, HELLO, MAC_SIZE, NONCE_SIZE
from shuffle.transport.tcp import TcpTransport
from taskmgr.cluster import ClusterConfig, MiniCluster, execute
from taskmgr.jobmanager import JobConfig, JobResult, JobStatus
from taskmgr.operators import VerifyingSink
from taskmgr.rpc import encode_message

pytestmark = pytest.mark.tcp

RATE = 1000  # records/s per source subtask


def program(seconds: float) -> StreamExecutionEnvironment:
    """Two paced sources for `seconds`, a rebalance and a keyBy over two TaskManagers, a verifying sink."""
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(rate=RATE, count=int(RATE * seconds)).set_parallelism(2)
        .rebalance().map(cost="10us").set_parallelism(2)
        .key_by(lambda r: r.key).map(cost="10us").set_parallelism(2)
        .sink_to(VerifyingSink("check")).set_parallelism(2))
    return env


async def _garbage(stream: trio.SocketStream, rng: random.Random) -> None:
    await stream.send_all(rng.randbytes(rng.randint(1, 400)))


async def _half_handshake(stream: trio.SocketStream, rng: random.Random) -> None:
    await stream.send_all((HELLO + rng.randbytes(NONCE_SIZE))[:rng.randint(1, len(HELLO) + NONCE_SIZE - 1)])
    await trio.sleep(rng.uniform(0, 0.2))


async def _wrong_proof(stream: trio.SocketStream, rng: random.Random) -> None:
    await stream.send_all(HELLO + rng.randbytes(NONCE_SIZE))
    challenge = bytearray()
    while len(challenge) < NONCE_SIZE + MAC_SIZE:
        chunk = await stream.receive_some()
        if not chunk:
            return
        challenge += chunk
    await stream.send_all(rng.randbytes(MAC_SIZE) + rng.randbytes(rng.randint(0, 100)))
    await read_until_closed(stream)


async def _unauthenticated_rpc(stream: trio.SocketStream, rng: random.Random) -> None:
    await stream.send_all(encode_message("register_task_manager", task_manager="tm-0",
                                         shuffle_address="127.0.0.1:1", num_slots=64))


async def _unauthenticated_request(stream: trio.SocketStream, rng: random.Random) -> None:
    await stream.send_all(b"".join(encode(PartitionRequest(f"ds0#{rng.randint(0, 9)}", 0, "thief", 1000))))


async def _hang_up(stream: trio.SocketStream, rng: random.Random) -> None:
    pass


async def _silence(stream: trio.SocketStream, rng: random.Random) -> str:
    """Until the server closes it: at its handshake timeout, or when the cluster shuts down."""
    start = trio.current_time()
    await read_until_closed(stream)
    return "silence timed out" if trio.current_time() - start >= DEFAULT_HANDSHAKE_TIMEOUT - 0.5 else "silence"


ATTACKS = {f.__name__.lstrip("_"): f for f in (_garbage, _half_handshake, _wrong_proof, _unauthenticated_rpc,
                                               _unauthenticated_request, _hang_up)}
#: Silent connections held open at once (each until the server's 10 s handshake timeout).
SILENT = 16


async def strangers(addresses: list[str], stop: trio.Event, tried: Counter, seed: int) -> None:
    """Connect to `addresses` in turn until `stop`, each time with an attack."""
    rng = random.Random(seed)

    async def one(address: str, name: str, attack) -> None:
        try:
            stream = await TcpTransport().connect(address)
        except OSError:
            tried["connect failed"] += 1
            return
        outcome = None
        try:
            outcome = await attack(stream, rng)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the server closed it first
        finally:
            await stream.aclose()
        tried[outcome or name] += 1

    async with trio.open_nursery() as nursery:
        silent = trio.CapacityLimiter(SILENT)

        async def hold_silent(address: str) -> None:
            async with silent:
                await one(address, "silence", _silence)

        while not stop.is_set():
            address = rng.choice(addresses)
            if silent.available_tokens and rng.random() < 0.05:
                nursery.start_soon(hold_silent, address)
            else:
                name, attack = rng.choice(sorted(ATTACKS.items()))
                nursery.start_soon(one, address, name, attack)
            await trio.sleep(0.005)
        nursery.cancel_scope.cancel()


async def run_disturbed(seconds: float) -> tuple[JobResult, Counter, list[str]]:
    tried: Counter = Counter()
    with trio.fail_after(seconds * 4 + 60):
        async with trio.open_nursery() as nursery:
            mini = MiniCluster(ClusterConfig("realtime", 2, 2, NetworkConfig()))
            await mini.start(nursery)
            addresses = [mini.jobmanager.address] + [tm.env.address for tm in mini.task_managers.values()]
            stop = trio.Event()
            nursery.start_soon(strangers, addresses, stop, tried, 11)
            result = await mini.execute(program(seconds).get_execution_graph(),
                                        JobConfig(seconds * 4 + 30, task_managers=2))
            registered = sorted(mini.jobmanager.task_managers)
            stop.set()
            await mini.shutdown()
            nursery.cancel_scope.cancel()
    return result, tried, registered


def soak(seconds: float, caplog: pytest.LogCaptureFixture) -> Counter:
    caplog.set_level(logging.ERROR)  # every refused stranger is a warning
    result, tried, registered = trio.run(run_disturbed, seconds)
    undisturbed = execute(program(seconds), duration=seconds * 4 + 30, task_managers=2, slots_per_task_manager=2)
    assert undisturbed.status is JobStatus.FINISHED
    assert result.status is undisturbed.status, result.error
    assert result.verifications == undisturbed.verifications
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == 2 * RATE * seconds
    assert result.records_emitted == undisturbed.records_emitted == 2 * RATE * seconds
    assert result.records_received == undisturbed.records_received
    assert result.invariant_violations() == []
    assert registered == ["tm-0", "tm-1"]
    assert set(tried) >= set(ATTACKS), tried
    return tried


def test_strangers_during_a_short_realtime_run_change_nothing(caplog):
    tried = soak(3.0, caplog)
    assert sum(tried.values()) > 100


@pytest.mark.slow
def test_a_realtime_soak_with_strangers_ends_as_an_undisturbed_run(caplog):
    tried = soak(120.0, caplog)
    print(f"stray connections over 120 s: {sum(tried.values())} {dict(tried)}")
    assert tried["silence timed out"] >= SILENT  # the servers closed them at their handshake timeout
