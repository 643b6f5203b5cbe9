"""What the consumer's client sends for its channels (Flink's `ClientOutboundMessage`s).

Each queued message is built when it is written, not when it is queued: an AddCredit then
carries all credit recycled until that moment, and a message of a channel released in
the meantime builds to nothing. `trace` reports the built message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shuffle.netty.messages import (
    AckAllUserRecordsProcessed,
    AddCredit,
    CancelPartitionRequest,
    NettyMessage,
    NewBufferSize,
    PartitionRequest,
    ResumeConsumption,
)
from shuffle.trace import Tracer

if TYPE_CHECKING:
    from shuffle.consumer.remote_input_channel import RemoteInputChannel


class ClientOutboundMessage:
    """A message of one input channel, built when the connection writes it."""

    __slots__ = ("channel",)

    def __init__(self, channel: RemoteInputChannel) -> None:
        self.channel = channel

    def build(self) -> NettyMessage | None:
        """The message to write now, or None if there is nothing to send any more."""
        if self.channel.is_released:
            return None
        return self._build()

    def _build(self) -> NettyMessage | None:
        raise NotImplementedError

    def trace(self, tracer: Tracer, msg: NettyMessage) -> None:
        """Report the written message (only some are trace events)."""


class PartitionRequestMessage(ClientOutboundMessage):
    __slots__ = ("credit_based",)

    def __init__(self, channel: RemoteInputChannel, credit_based: bool) -> None:
        super().__init__(channel)
        self.credit_based = credit_based

    def _build(self) -> PartitionRequest:
        channel = self.channel
        credit = channel.initial_credit if self.credit_based else 0
        return PartitionRequest(channel.partition_id, channel.subpartition_index, channel.receiver_id, credit)

    def trace(self, tracer: Tracer, msg: PartitionRequest) -> None:
        tracer.emit("partition_request", channel=self.channel.name, initial_credit=msg.credit)


class AddCreditMessage(ClientOutboundMessage):
    """All credit announced since the last AddCredit, taken when written (none: nothing)."""

    __slots__ = ()

    def _build(self) -> AddCredit | None:
        credit = self.channel.get_and_reset_unannounced_credit()
        return AddCredit(credit, self.channel.receiver_id) if credit > 0 else None

    def trace(self, tracer: Tracer, msg: AddCredit) -> None:
        tracer.emit("credit_announced", channel=self.channel.name, credit=msg.credit)


class ResumeConsumptionMessage(ClientOutboundMessage):
    __slots__ = ()

    def _build(self) -> ResumeConsumption:
        return ResumeConsumption(self.channel.receiver_id)


class AckAllUserRecordsProcessedMessage(ClientOutboundMessage):
    __slots__ = ()

    def _build(self) -> AckAllUserRecordsProcessed:
        return AckAllUserRecordsProcessed(self.channel.receiver_id)


class NewBufferSizeMessage(ClientOutboundMessage):
    __slots__ = ("buffer_size",)

    def __init__(self, channel: RemoteInputChannel, buffer_size: int) -> None:
        super().__init__(channel)
        self.buffer_size = buffer_size

    def _build(self) -> NewBufferSize:
        return NewBufferSize(self.buffer_size, self.channel.receiver_id)

    def trace(self, tracer: Tracer, msg: NewBufferSize) -> None:
        tracer.emit("buffer_size_announced", channel=self.channel.name, size=msg.buffer_size)


class CancelPartitionRequestMessage:
    """Release the producer's reader of `receiver_id`: sent even for a released channel."""

    __slots__ = ("receiver_id",)

    def __init__(self, receiver_id: int) -> None:
        self.receiver_id = receiver_id

    def build(self) -> CancelPartitionRequest:
        return CancelPartitionRequest(self.receiver_id)

    def trace(self, tracer: Tracer, msg: NettyMessage) -> None:
        """Not a trace event."""
