"""The connection handshake on the run's secret (shuffle.transport.auth): peers that know it
talk, anyone else is disconnected before the handler sees a byte."""

from __future__ import annotations

import logging
import random

import pytest
from shuffle import kernel

from shuffle.harness.streams import read_until_closed
from shuffle.transport.auth import (
    HELLO,
    MAC_SIZE,
    NONCE_SIZE,
    AuthenticatedTransport,
    AuthenticationError,
    generate_secret,
    secret_from_text,
)
from shuffle.transport.sim_link import SimNetwork
from shuffle.transport.tcp import TcpTransport

SECRET = b"s" * 32


class Echo:
    """A handler that records its connections and echoes until EOF."""

    def __init__(self) -> None:
        self.connections = 0

    async def __call__(self, stream) -> None:
        self.connections += 1
        while data := await stream.receive_some():
            await stream.send_all(data)
        await stream.aclose()


async def serve(nursery, transport, address):
    handler = Echo()
    bound = await nursery.start(transport.serve, address, handler)
    return handler, bound


def sim_network() -> SimNetwork:
    return SimNetwork(1e9, 1e-4, 65536)


async def test_peers_with_the_secret_talk_and_bytes_sent_with_the_proof_are_not_lost(sim_kernel):
    transport = AuthenticatedTransport(sim_network(), SECRET)
    async with kernel.open_nursery() as nursery:
        handler, address = await serve(nursery, transport, "server")
        start = kernel.current_time()
        stream = await transport.connect(address)
        assert kernel.current_time() - start == pytest.approx(4e-4, rel=1e-3)  # connect's round trip + the handshake's
        await stream.send_all(b"first bytes")  # travel right behind the client's proof
        assert await stream.receive_some() == b"first bytes"
        assert handler.connections == 1
        nursery.cancel_scope.cancel()


async def test_wrong_secret_fails_the_handshake_on_both_sides(sim_kernel, caplog):
    network = sim_network()
    async with kernel.open_nursery() as nursery:
        handler, address = await serve(nursery, AuthenticatedTransport(network, SECRET), "server")
        with pytest.raises(AuthenticationError, match="did not prove the shared secret"):
            await AuthenticatedTransport(network, b"w" * 32).connect(address)
        await kernel.sleep(1)
        assert handler.connections == 0
        nursery.cancel_scope.cancel()
    assert any("refused a connection" in r.getMessage() for r in caplog.records)


async def test_a_client_that_cannot_prove_the_secret_is_refused(sim_kernel, caplog):
    """A stranger may follow the protocol's form; without the secret its proof is refused."""
    network = sim_network()
    async with kernel.open_nursery() as nursery:
        handler, address = await serve(nursery, AuthenticatedTransport(network, SECRET), "server")
        stream = await network.connect(address)
        await stream.send_all(HELLO + bytes(NONCE_SIZE))
        assert len(await stream.receive_some()) == NONCE_SIZE + MAC_SIZE
        await stream.send_all(bytes(MAC_SIZE) + b"request a partition")
        assert await read_until_closed(stream) == b""
        assert handler.connections == 0
        nursery.cancel_scope.cancel()
    assert any("client did not prove the shared secret" in r.getMessage() for r in caplog.records)


class Recorder:
    """Wraps a stream and records what the client sent."""

    def __init__(self, stream) -> None:
        self.stream, self.sent = stream, []

    async def send_all(self, data) -> None:
        self.sent.append(bytes(data))
        await self.stream.send_all(data)

    async def receive_some(self, max_bytes=None) -> bytes:
        return await self.stream.receive_some(max_bytes)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.stream.aclose()


async def test_a_recorded_handshake_cannot_be_replayed(sim_kernel):
    network = sim_network()

    class Recording:
        async def serve(self, address, handler, *, task_status=kernel.TASK_STATUS_IGNORED):
            await network.serve(address, handler, task_status=task_status)

        async def connect(self, address):
            self.recorder = Recorder(await network.connect(address))
            return self.recorder

    recording = Recording()
    async with kernel.open_nursery() as nursery:
        handler, address = await serve(nursery, AuthenticatedTransport(network, SECRET), "server")
        genuine = await AuthenticatedTransport(recording, SECRET).connect(address)
        hello, proof = recording.recorder.sent
        replay = await network.connect(address)
        await replay.send_all(hello)
        await replay.receive_some()  # a fresh server nonce: the old proof no longer fits
        await replay.send_all(proof)
        assert await read_until_closed(replay) == b""
        assert handler.connections == 1  # the genuine one only
        await genuine.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("garbage", [b"", b"GET / HTTP/1.1\r\n\r\n", random.Random(3).randbytes(200)])
async def test_silent_or_garbage_clients_are_disconnected(sim_kernel, garbage):
    transport = AuthenticatedTransport(sim_network(), SECRET, handshake_timeout=2.0)
    async with kernel.open_nursery() as nursery:
        handler, address = await serve(nursery, transport, "server")
        stream = await transport.transport.connect(address)
        await stream.send_all(garbage)
        start = kernel.current_time()
        assert await read_until_closed(stream) == b""
        assert kernel.current_time() - start <= 2.0 + 1e-3  # at the latest when the handshake times out
        assert handler.connections == 0
        nursery.cancel_scope.cancel()


def test_secrets():
    assert len(generate_secret()) == 32 and generate_secret() != generate_secret()
    assert secret_from_text("0123456789abcdef") == b"0123456789abcdef"
    with pytest.raises(ValueError, match="at least 16 characters") as error:
        secret_from_text("hunter2")
    assert "hunter2" not in str(error.value)


@pytest.mark.tcp
async def test_over_tcp_a_stray_socket_gets_nothing_but_a_disconnect(caplog):
    caplog.set_level(logging.WARNING)
    transport = AuthenticatedTransport(TcpTransport(), SECRET)
    with kernel.fail_after(10):
        async with kernel.open_nursery() as nursery:
            handler, address = await serve(nursery, transport, "127.0.0.1:0")
            stream = await transport.connect(address)
            await stream.send_all(b"ping")
            assert await stream.receive_some() == b"ping"
            stray = await TcpTransport().connect(address)
            await stray.send_all(random.Random(5).randbytes(200))
            assert await read_until_closed(stray) == b""
            assert handler.connections == 1
            nursery.cancel_scope.cancel()
    (refusal,) = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert "from 127.0.0.1:" in refusal and "not a shufflesim handshake" in refusal
