"""The consumer side of a connection: stalls, releases, corrupted streams, and the cases of
Flink's CreditBasedPartitionRequestClientHandlerTest (spec 3.5)."""

import pytest

from shuffle import kernel
from shuffle.config import NetworkConfig


async def _drive(h, channels, rounds: int) -> None:
    with kernel.fail_after(10):
        for _ in range(rounds):
            for channel in channels:
                if h.producer_available(channel):
                    await h.emit_buffers(channel, 1)
            await h.settle(0.001)
        await h.settle()


async def test_tcp_mode_releasing_a_channel_that_stalls_the_connection_unblocks_it(credit_flow):
    # Pre-credit mode: channel 0's receiver is out of buffers, so the connection's reader
    # waits for one of its buffers. Releasing that channel (its task ends) must end the
    # wait, or every other channel on the connection hangs forever.
    cfg = NetworkConfig(buffer_size=4096, flow_control="tcp", send_window=16 * 1024)
    h = await credit_flow(config=cfg, channels=2, separate_producers=True)
    hog = [h.gates[0].buffer_pool.request_buffer() for _ in range(8)]
    h.auto_consume(1)
    await _drive(h, (0, 1), 40)
    # Channel 0's task holds both its (exclusive) buffers while it deserializes them.
    held = [h.gates[0].poll_next().buffer for _ in range(2)]
    await h.settle()
    stalled = len(h.consumed[1])
    assert not h.producer_available(1)
    h.gates[0].close()
    for buffer in held + hog:
        buffer.recycle()
    await _drive(h, (1,), 20)
    assert len(h.consumed[1]) > stalled + 10


async def test_corrupted_stream_fails_the_connection_channels_not_the_task_manager(credit_flow):
    # Flink's client handler turns any non-IO exception into a LocalTransportException
    # that fails every channel of the connection; it must not escape the TaskManager.
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), transport="sim_frames")
    (server,) = h.producer.connection_manager._server_handlers
    await server.stream.send_all(b"\x00\x00\x00\x10" + b"\x00" * 12)
    await h.settle()
    channel = h.channel(0)
    assert channel.error is not None
    assert "corrupted" in str(channel.error)


# -- CreditBasedPartitionRequestClientHandlerTest (flink-runtime netty tests), through the
#    harness: the producer's messages are handed to the consumer's handler as they arrive.

def _deliver(h, *messages) -> None:
    """The consumer's handler reads `messages` from the connection."""
    h.channel(0).client._on_messages(list(messages))


def _data(h, channel: int, sequence_number: int, backlog: int, size: int = 4096):
    from shuffle.buffer.data_type import DataType
    from shuffle.netty.messages import BufferResponse

    return BufferResponse(h.channel(channel).receiver_id, sequence_number, backlog, DataType.DATA_BUFFER,
                          bytes(size))


async def test_backlog_announcement_requests_floating_buffers_up_to_the_pool(credit_flow):
    # testReceiveBacklogAnnouncement: 2 exclusive + 8 floating buffers
    from shuffle.netty.messages import BacklogAnnouncement

    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    receiver = h.channel(0).receiver_id
    states = []
    for backlog in (5, 12):
        _deliver(h, BacklogAnnouncement(backlog, receiver))
        state = h.receiver(0)
        states.append((state.exclusive_free + state.floating_free, state.required, state.floating_free))
    assert states == [(7, 7, 5), (10, 14, 8)]


async def test_an_empty_buffer_advances_the_sequence_and_announces_the_backlog(credit_flow):
    # testReceiveEmptyBuffer: no buffer taken, no error, onEmptyBuffer(0, backlog)
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    _deliver(h, _data(h, 0, 0, 2, size=0))
    channel = h.channel(0)
    assert channel.error is None and channel.expected_sequence_number == 1
    assert h.receiver(0).required == 4 and h.receiver(0).queued == 0


async def test_a_buffer_without_a_free_buffer_fails_only_its_channel(credit_flow):
    # testThrowExceptionForNoAvailableBuffer
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2)
    pool = h.gates[0].buffer_pool
    lent = [pool.request_buffer() for _ in range(pool.num_buffers)]
    taken = [h.channel(0).request_buffer() for _ in range(2)]
    _deliver(h, _data(h, 0, 0, 2))
    assert "The read buffer is null in credit-based input channel." in str(h.channel(0).error)
    assert h.channel(1).error is None and h.channel(0).client.channel_error is None
    for buffer in lent + taken:
        buffer.recycle()


async def test_credit_of_two_channels_goes_out_in_notification_order(credit_flow):
    # testNotifyCreditAvailable: each buffer with backlog 1 takes a buffer and asks for 2 floating
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, one_gate=True)
    _deliver(h, _data(h, 0, 0, 1), _data(h, 1, 0, 1))
    assert [h.channel(i).unannounced_credit for i in (0, 1)] == [2, 2]
    await h.settle()
    announced = [(e["channel"], e["credit"]) for e in h.trace.of("credit_announced")]
    assert announced == [(h.channel(0).name, 2), (h.channel(1).name, 2)]
    assert [h.channel(i).unannounced_credit for i in (0, 1)] == [0, 0]


async def test_a_released_channel_sends_its_close_request_but_not_its_credit(credit_flow):
    # testNotifyCreditAvailableAfterReleased
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    _deliver(h, _data(h, 0, 0, 1))
    assert h.channel(0).unannounced_credit == 2
    receiver = h.channel(0).receiver_id
    assert h.producer.connection_manager.find_reader(receiver) is not None
    h.channel(0).release_all_resources()
    await h.settle()
    assert h.credits_announced(0) == []
    assert h.producer.connection_manager.find_reader(receiver) is None  # the close request arrived


def _received_by_producer(h, handle: bool = True) -> list:
    """What the producer's server reads from the consumer's connection from now on (the
    messages Flink's tests take from the EmbeddedChannel's outbound side); `handle=False`:
    the server only records them."""
    (server,) = h.producer.connection_manager.server_handlers()
    received = []
    server_handle = server._handle

    def recording(msg, nursery) -> None:
        received.append(msg)
        if handle:
            server_handle(msg, nursery)

    server._handle = recording
    return received


async def test_a_buffer_response_queues_the_buffer_and_sets_the_backlog(credit_flow):
    # testReceiveBuffer
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    _deliver(h, _data(h, 0, 0, 2))
    channel = h.channel(0)
    assert channel.queue_length == 1
    assert channel.buffer_manager.num_required_buffers - channel.initial_credit == 2  # getSenderBacklog


async def test_credit_waits_while_the_connection_is_unwritable_and_goes_out_once_writable(credit_flow):
    # testNotifyCreditAvailable, its second half: channel 0's next buffer (backlog 1) brings one
    # more floating buffer; its AddCredit waits for the congested connection, then goes out alone
    from shuffle.netty.messages import AddCredit

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, one_gate=True)
    _deliver(h, _data(h, 0, 0, 1), _data(h, 1, 0, 1))
    await h.settle()
    received = _received_by_producer(h)
    h.set_writable(False, side="consumer")
    _deliver(h, _data(h, 0, 1, 1))
    assert [h.channel(i).unannounced_credit for i in (0, 1)] == [1, 0]
    await h.settle()
    assert received == []
    h.set_writable(True, side="consumer")
    await h.settle()
    assert received == [AddCredit(1, h.channel(0).receiver_id)]
    assert [h.channel(i).unannounced_credit for i in (0, 1)] == [0, 0]


@pytest.mark.parametrize("read_first", [True, False], ids=["read_before_release", "read_after_release"])
async def test_data_for_a_released_channel_is_dropped_with_one_cancel(credit_flow, read_first):
    # testReadBufferResponse{Before,After}{Releasing,Removing}Channel (releasing a channel here
    # also removes it from the handler): the buffer is not queued, and the producer gets one
    # CancelPartitionRequest for the receiver, the close's (Flink's cancelRequestFor sends one)
    from shuffle.netty.messages import CancelPartitionRequest

    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    channel = h.channel(0)
    received = _received_by_producer(h)
    response = _data(h, 0, 0, 1)
    if read_first:
        _deliver(h, response)
    channel.release_all_resources()
    if not read_first:
        _deliver(h, response)
    _deliver(h, _data(h, 0, 1, 0))  # more of what was in flight
    await h.settle()
    assert channel.queue_length == 0
    assert [m for m in received if type(m) is CancelPartitionRequest] == [CancelPartitionRequest(channel.receiver_id)]


async def test_a_partition_not_found_is_retried_with_the_initial_credit(credit_flow):
    # testReceivePartitionNotFoundException (the handler calls onFailedPartitionRequest) and
    # NettyPartitionRequestClientTest.testRetriggerPartitionRequest (each retry is a new
    # PartitionRequest carrying the initial credit)
    from shuffle.netty.messages import ErrorResponse, PartitionRequest

    h = await credit_flow(config=NetworkConfig(buffer_size=4096, partition_request_timeout=1.0,
                                               request_backoff_max=2.0))  # Flink's test: 1 ms and 2 ms
    channel = h.channel(0)
    received = _received_by_producer(h, handle=False)  # the partition exists: a real server refuses a 2nd reader
    for _ in range(2):
        _deliver(h, ErrorResponse("PartitionNotFoundError", f"Partition {channel.partition_id} not found.",
                                  channel.receiver_id))
        await h.settle()
    assert channel.error is None
    assert [(m.receiver_id, m.credit) for m in received if type(m) is PartitionRequest] == [
        (channel.receiver_id, 2), (channel.receiver_id, 2)]


# -- NettyPartitionRequestClientTest ----------------------------------------------------------

async def test_a_channel_requests_its_subpartition_once(credit_flow):
    # testDoublePartitionRequest
    from shuffle.netty.messages import PartitionRequest

    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    received = _received_by_producer(h)
    await h.channel(0).request_subpartition()
    await h.settle()
    assert [m for m in received if type(m) is PartitionRequest] == []


@pytest.mark.parametrize("message", ["ResumeConsumption", "AckAllUserRecordsProcessed"])
async def test_resume_and_acknowledge_go_out_for_their_channel(credit_flow, message):
    # testResumeConsumption, testAcknowledgeAllRecordsProcessed
    from shuffle.netty import messages

    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    received = _received_by_producer(h)
    channel = h.channel(0)
    if message == "ResumeConsumption":
        channel.resume_consumption()
    else:
        channel.acknowledge_all_records_processed()
    await h.settle()
    assert received == [getattr(messages, message)(channel.receiver_id)]


async def test_the_connection_outlives_its_last_channel_until_it_fails(credit_flow):
    # testPartitionRequestClientReuse: with connection reuse across jobs (Flink 2.x's default)
    # a client whose last channel closed is kept; one whose connection failed is replaced
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    manager = h.consumer.connection_manager
    address = h.channel(0).producer_address
    client = h.channel(0).client
    h.channel(0).release_all_resources()
    await h.settle()
    assert await manager.create_partition_request_client(address) is client
    client._fail_all(RuntimeError("test"))
    assert await manager.create_partition_request_client(address) is not client


@pytest.mark.parametrize("transport", ["sim", "sim_frames"])
async def test_a_failed_producer_cancels_its_remote_consumer_channel_only(credit_flow, transport):
    # Flink: the producer's task fails, its partition is released with the cause; the consumer
    # announces credit, its reader finds nothing to send and the server answers with a
    # ProducerFailedException; the client wraps it in a RemoteTransportException (onError) and
    # the consumer's next getNextBuffer throws it: a CancelTaskException among its causes.
    from shuffle.errors import CancelTaskError, ProducerFailedError, RemoteTransportError, find_error

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, separate_producers=True,
                          transport=transport)
    for channel in (0, 1):
        await h.emit_buffers(channel, 16)
        h.flush(channel)
    await h.settle()
    # 2 exclusive and 8 floating buffers are full, the rest waits at the producer for credit
    assert h.receiver(0).queued == 10 and h.partitions[0].output_queue_length == 6
    h.partitions[0].release(RuntimeError("producer broke"))
    await h.settle()
    assert h.channel(0).error is None  # the reader is not told; nothing goes out yet
    assert len(h.consume(0, 10)) == 10  # what arrived is read; credit goes out, the reader is polled
    await h.settle()
    error = h.channel(0).error
    assert isinstance(error, RemoteTransportError)
    assert str(error) == (f"Error at remote task manager '{h.channel(0).client.remote_address}': "
                          "ProducerFailedError: RuntimeError: producer broke")
    cancel = find_error(error, CancelTaskError)
    assert isinstance(cancel, ProducerFailedError) and str(cancel) == "RuntimeError: producer broke"
    with pytest.raises(RemoteTransportError) as raised:
        h.gates[0].poll_next()
    assert raised.value is error
    read = len(h.consume(1, 10))  # the other producer's channel, on the same connection, goes on
    await h.settle()
    assert h.channel(1).error is None and read + len(h.consume(1, 10)) == 16


async def test_a_failed_producer_cancels_its_local_consumer_channel(credit_flow):
    # LocalInputChannel.getNextBuffer: the view is released and nothing is left
    from shuffle.errors import CancelTaskError

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), local=True)
    await h.emit_buffers(0, 4)
    h.flush(0)
    await h.settle()
    h.partitions[0].release(RuntimeError("producer broke"))
    with pytest.raises(CancelTaskError, match="has been released"):
        h.consume(0, 1)
