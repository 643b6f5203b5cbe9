"""CreditBasedPartitionRequestClientHandler: the consumer side of one connection (spec 3.5).

Also plays Flink's NettyPartitionRequestClient: input channels call it to request their
subpartition, announce credit, resume consumption. Outbound messages wait in one FIFO
and leave one at a time, taken off only while the connection is writable; an AddCredit
is built when it is written, so credit announced several times before that (also while
the connection is congested) goes out as one message. On the simulated link an idle
writer's work is written from the connection's event loop (`MessageStream.defer`). Inbound BufferResponses are copied
into a buffer of the target channel; an error for one channel fails only that channel.

A channel that closes sends one CancelPartitionRequest, and data still in flight for it is
dropped without another (as Flink's `cancelRequestFor`). A BufferResponse or
BacklogAnnouncement for a receiver this connection never had is answered with one
CancelPartitionRequest, however many arrive before it is written; more than
`max_receivers` such receivers waiting for their cancel is a protocol error (the producer
is not Flink's), which fails the connection.

Without credit (flow_control = "tcp") the reader waits for a free buffer of the target
channel before reading on: while it waits nothing else is read from the connection,
which is how one slow consumer stalls every channel sharing it (head-of-line blocking).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shuffle import kernel
from shuffle.buffer.buffer import Buffer
from shuffle.config import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_RECEIVERS
from shuffle.errors import (
    CreditViolationError,
    LocalTransportError,
    PartitionNotFoundError,
    ProtocolError,
    RemoteError,
    RemoteTransportError,
    error_from_wire,
)
from shuffle.netty.client_outbound import (
    AckAllUserRecordsProcessedMessage,
    AddCreditMessage,
    CancelPartitionRequestMessage,
    ClientOutboundMessage,
    NewBufferSizeMessage,
    PartitionRequestMessage,
    ResumeConsumptionMessage,
)
from shuffle.netty.message_stream import message_stream
from shuffle.netty.outbound_writer import OutboundWriter
from shuffle.netty.messages import (
    BacklogAnnouncement,
    BufferResponse,
    ErrorResponse,
    NettyMessage,
)
from shuffle.trace import Tracer
from shuffle.transport import ByteStream

if TYPE_CHECKING:
    from shuffle.consumer.remote_input_channel import RemoteInputChannel


class CreditBasedPartitionRequestClientHandler:
    def __init__(self, stream: ByteStream, remote_address: str, credit_based: bool, tracer: Tracer,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, max_receivers: int = DEFAULT_MAX_RECEIVERS) -> None:
        self.stream = stream
        self.connection = message_stream(stream, max_frame_size)
        self.remote_address = remote_address
        self.credit_based = credit_based
        self.tracer = tracer
        self.input_channels: dict[int, RemoteInputChannel] = {}
        # a list: one per connection, a few entries (an empty deque is ~760 bytes, a list 56)
        self._outbound: list[ClientOutboundMessage | CancelPartitionRequestMessage] = []
        self.writer = OutboundWriter(self.connection, self._next_sealed, self._has_work)
        self.channel_error: BaseException | None = None
        self.closed = False  # the connection ended: the ConnectionManager connects anew
        self.max_receivers = max_receivers
        #: Receivers without a channel whose CancelPartitionRequest waits to be written.
        self._cancelling: set[int] = set()
        #: Receivers whose channel closed here: their one CancelPartitionRequest went out with
        #: the close, and data still in flight for them is dropped without another (Flink's
        #: `cancelled`, kept per receiver id: an id is never used again).
        self._closed: set[int] = set()
        #: Pre-credit mode: the channel whose free buffer the connection waits for, reading
        #: nothing else meanwhile (what a stall report names).
        self.waiting_for_buffer_of: RemoteInputChannel | None = None

    # -- the client API used by RemoteInputChannel --------------------------------------

    def _enqueue(self, message: ClientOutboundMessage | CancelPartitionRequestMessage) -> None:
        self._outbound.append(message)
        self.writer.wake()

    def request_subpartition(self, channel: RemoteInputChannel) -> None:
        if self.channel_error is not None:
            channel.on_error(self.channel_error)
            return
        self.input_channels[channel.receiver_id] = channel
        self._enqueue(PartitionRequestMessage(channel, self.credit_based))

    def notify_credit_available(self, channel: RemoteInputChannel) -> None:
        self._enqueue(AddCreditMessage(channel))

    def resume_consumption(self, channel: RemoteInputChannel) -> None:
        self._enqueue(ResumeConsumptionMessage(channel))

    def acknowledge_all_records_processed(self, channel: RemoteInputChannel) -> None:
        self._enqueue(AckAllUserRecordsProcessedMessage(channel))

    def notify_new_buffer_size(self, channel: RemoteInputChannel, size: int) -> None:
        self._enqueue(NewBufferSizeMessage(channel, size))

    def close_channel(self, channel: RemoteInputChannel) -> None:
        if self.input_channels.pop(channel.receiver_id, None) is not None:
            self._closed.add(channel.receiver_id)
            self._enqueue(CancelPartitionRequestMessage(channel.receiver_id))

    # -- connection loops -----------------------------------------------------------------

    async def run(self) -> None:
        """Read and write until the connection ends; any failure fails every channel."""
        try:
            if self.credit_based:
                await self.connection.serve(self._on_messages, self.writer)
            else:
                async with kernel.open_nursery() as nursery:
                    nursery.start_soon(self.writer.run)
                    await self._read_loop_without_credit()
                    nursery.cancel_scope.cancel()
            if self.input_channels:  # the peer closed the connection (a fatal error cleared them)
                self._fail_all(RemoteTransportError(
                    f"Connection unexpectedly closed by remote task manager '{self.remote_address}'. "
                    "This might indicate that the remote task manager was lost."))
        except* (kernel.BrokenResourceError, kernel.ClosedResourceError, OSError) as group:
            # Flink's text for a connection reset by the peer; the I/O error is its cause
            lost = RemoteTransportError(f"Lost connection to task manager '{self.remote_address}'. "
                                        "This indicates that the remote task manager was lost.")
            lost.__cause__ = group.exceptions[0]
            self._fail_all(lost)
        except* Exception as group:
            # Anything else is fatal for this connection only (Flink's LocalTransportException).
            self._fail_all(LocalTransportError(f"{group.exceptions[0]} (connection to '{self.remote_address}')"))
        finally:
            self.closed = True
            self.connection.discard_unsent()
            await kernel.aclose_forcefully(self.stream)

    def _on_messages(self, messages: list[NettyMessage]) -> bool:
        """Handle arrived messages in order; False once a fatal ErrorResponse closed the connection."""
        for msg in messages:
            if type(msg) is BufferResponse:
                self._on_buffer_response(msg)
            else:
                self._on_message(msg)
                if self.channel_error is not None:
                    return False
        return True

    async def _read_loop_without_credit(self) -> None:
        """Pre-credit mode: a data buffer waits for a free buffer of its channel, and nothing
        else is read from the connection meanwhile (head-of-line blocking)."""
        while messages := await self.connection.receive():
            for msg in messages:
                if type(msg) is not BufferResponse:
                    if not self._on_messages([msg]):
                        return
                    continue
                channel = self.input_channels.get(msg.receiver_id)
                if channel is None or channel.is_released or not msg.data_type.is_buffer or not len(msg.buffer):
                    self._on_buffer_response(msg)
                    continue
                self.waiting_for_buffer_of = channel
                try:
                    self._fill(channel, msg, await channel.request_buffer_blocking())
                except Exception as exc:
                    channel.on_error(exc)
                finally:
                    self.waiting_for_buffer_of = None

    def _on_buffer_response(self, msg: BufferResponse) -> None:
        channel = self.input_channels.get(msg.receiver_id)
        if channel is None or channel.is_released:
            self._outbound_cancel(msg.receiver_id)
            return
        try:
            if not msg.data_type.is_buffer:
                self._fill(channel, msg, None)
            elif not len(msg.buffer):
                channel.on_empty_buffer(msg.sequence_number, msg.backlog)
            else:
                buffer = channel.request_buffer()
                if buffer is None:
                    raise CreditViolationError("The read buffer is null in credit-based input channel.")
                self._fill(channel, msg, buffer)
        except Exception as exc:
            channel.on_error(exc)

    @staticmethod
    def _fill(channel: RemoteInputChannel, msg: BufferResponse, buffer: Buffer | None) -> None:
        """Hand the message's bytes to its channel: in `buffer` (data), or as an event."""
        if buffer is None:
            buffer = Buffer.of_event(bytes(msg.buffer), msg.data_type)
        else:
            payload = msg.buffer
            # A read-only view is a full buffer from the simulated link, whose bytes nobody
            # writes again (ObjectMessageStream.seal: the sender's segment dropped them and
            # a writer only ever appends, past their end, into new memory): kept as it is.
            if type(payload) is not bytes and not (type(payload) is memoryview and payload.readonly):
                payload = bytes(payload)  # a frame decoder's buffer, which the next frames overwrite
            buffer.ref.segment.adopt(payload)
            buffer.size = len(payload)
        channel.on_buffer(buffer, msg.sequence_number, msg.backlog)

    def _on_message(self, msg: NettyMessage) -> None:
        if type(msg) is ErrorResponse:
            if msg.is_fatal_error:
                self._fail_all(RemoteError(f"Fatal error at remote task manager '{self.remote_address}': "
                                           f"{msg.error_class}: {msg.message}"))
                return
            channel = self.input_channels.get(msg.receiver_id)
            if channel is None:
                return
            error = error_from_wire(msg.error_class, msg.message)
            if isinstance(error, PartitionNotFoundError):
                channel.on_failed_partition_request()
            else:
                # as Flink: the producer's error is the cause of the channel's (a consumer finds a
                # ProducerFailedError among the causes and is cancelled); its text is in the
                # message too, as in the fatal case: a failure cause travels without its causes
                remote = RemoteTransportError(f"Error at remote task manager '{self.remote_address}': "
                                              f"{msg.error_class}: {msg.message}")
                remote.__cause__ = error
                channel.on_error(remote)
        elif type(msg) is BacklogAnnouncement:
            channel = self.input_channels.get(msg.receiver_id)
            if channel is None or channel.is_released:
                self._outbound_cancel(msg.receiver_id)
            else:
                channel.on_sender_backlog(msg.backlog)
        else:
            raise RuntimeError(f"Received unknown message from producer: {type(msg).__name__}")

    def _outbound_cancel(self, receiver_id: int) -> None:
        if receiver_id in self._cancelling or receiver_id in self._closed:
            return
        if len(self._cancelling) >= self.max_receivers:
            raise ProtocolError(f"the producer sent data for more than {self.max_receivers} unknown receivers")
        self._cancelling.add(receiver_id)
        self._enqueue(CancelPartitionRequestMessage(receiver_id))

    def _has_work(self) -> bool:
        return bool(self._outbound)

    def _next_sealed(self) -> object | None:
        """Build the next outbound message and seal it (None when nothing is left to send)."""
        tracer = self.tracer
        while self._outbound:
            outbound = self._outbound.pop(0)
            if type(outbound) is CancelPartitionRequestMessage:
                self._cancelling.discard(outbound.receiver_id)
            msg = outbound.build()
            if msg is None:
                continue
            if tracer.enabled:
                outbound.trace(tracer, msg)
            return self.connection.seal(msg)
        return None

    def _fail_all(self, cause: BaseException) -> None:
        """Fail every registered channel, once."""
        if self.channel_error is not None:
            return
        self.channel_error = cause
        channels = list(self.input_channels.values())
        self.input_channels.clear()
        self._outbound.clear()
        self._cancelling.clear()
        self._closed.clear()
        for channel in channels:
            channel.on_error(cause)
