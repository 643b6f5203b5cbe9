"""The network stack's errors, typed, in one place.

Flink's Netty layer sends a failure to the consumer as the exception itself; here an
`ErrorResponse` carries the class name and message, and `error_from_wire` turns them back
into the same class where the stack knows it (so code recognises errors by type, never
by their text), else into a `RemoteError`.
"""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


class IllegalStateError(RuntimeError):
    """A state the protocol forbids was reached (Flink's `checkState` failing)."""


class InvariantViolation(AssertionError):
    """A rule of the network stack's state no longer holds (a bug, never a user mistake)."""


def check(condition: bool, what: str) -> None:
    """Raise InvariantViolation(`what`) unless `condition` holds."""
    if not condition:
        raise InvariantViolation(what)


def find_error(error: BaseException | None, kind: type[E]) -> E | None:
    """The first exception of type `kind` along `error`'s causes (Flink's
    `ExceptionUtils.findThrowable`), looking into exception groups of one exception (a
    nursery's way of passing a task's error on)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if isinstance(error, kind):
            return error
        error = error.__cause__
    return None


class CheckpointException(Exception):
    """A checkpoint cannot go on in this task (Flink's CheckpointException): the task declines
    it with `reason` (Flink's CheckpointFailureReason name) and goes on."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class CancelTaskError(RuntimeError):
    """The task's resources were released under it (a released channel, a destroyed buffer
    pool): Flink's CancelTaskException, which cancels the task instead of failing the job."""


class ProducerFailedError(CancelTaskError):
    """The producer of a consumed partition failed (Flink's ProducerFailedException): its
    server answers the consumer's channel with this, and the consumer is cancelled, not
    failed, so the producer's own failure stays the job's root cause. The message is the
    producer's cause as Flink's `toString` gives it (class name, then message)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")


class ProtocolError(Exception):
    """A peer's bytes break a protocol on a stream (framing, handshake, message): the
    connection is closed; nothing but this connection fails. Not an OSError: Flink's
    client reports it as a LocalTransportException, not as a lost connection."""


class CorruptedStreamError(ProtocolError, ValueError):
    """The byte stream does not follow the framing or the catalogue (wrong magic, bad or
    oversized length, unknown id, a header that is not the message's fields)."""


class CreditViolationError(ProtocolError):
    """Data was sent without credit: the producer's reader went below zero credit, or a
    buffer arrived for which the consumer had no buffer (credit) to put it in."""


class BufferReorderingError(IOError):
    """A buffer arrived out of sequence on a channel (Flink's BufferReorderingException, an IOException)."""


class PartitionNotFoundError(IOError):
    """The requested result partition is not (or no longer) registered at the producer."""

    def __init__(self, partition_id: str) -> None:
        super().__init__(f"Partition {partition_id} not found.")
        self.partition_id = partition_id


class PartitionConnectionError(IOError):
    """A partition request could not connect to the producer's TaskManager (Flink's
    PartitionConnectionException); the connection's error is its cause."""

    def __init__(self, partition_id: str) -> None:
        super().__init__(f"Connection for partition {partition_id} not reachable.")
        self.partition_id = partition_id


class RemoteError(IOError):
    """An error the producer reported for one channel, of a type this side does not know."""


class RemoteTransportError(IOError):
    """The connection to a producer TaskManager failed or closed under live channels."""


class LocalTransportError(IOError):
    """The consumer side of a connection failed (corrupted stream, unexpected message)."""


_WIRE_TYPES: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (IllegalStateError, ProtocolError, CorruptedStreamError, CreditViolationError,
                BufferReorderingError, PartitionNotFoundError, ProducerFailedError)
}


def error_from_wire(error_class: str, message: str) -> Exception:
    """The exception an ErrorResponse describes: its own class where known, else RemoteError."""
    cls = _WIRE_TYPES.get(error_class)
    if cls is None:
        return RemoteError(f"{error_class}: {message}")
    error = cls.__new__(cls)  # the sender's message as it is, whatever the class's arguments
    Exception.__init__(error, message)
    return error
