"""PartitionRequestServerHandler: serves one inbound connection (spec 3.4).

Decodes the consumer's requests and hands them to the connection's PartitionRequestQueue.
A CloseRequest closes the connection. A request for a partition that is not registered
yet waits until the partition manager's checker expires it (one to two
`partition_request_timeout`s), then answers PartitionNotFound for that receiver only.

Bounded, whatever the consumer sends: its first request must arrive within
`first_request_timeout` of the handshake, and it may hold at most
`max_partition_requests_per_connection` requests (readers and waiting requests); more is
a fatal error (an ErrorResponse, then the connection closes).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.netty.message_stream import message_stream
from shuffle.netty.messages import (
    AckAllUserRecordsProcessed,
    AddCredit,
    CancelPartitionRequest,
    CloseRequest,
    ErrorResponse,
    NettyMessage,
    NewBufferSize,
    PartitionRequest,
    ResumeConsumption,
)
from shuffle.netty.partition_request_queue import PartitionRequestQueue
from shuffle.netty.view_reader import CreditBasedSequenceNumberingViewReader
from shuffle.errors import PartitionNotFoundError, ProtocolError
from shuffle.partition.result_partition_manager import ResultPartitionManager
from shuffle.trace import Tracer
from shuffle.transport import ByteStream

log = logging.getLogger(__name__)


class PartitionRequestServerHandler:
    def __init__(self, stream: ByteStream, partition_manager: ResultPartitionManager,
                 config: NetworkConfig, tracer: Tracer) -> None:
        self.stream = stream
        self.partition_manager = partition_manager
        self.config = config
        self.tracer = tracer
        self.connection = message_stream(stream, config.frame_size_limit)
        self.queue = PartitionRequestQueue(self.connection, tracer)
        #: Partition requests waiting for their partition to be registered.
        self.waiting_requests = 0
        self._nursery: Any = None
        self._first_request: Any = None  # the first request's deadline, until it arrived

    async def run(self) -> None:
        """Serve until the client closes the connection; then release every reader."""
        timeout = self.config.first_request_timeout
        try:
            async with kernel.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    with kernel.move_on_after(timeout) as self._first_request:
                        await self.connection.serve(self._on_messages, self.queue.writer)
                    if self._first_request is not None and self._first_request.cancelled_caught:
                        log.warning("closed a connection that sent no request within %g s of its handshake",
                                    timeout)
                except (kernel.BrokenResourceError, kernel.ClosedResourceError):
                    pass
                except Exception as exc:
                    # Anything unexpected is fatal for the connection, as in Flink.
                    self.queue.fatal_error = True
                    with kernel.move_on_after(1):
                        await self.connection.send(ErrorResponse(type(exc).__name__, str(exc)))
                nursery.cancel_scope.cancel()
        except* (kernel.BrokenResourceError, kernel.ClosedResourceError):
            pass  # the peer went away while we were writing
        finally:
            self.queue.close()
            self.connection.discard_unsent()
            await kernel.aclose_forcefully(self.stream)

    def _on_messages(self, messages: list[NettyMessage]) -> bool:
        if self._first_request is not None:
            self._first_request.deadline = math.inf  # the first request came in time
            self._first_request = None
        for msg in messages:
            if type(msg) is CloseRequest:
                # Flink's PartitionRequestQueue.close: the connection closes (`run` then
                # releases every reader); nothing after it is read
                return False
            self._handle(msg, self._nursery)
        return True

    def _handle(self, msg: NettyMessage, nursery: Any) -> None:
        queue = self.queue
        kind = type(msg)
        if kind is AddCredit:
            if self.tracer.enabled:
                reader = queue.all_readers.get(msg.receiver_id)
                self.tracer.emit("credit_received", channel=reader.channel_name if reader else msg.receiver_id,
                                 credit=msg.credit)
            queue.add_credit_or_resume_consumption(msg.receiver_id, CreditBasedSequenceNumberingViewReader.add_credit,
                                                    msg.credit)
        elif kind is PartitionRequest:
            limit = self.config.max_partition_requests_per_connection
            if len(queue.all_readers) + self.waiting_requests >= limit:
                raise ProtocolError(f"more than {limit} partition requests on one connection")
            reader = CreditBasedSequenceNumberingViewReader(
                msg.receiver_id, msg.credit, queue, self.config.credit_based, msg.subpartition_index)
            try:
                reader.request_subpartition_view(self.partition_manager, msg.partition_id)
            except PartitionNotFoundError:
                self.waiting_requests += 1
                nursery.start_soon(self._request_when_registered, msg, reader)
                return
            queue.notify_reader_created(reader)
        elif kind is ResumeConsumption:
            queue.add_credit_or_resume_consumption(msg.receiver_id,
                                                    CreditBasedSequenceNumberingViewReader.resume_consumption)
        elif kind is CancelPartitionRequest:
            queue.cancel(msg.receiver_id)
        elif kind is AckAllUserRecordsProcessed:
            queue.acknowledge_all_records_processed(msg.receiver_id)
        elif kind is NewBufferSize:
            queue.notify_new_buffer_size(msg.receiver_id, msg.buffer_size)
        else:
            raise ValueError(f"Unexpected message from the consumer: {kind.__name__}")

    async def _request_when_registered(self, msg: PartitionRequest,
                                       reader: CreditBasedSequenceNumberingViewReader) -> None:
        try:
            registered = await self.partition_manager.wait_for_partition(msg.partition_id)
        finally:
            self.waiting_requests -= 1
        if registered:
            try:
                reader.request_subpartition_view(self.partition_manager, msg.partition_id)
            except Exception as exc:
                self.queue.send_control(ErrorResponse(type(exc).__name__, str(exc), msg.receiver_id))
                return
            self.queue.notify_reader_created(reader)
        else:
            error = PartitionNotFoundError(msg.partition_id)
            self.queue.send_control(ErrorResponse(type(error).__name__, str(error), msg.receiver_id))

