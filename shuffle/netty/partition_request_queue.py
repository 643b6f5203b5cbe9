"""PartitionRequestQueue: the server side of one connection (spec 3.4).

Readers that have something sendable wait in a FIFO; one writer sends one buffer at a
time (a write must complete before the next starts) and puts a reader that has more to
send at the back, so readers take turns on the shared connection. As in Flink's
`writeAndFlushNextMessageIfPossible`, nothing is taken off the queue while the connection
is not writable: the reader stays queued with its credit, and no buffer is pulled.

What waits to be written is bounded by what the consumer asked for: its readers (the
server handler bounds their number), at most one error per reader or request, and at most
one backlog announcement per reader (a newer backlog updates the one waiting), however
often the consumer's credit or resume messages trigger one.

A polled reader with nothing to send whose partition was released because its producer
failed answers its channel with an ErrorResponse of a `ProducerFailedError` (Flink's
ProducerFailedException): the consumer task is cancelled by it, not failed. A reader is
not told of the release: it finds out when next polled (it was queued, or credit finds
a flush that was requested before the release).

The writing itself (writability, the writer task, deferred writes on the simulated link)
is the connection's `OutboundWriter`.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from shuffle.errors import ProducerFailedError
from shuffle.netty.message_stream import MessageStream
from shuffle.netty.outbound_writer import OutboundWriter
from shuffle.netty.messages import BacklogAnnouncement, BufferResponse, ErrorResponse, NettyMessage
from shuffle.netty.view_reader import CreditBasedSequenceNumberingViewReader
from shuffle.trace import Tracer


class PartitionRequestQueue:
    def __init__(self, connection: MessageStream, tracer: Tracer) -> None:
        self.connection = connection
        self.tracer = tracer
        self.available_readers: deque[CreditBasedSequenceNumberingViewReader] = deque()
        self.all_readers: dict[int, CreditBasedSequenceNumberingViewReader] = {}
        # a list: one per connection and mostly empty (an empty deque is ~760 bytes, a list 56)
        self._control: list[NettyMessage] = []
        self._queued_announcements: dict[int, BacklogAnnouncement] = {}
        self.fatal_error = False
        self.writer = OutboundWriter(connection, self._next_sealed, self._has_work)

    def send_control(self, msg: NettyMessage) -> None:
        """Queue a non-buffer message (error, backlog announcement) ahead of buffers."""
        self._control.append(msg)
        self.writer.wake()

    def notify_reader_created(self, reader: CreditBasedSequenceNumberingViewReader) -> None:
        self.all_readers[reader.receiver_id] = reader
        self.enqueue_available_reader(reader)

    def enqueue_available_reader(self, reader: CreditBasedSequenceNumberingViewReader) -> None:
        """Queue `reader` if it can send now, or announce its backlog. Flink's readers reach it
        through `notifyReaderNonEmpty`, a hop to the Netty thread; with no thread between,
        the reader calls it itself."""
        if reader.is_registered_as_available or self.fatal_error or reader.view is None:
            return
        available, backlog = reader.get_availability_and_backlog()
        if not available:
            if backlog > 0 and reader.need_announce_backlog():
                self._announce_backlog(reader.receiver_id, backlog)
            return
        self.available_readers.append(reader)
        reader.is_registered_as_available = True
        if len(self.available_readers) == 1:
            self.writer.wake()

    def _announce_backlog(self, receiver_id: int, backlog: int) -> None:
        queued = self._queued_announcements.get(receiver_id)
        if queued is not None:
            queued.backlog = backlog
            return
        announcement = BacklogAnnouncement(backlog, receiver_id)
        self._queued_announcements[receiver_id] = announcement
        self.send_control(announcement)

    @property
    def queued_control_messages(self) -> int:
        """Errors and backlog announcements waiting to be written."""
        return len(self._control)

    def add_credit_or_resume_consumption(self, receiver_id: int,
                                         op: Callable[..., None], *args: Any) -> None:
        """`op(reader, *args)` on the receiver's reader (an unbound method and its arguments
        rather than a closure per message), then queue the reader if it can send now."""
        if self.fatal_error:
            return
        reader = self._obtain_reader(receiver_id)
        op(reader, *args)
        self.enqueue_available_reader(reader)

    def acknowledge_all_records_processed(self, receiver_id: int) -> None:
        """As Flink: an acknowledgement for a receiver without a reader is an error (fatal
        for the connection, as everything the server handler raises)."""
        if self.fatal_error:
            return
        self._obtain_reader(receiver_id).view.acknowledge_all_data_processed()

    def notify_new_buffer_size(self, receiver_id: int, size: int) -> None:
        """As Flink: a size for a receiver without a reader (yet) is ignored."""
        if self.fatal_error:
            return
        reader = self.all_readers.get(receiver_id)
        if reader is not None and reader.view is not None:
            reader.view.notify_new_buffer_size(size)

    def _obtain_reader(self, receiver_id: int) -> CreditBasedSequenceNumberingViewReader:
        reader = self.all_readers.get(receiver_id)
        if reader is None:
            raise RuntimeError(f"No reader for receiverId = {receiver_id} exists.")
        return reader

    def cancel(self, receiver_id: int) -> None:
        reader = self.all_readers.pop(receiver_id, None)
        if reader is not None:
            self._release(reader)

    def close(self) -> None:
        """Release every reader of this connection (CloseRequest, or the connection ended)."""
        for reader in list(self.all_readers.values()):
            self._release(reader)
        self.all_readers.clear()

    def _release(self, reader: CreditBasedSequenceNumberingViewReader) -> None:
        if reader.is_registered_as_available:
            self.available_readers.remove(reader)
            reader.is_registered_as_available = False
        reader.release_all_resources()

    def _has_work(self) -> bool:
        return bool(self._control or self.available_readers)

    def _error_next(self, error: Exception, receiver_id: int) -> object:
        """Queue an ErrorResponse of `error` for `receiver_id`'s channel and return the next
        message sealed: it goes ahead of any buffer, as Flink writes it at once."""
        self._control.append(ErrorResponse(type(error).__name__, str(error), receiver_id))
        return self._next_sealed()

    def _next_sealed(self) -> object | None:
        """The next message to write, sealed (a buffer pulled here passes to the connection), or None."""
        if self._control:
            msg = self._control.pop(0)
            if type(msg) is BacklogAnnouncement:
                del self._queued_announcements[msg.receiver_id]
                if self.tracer.enabled:
                    reader = self.all_readers.get(msg.receiver_id)
                    self.tracer.emit("backlog_announced", channel=reader.channel_name if reader else msg.receiver_id,
                                     backlog=msg.backlog)
            return self.connection.seal(msg)
        tracer = self.tracer
        while self.available_readers:
            reader = self.available_readers.popleft()
            reader.is_registered_as_available = False
            try:
                nxt = reader.get_next_buffer()
            except Exception as exc:  # a broken reader fails only its own channel (Flink: the connection, README)
                self.all_readers.pop(reader.receiver_id, None)
                self._release(reader)
                return self._error_next(exc, reader.receiver_id)
            if nxt is None:
                cause = reader.failure_cause if reader.is_released else None
                if cause is None:
                    continue
                # The producer failed: its consumer is cancelled by this error. As in Flink, the
                # reader stays until the consumer cancels its request.
                return self._error_next(ProducerFailedError(cause), reader.receiver_id)
            buffer, backlog, sequence_number, more_available = nxt
            if more_available:
                self.available_readers.append(reader)
                reader.is_registered_as_available = True
            if tracer.enabled:
                tracer.emit("buffer_sent", channel=reader.channel_name, seq=sequence_number,
                            backlog=backlog, bytes=buffer.size, data_type=buffer.data_type.name)
            msg = BufferResponse(reader.receiver_id, sequence_number, backlog, buffer.data_type,
                                 buffer.memory(), reader.subpartition_index)
            return self.connection.seal(msg, buffer)
        return None
