"""Bounds on what a peer can make a TaskManager hold: pending handshakes, idle connections,
partition requests per connection, queued backlog announcements and cancels."""

from __future__ import annotations

import logging

import pytest

from shuffle import kernel
from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig
from shuffle.environment import InputChannelDescriptor
from shuffle.errors import LocalTransportError
from shuffle.harness.streams import read_until_closed
from shuffle.netty.messages import (
    BacklogAnnouncement,
    BufferResponse,
    CancelPartitionRequest,
    ErrorResponse,
    FrameDecoder,
    PartitionRequest,
    encode,
)
from shuffle.netty.partition_request_queue import PartitionRequestQueue
from shuffle.trace import NULL_TRACER
from shuffle.transport.auth import AuthenticatedTransport
from shuffle.transport.sim_link import SimNetwork

SECRET = b"s" * 32


def decode(data: bytes) -> list:
    decoder = FrameDecoder(1 << 20)
    decoder.feed(data)
    return list(decoder)


def wire(*messages) -> bytes:
    return b"".join(b"".join(encode(m)) for m in messages)


async def test_strangers_that_say_nothing_are_evicted_oldest_first_and_a_peer_still_gets_in(sim_kernel, caplog):
    caplog.set_level(logging.WARNING)
    network = SimNetwork(1e9, 1e-4, 65536)
    transport = AuthenticatedTransport(network, SECRET, handshake_timeout=10.0, max_pending_handshakes=2)
    served = []

    async def handler(stream) -> None:
        served.append(stream)
        await stream.send_all(b"welcome")

    async with kernel.open_nursery() as nursery:
        address = await nursery.start(transport.serve, "server", handler)
        silent = [await network.connect(address) for _ in range(3)]
        start = kernel.current_time()
        assert await read_until_closed(silent[0]) == b""  # evicted by the third, long before the timeout
        assert kernel.current_time() - start < 0.01
        peer = await transport.connect(address)  # evicts the second: the peer needs one round trip
        assert await peer.receive_some() == b"welcome"
        assert await read_until_closed(silent[1]) == b""
        assert await read_until_closed(silent[2]) == b""  # the handshake timeout
        assert kernel.current_time() - start == pytest.approx(10.0, abs=0.01)
        assert len(served) == 1
        nursery.cancel_scope.cancel()
    evicted = [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()]
    assert len(evicted) == 2
    with pytest.raises(ValueError, match="max_pending_handshakes"):
        AuthenticatedTransport(network, SECRET, max_pending_handshakes=0)


async def test_a_connection_without_a_request_is_closed_after_the_first_request_timeout(credit_flow, caplog):
    caplog.set_level(logging.WARNING)
    h = await credit_flow(channels=1, transport="sim_frames", config=NetworkConfig(first_request_timeout=2.0))
    idle = await h.producer.connection_manager.transport.connect(h.producer.address)
    start = kernel.current_time()
    assert await read_until_closed(idle) == b""
    assert kernel.current_time() - start == pytest.approx(2.0, abs=0.01)
    assert any("no request within 2 s" in r.getMessage() for r in caplog.records)
    await h.emit_buffers(0, 3)  # the genuine connection, idle for longer, goes on: it sent its request
    await h.settle()
    h.consume(0, 2)
    assert len(h.consumed[0]) == 2


async def test_partition_requests_beyond_the_bound_close_that_connection(credit_flow):
    config = NetworkConfig(max_partition_requests_per_connection=4, partition_request_timeout=60.0)
    h = await credit_flow(channels=1, transport="sim_frames", config=config)
    greedy = await h.producer.connection_manager.transport.connect(h.producer.address)
    await greedy.send_all(wire(*(PartitionRequest(f"guess-{i}", 0, i, 2) for i in range(10))))
    *_, fatal = decode(await read_until_closed(greedy))
    assert isinstance(fatal, ErrorResponse) and fatal.is_fatal_error
    assert "more than 4 partition requests on one connection" in fatal.message
    assert all(handler.waiting_requests <= 4 for handler in h.producer.connection_manager.server_handlers())
    await h.emit_buffers(0, 3)  # the genuine connection goes on
    await h.settle()
    h.consume(0, 2)
    assert len(h.consumed[0]) == 2


class _Unwritable:
    """A connection whose peer reads nothing: every write waits."""

    defers = False

    def seal(self, msg):
        return msg


class _BackloggedReader:
    """A reader of a channel without exclusive buffers, whose producer has a backlog."""

    receiver_id = 7
    is_registered_as_available = False
    view = object()
    backlog = 1

    def get_availability_and_backlog(self) -> tuple[bool, int]:
        return False, self.backlog

    def need_announce_backlog(self) -> bool:
        return True

    def resume_consumption(self) -> None:
        self.backlog += 1


def test_one_backlog_announcement_per_channel_waits_however_often_the_consumer_resumes():
    queue = PartitionRequestQueue(_Unwritable(), NULL_TRACER)
    reader = _BackloggedReader()
    queue.all_readers[reader.receiver_id] = reader
    for _ in range(10_000):
        queue.add_credit_or_resume_consumption(7, lambda r: r.resume_consumption())
    assert queue.queued_control_messages == 1
    assert queue._next_sealed() == BacklogAnnouncement(10_001, 7)  # the latest backlog
    queue.add_credit_or_resume_consumption(7, lambda r: r.resume_consumption())
    assert queue.queued_control_messages == 1  # a new one once the last was written


async def _client_of_a_producer_that_sends(h, messages: bytes):
    """A consumer channel on a producer that answers its request with `messages`; what the
    producer got back, and the channel."""
    network = h.producer.connection_manager.transport
    received = bytearray()

    async def producer(stream) -> None:
        received.extend(await stream.receive_some())  # the partition request
        await stream.send_all(messages)
        while chunk := await stream.receive_some():
            received.extend(chunk)

    await h._nursery.start(network.serve, "rogue", producer)
    gate = h.consumer.create_input_gate(0, "victim", [InputChannelDescriptor("p", 0, "rogue")])
    await gate.setup()
    await gate.request_partitions()
    await h.settle()
    (channel,) = gate.channels
    return received, channel, gate


def _buffer_for(receiver: int) -> BufferResponse:
    return BufferResponse(receiver, 0, 0, DataType.DATA_BUFFER, b"x" * 8)


async def test_data_for_unknown_receivers_is_cancelled_once_per_receiver(credit_flow):
    h = await credit_flow(channels=1, transport="sim_frames")
    stray = [_buffer_for(1000 + i % 3) for i in range(300)]
    received, channel, gate = await _client_of_a_producer_that_sends(h, wire(*stray))
    assert channel.error is None
    cancels = [m for m in decode(bytes(received)) if isinstance(m, CancelPartitionRequest)]
    assert sorted(c.receiver_id for c in cancels) == [1000, 1001, 1002]
    gate.close()


async def test_data_for_too_many_unknown_receivers_fails_the_connection(credit_flow):
    h = await credit_flow(channels=1, transport="sim_frames",
                          config=NetworkConfig(max_partition_requests_per_connection=4))
    _, channel, gate = await _client_of_a_producer_that_sends(h, wire(*(_buffer_for(1000 + i) for i in range(5))))
    assert isinstance(channel.error, LocalTransportError)
    assert "more than 4 unknown receivers" in str(channel.error)
    gate.close()
