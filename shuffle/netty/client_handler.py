"""CreditBasedPartitionRequestClientHandler: the consumer side of one connection (spec 3.5).

Also plays Flink's NettyPartitionRequestClient: input channels call it to request their
subpartition, announce credit, resume consumption. Outbound messages wait in one FIFO
and leave one at a time; an AddCredit is built when it is written, so credit announced
several times before that goes out as one message. Inbound BufferResponses are copied
into a buffer of the target channel; an error for one channel fails only that channel.

Without credit (flow_control = "tcp") the reader waits for a free buffer of the target
channel before reading on: while it waits nothing else is read from the connection,
which is how one slow consumer stalls every channel sharing it (head-of-line blocking).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import trio

from shuffle.buffer.buffer import Buffer
from shuffle.config import DEFAULT_MAX_FRAME_SIZE
from shuffle.netty.messages import (
    AckAllUserRecordsProcessed,
    AddCredit,
    BacklogAnnouncement,
    BufferResponse,
    CancelPartitionRequest,
    ErrorResponse,
    FrameDecoder,
    NettyMessage,
    NewBufferSize,
    PartitionRequest,
    ResumeConsumption,
    encode,
)
from shuffle.trace import Tracer

if TYPE_CHECKING:
    from shuffle.consumer.remote_input_channel import RemoteInputChannel

RECEIVE_SIZE = 64 * 1024  # below glibc's mmap threshold: no mmap per recv


class RemoteTransportError(IOError):
    """The connection to a producer TaskManager failed or closed under live channels."""


class LocalTransportError(IOError):
    """The consumer side of a connection failed (corrupted stream, unexpected message)."""


class RemoteError(IOError):
    """An error the producer reported for one channel."""


class CreditBasedPartitionRequestClientHandler:
    def __init__(self, stream: trio.abc.Stream, remote_address: str, credit_based: bool, tracer: Tracer,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.stream = stream
        self.max_frame_size = max_frame_size
        self.remote_address = remote_address
        self.credit_based = credit_based
        self.tracer = tracer
        self.input_channels: dict[str, RemoteInputChannel] = {}
        self._outbound: deque[tuple[str, RemoteInputChannel, int]] = deque()
        self._wakeup: trio.Event | None = None
        self.channel_error: BaseException | None = None
        self.closed = False  # the connection ended: the ConnectionManager connects anew

    # -- the client API used by RemoteInputChannel --------------------------------------

    def _enqueue(self, kind: str, channel: RemoteInputChannel, arg: int = 0) -> None:
        self._outbound.append((kind, channel, arg))
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    def request_subpartition(self, channel: RemoteInputChannel) -> None:
        if self.channel_error is not None:
            channel.on_error(self.channel_error)
            return
        self.input_channels[channel.receiver_id] = channel
        self._enqueue("request", channel)

    def notify_credit_available(self, channel: RemoteInputChannel) -> None:
        self._enqueue("credit", channel)

    def resume_consumption(self, channel: RemoteInputChannel) -> None:
        self._enqueue("resume", channel)

    def acknowledge_all_records_processed(self, channel: RemoteInputChannel) -> None:
        self._enqueue("ack", channel)

    def notify_new_buffer_size(self, channel: RemoteInputChannel, size: int) -> None:
        self._enqueue("buffer_size", channel, size)

    def close_channel(self, channel: RemoteInputChannel) -> None:
        if self.input_channels.pop(channel.receiver_id, None) is not None:
            self._enqueue("cancel", channel)

    # -- connection loops -----------------------------------------------------------------

    async def run(self) -> None:
        """Read and write until the connection ends; any failure fails every channel."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop)
                await self._read_loop()
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            self._fail_all(RemoteTransportError(
                f"Lost connection to task manager '{self.remote_address}': {group.exceptions[0]}"))
        except* Exception as group:
            # Anything else is fatal for this connection only (Flink's LocalTransportException).
            self._fail_all(LocalTransportError(f"{group.exceptions[0]} (connection to '{self.remote_address}')"))
        finally:
            self.closed = True
            await trio.aclose_forcefully(self.stream)

    async def _read_loop(self) -> None:
        decoder = FrameDecoder(self.max_frame_size)
        while True:
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                if self.input_channels:
                    self._fail_all(RemoteTransportError(
                        f"Connection unexpectedly closed by remote task manager '{self.remote_address}'. "
                        "This might indicate that the remote task manager was lost."))
                return
            decoder.feed(data)
            for msg in decoder:
                if type(msg) is BufferResponse:
                    await self._on_buffer_response(msg)
                else:
                    self._on_message(msg)
                    if self.channel_error is not None:
                        return  # a fatal ErrorResponse closes the connection

    async def _on_buffer_response(self, msg: BufferResponse) -> None:
        channel = self.input_channels.get(msg.receiver_id)
        if channel is None or channel.is_released:
            self._outbound_cancel(msg.receiver_id)
            return
        try:
            size = len(msg.buffer)
            if msg.data_type.is_buffer:
                if size == 0:
                    channel.on_empty_buffer(msg.sequence_number, msg.backlog)
                    return
                buffer = channel.request_buffer() if self.credit_based else await channel.request_buffer_blocking()
                if buffer is None:
                    raise RuntimeError("The read buffer is null in credit-based input channel.")
                buffer.segment.memory[:size] = msg.buffer
                buffer.size = size
            else:
                buffer = Buffer.of_event(bytes(msg.buffer), msg.data_type)
            channel.on_buffer(buffer, msg.sequence_number, msg.backlog)
        except Exception as exc:
            channel.on_error(exc)

    def _on_message(self, msg: NettyMessage) -> None:
        if type(msg) is ErrorResponse:
            if msg.is_fatal_error:
                self._fail_all(RemoteError(f"Fatal error at remote task manager '{self.remote_address}': "
                                           f"{msg.error_class}: {msg.message}"))
                return
            channel = self.input_channels.get(msg.receiver_id)
            if channel is None:
                return
            if msg.error_class == "PartitionNotFoundError":
                channel.on_failed_partition_request()
            else:
                channel.on_error(RemoteError(f"{msg.error_class}: {msg.message}"))
        elif type(msg) is BacklogAnnouncement:
            channel = self.input_channels.get(msg.receiver_id)
            if channel is None or channel.is_released:
                self._outbound_cancel(msg.receiver_id)
            else:
                channel.on_sender_backlog(msg.backlog)
        else:
            raise RuntimeError(f"Received unknown message from producer: {type(msg).__name__}")

    def _outbound_cancel(self, receiver_id: str) -> None:
        self._outbound.append(("cancel_id", None, receiver_id))  # type: ignore[arg-type]
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    async def _write_loop(self) -> None:
        tracer = self.tracer
        while True:
            if not self._outbound:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            kind, channel, arg = self._outbound.popleft()
            msg = self._build(kind, channel, arg)
            if msg is None:
                continue
            if tracer.enabled:
                if kind == "credit":
                    tracer.emit("credit_announced", channel=channel.name, credit=msg.credit)
                elif kind == "request":
                    tracer.emit("partition_request", channel=channel.name, initial_credit=msg.credit)
            await self.stream.send_all(b"".join(encode(msg)))

    def _build(self, kind: str, channel: RemoteInputChannel, arg) -> NettyMessage | None:
        if kind == "cancel_id":
            return CancelPartitionRequest(arg)
        if kind == "cancel":
            return CancelPartitionRequest(channel.receiver_id)
        if channel.is_released:
            return None
        if kind == "request":
            credit = channel.initial_credit if self.credit_based else 0
            return PartitionRequest(channel.partition_id, channel.subpartition_index, channel.receiver_id, credit)
        if kind == "credit":
            credit = channel.get_and_reset_unannounced_credit()
            return AddCredit(credit, channel.receiver_id) if credit > 0 else None
        if kind == "resume":
            return ResumeConsumption(channel.receiver_id)
        if kind == "ack":
            return AckAllUserRecordsProcessed(channel.receiver_id)
        if kind == "buffer_size":
            return NewBufferSize(arg, channel.receiver_id)
        raise ValueError(kind)

    def _fail_all(self, cause: BaseException) -> None:
        """Fail every registered channel, once."""
        if self.channel_error is not None:
            return
        self.channel_error = cause
        channels = list(self.input_channels.values())
        self.input_channels.clear()
        self._outbound.clear()
        for channel in channels:
            channel.on_error(cause)
