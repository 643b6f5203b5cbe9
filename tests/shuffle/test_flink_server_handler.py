"""Flink's PartitionRequestServerHandlerTest, ported (with the server side of
PartitionRequestRegistrationTest).

Each test names the Flink case whose assertions it repeats (read in apache/flink's versions
of the tests; the handler checked against Flink 2.3's PartitionRequestServerHandler,
PartitionRequestQueue and CreditBasedSequenceNumberingViewReader bytecode). Flink writes
messages into an EmbeddedChannel holding the handler; here the handler's `_handle` takes
them, and its queue writes to a connection that never runs (`drain` writes what waits), so
what the server answers is what the queue holds.
"""

import pytest

from shuffle import kernel
from shuffle.api.events import CheckpointBarrier, CheckpointOptions, EndOfData, StopMode
from shuffle.buffer.data_type import DataType
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.harness.streams import read_until_closed
from shuffle.netty.messages import (
    AckAllUserRecordsProcessed,
    BufferResponse,
    CloseRequest,
    ErrorResponse,
    NewBufferSize,
    PartitionRequest,
    ResumeConsumption,
    encode,
)
from shuffle.netty.partition_request_queue import PartitionRequestQueue
from shuffle.netty.server_handler import PartitionRequestServerHandler
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.result_partition_manager import ResultPartitionManager
from shuffle.partition.result_partition_type import ResultPartitionType
from shuffle.trace import NULL_TRACER

from blocked_connection import BlockedConnection


class _NoStream:
    """The handler's byte stream: never read or written here."""


def server(config: NetworkConfig = NetworkConfig()) -> tuple[PartitionRequestServerHandler, ResultPartitionManager]:
    manager = ResultPartitionManager(config.partition_request_timeout)
    handler = PartitionRequestServerHandler(_NoStream(), manager, config, NULL_TRACER)
    handler.queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    return handler, manager


def registered_partition(manager: ResultPartitionManager) -> ResultPartition:
    """Flink's PartitionTestUtils.createPartition(PIPELINED_BOUNDED): one subpartition."""
    partition = ResultPartition("p", 1, ResultPartitionType.PIPELINED_BOUNDED, NetworkConfig())
    partition.setup(NetworkBufferPool(10, 4096))
    manager.register_result_partition(partition)
    return partition


def wire(*messages) -> bytes:
    return b"".join(b"".join(encode(m)) for m in messages)


def drain(queue: PartitionRequestQueue) -> list:
    written = []
    while (msg := queue._next_sealed()) is not None:
        written.append(msg)
    return written


def test_resume_consumption():
    """testResumeConsumption: ResumeConsumption reaches the receiver's reader, which resumes
    its subpartition (blocked after an aligned barrier went out)."""
    handler, manager = server()
    partition = registered_partition(manager)
    handler._handle(PartitionRequest("p", 0, 7, 2), None)
    partition.broadcast_event(CheckpointBarrier(1, 0, CheckpointOptions()))
    assert [msg.data_type for msg in drain(handler.queue)] == [DataType.ALIGNED_CHECKPOINT_BARRIER]
    subpartition = partition.subpartitions[0]
    assert subpartition.is_blocked
    handler._handle(ResumeConsumption(7), None)
    assert not subpartition.is_blocked


async def test_acknowledge_all_records_processed(sim_kernel):
    """testAcknowledgeAllRecordsProcessed: after the end of data, the consumer's
    AckAllUserRecordsProcessed completes the partition's all-data-processed future."""
    handler, manager = server()
    partition = registered_partition(manager)
    handler._handle(PartitionRequest("p", 0, 7, 2), None)
    partition.broadcast_event(EndOfData(StopMode.DRAIN))
    assert not partition.all_data_processed.is_set()
    handler._handle(AckAllUserRecordsProcessed(7), None)
    assert partition.all_data_processed.is_set()


def test_new_buffer_size():
    """testNewBufferSize: NewBufferSize reaches the receiver's reader (its subpartition's
    buffers are then requested at that size)."""
    handler, manager = server()
    partition = registered_partition(manager)
    handler._handle(PartitionRequest("p", 0, 7, 2), None)
    handler._handle(NewBufferSize(666, 7), None)
    assert partition.subpartitions[0].desired_buffer_size == 666


def test_receiving_new_buffer_size_before_reader_is_created():
    """testReceivingNewBufferSizeBeforeReaderIsCreated: a new buffer size for a receiver the
    server has no reader for is ignored: no error, nothing written."""
    handler, manager = server()
    partition = registered_partition(manager)
    handler._handle(NewBufferSize(666, 7), None)
    assert drain(handler.queue) == [] and not handler.queue.fatal_error
    assert partition.subpartitions[0].desired_buffer_size == NetworkConfig().starting_buffer_size


async def test_response_partition_not_found_exception(sim_kernel):
    """testResponsePartitionNotFoundException / testPartitionRequestNotifierTimeout: a request
    for a partition that is never registered is answered, once the request times out, with
    an ErrorResponse for that receiver carrying PartitionNotFound and the partition's id; the
    connection goes on."""
    handler, manager = server(NetworkConfig(partition_request_timeout=1.0))
    manager.start_listener_timeout_checks()
    async with kernel.open_nursery() as nursery:
        handler._handle(PartitionRequest("missing", 0, 7, 2), nursery)
        await kernel.sleep(0.5)
        assert drain(handler.queue) == []
        await kernel.sleep(10)
    (error,) = drain(handler.queue)
    assert error == ErrorResponse("PartitionNotFoundError", "Partition missing not found.", 7)
    assert not error.is_fatal_error and not handler.queue.fatal_error
    assert handler.waiting_requests == 0


async def test_register_result_partition_after_request(sim_kernel):
    """testRegisterResultPartitionBeforeRequest / ...AfterRequest: whether the partition is
    registered before the request or while it waits, the reader is created and serves the
    subpartition's data."""
    for before in (True, False):
        handler, manager = server(NetworkConfig(partition_request_timeout=10.0))
        async with kernel.open_nursery() as nursery:
            if before:
                partition = registered_partition(manager)
            handler._handle(PartitionRequest("p", 0, 7, 2), nursery)
            await kernel.sleep(1)
            if not before:
                assert 7 not in handler.queue.all_readers and handler.waiting_requests == 1
                partition = registered_partition(manager)
                await kernel.sleep(0)
        assert 7 in handler.queue.all_readers
        await partition.emit_record(bytes(100), 0)
        partition.flush_all()
        assert [type(msg) for msg in drain(handler.queue)] == [BufferResponse]


def test_acknowledgement_for_an_unknown_receiver_is_an_error():
    """Flink 2.3's PartitionRequestQueue.acknowledgeAllRecordsProcessed obtains the reader as
    credit does: none for the receiver is an IllegalStateException, which the handler answers
    with a fatal ErrorResponse (here `run` does, for what `_handle` raises). A new buffer
    size for it is ignored instead (testReceivingNewBufferSizeBeforeReaderIsCreated)."""
    handler, manager = server()
    registered_partition(manager)
    with pytest.raises(RuntimeError, match="No reader for receiverId = 7 exists."):
        handler._handle(AckAllUserRecordsProcessed(7), None)
    handler.queue.fatal_error = True  # after a fatal error, nothing more is looked at
    handler._handle(AckAllUserRecordsProcessed(7), None)


async def test_close_request_closes_the_connection(credit_flow):
    """Flink 2.3's PartitionRequestQueue.close (a CloseRequest): the server closes the
    connection and releases its readers; the other connections go on."""
    h = await credit_flow(channels=1, transport="sim_frames", config=NetworkConfig(partition_request_timeout=60.0))
    manager = h.producer.connection_manager
    before = len(manager.server_handlers())
    client = await manager.transport.connect(h.producer.address)
    await client.send_all(wire(PartitionRequest("guess", 0, 7, 2), CloseRequest()))
    with kernel.move_on_after(5) as scope:
        assert await read_until_closed(client) == b""  # closed, without an error
    assert not scope.cancelled_caught
    await kernel.sleep(0)
    assert len(manager.server_handlers()) == before
    await h.emit_buffers(0, 3)  # the genuine connection goes on
    await h.settle()
    h.consume(0, 2)
    assert len(h.consumed[0]) == 2
