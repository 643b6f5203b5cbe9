"""JobManager <-> TaskManager messages over a trio Stream (the same transports as the shuffle).

A frame is a 4-byte big-endian length of the body, the magic number `RPC_MAGIC`, then
the body: a msgpack map `{"type": name, ...fields}` of one of the typed messages below
(`MESSAGES` maps each name to its class). Fields are msgpack scalars, maps, or `bytes`
payloads for what msgpack cannot hold: the job's program and user functions and
exceptions (cloudpickle), metric tables (Arrow IPC); `taskmgr.payloads` makes and reads
them. Payloads are opened by the receiver's handler, after the frame decoded, and only
on connections whose peer proved the cluster's secret (`shuffle.transport.auth`).

Decoding trusts nothing: a wrong magic, a length of 0 or above the maximum (refused from
the length field, before the body is buffered: Flink's `pekko.framesize`, 10 MiB), a body
that is not msgpack within limits, an unknown type or fields that are not the type's
raise `RpcError`, and only that.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NoReturn, TypeVar

import msgpack

from shuffle import kernel
from shuffle.errors import ProtocolError
from shuffle.transport import ByteStream

RPC_MAGIC = 0x52504331  # "RPC1"
MAX_FRAME_SIZE = 10 * 1024 * 1024
#: Seconds an authenticated connection to the JobManager has to register (after that,
#: heartbeats watch it): a peer that connects and idles is disconnected.
FIRST_MESSAGE_TIMEOUT = 10.0
_HEADER = struct.Struct(">II")  # body length, magic
_RECEIVE_SIZE = 65536


class RpcError(ProtocolError, RuntimeError):
    """A malformed frame or message, or a peer that broke the protocol."""


class RpcMessage:
    """Base of the typed messages; `TYPE` is the name on the wire."""

    TYPE: ClassVar[str]
    #: Field name -> (its msgpack type, required).
    FIELDS: ClassVar[dict[str, tuple[type, bool]]]

    def to_fields(self) -> dict[str, Any]:
        """The message's fields, without those left at None."""
        return {name: value for name in self.FIELDS if (value := getattr(self, name)) is not None}


#: Wire name -> message class.
MESSAGES: dict[str, type[RpcMessage]] = {}

_WIRE_TYPES = {"str": str, "int": int, "float": float, "bytes": bytes, "dict": dict}
M = TypeVar("M", bound=RpcMessage)


def _message(name: str) -> Callable[[type[M]], type[M]]:
    """Make the class a frozen dataclass named `name` on the wire; fields typed `X | None`
    are optional (absent on the wire when None)."""
    def register(cls: type[M]) -> type[M]:
        cls = dataclass(frozen=True)(cls)
        cls.TYPE = name
        cls.FIELDS = {f.name: (_WIRE_TYPES[f.type.removesuffix(" | None")], not f.type.endswith(" | None"))
                      for f in fields(cls)}
        MESSAGES[name] = cls
        return cls
    return register


# --- TaskManager -> JobManager ----------------------------------------------------------------

@_message("register_task_manager")
class RegisterTaskManager(RpcMessage):
    """The first message of a TaskManager: its slots, shuffle address and where it runs."""

    task_manager: str
    shuffle_address: str
    num_slots: int
    pid: int | None = None
    #: The Spark executor hosting it (None outside Spark).
    executor_id: str | None = None


@_message("heartbeat")
class Heartbeat(RpcMessage):
    """The answer to a `HeartbeatRequest`."""


@_message("task_state")
class TaskExecutionState(RpcMessage):
    """A task changed state (Flink's `TaskExecutionState`); a failure carries its cause."""

    job_id: str
    execution_id: str
    state: str
    #: "Type: message" of the cause, readable even where the cause cannot be unpickled.
    error: str | None = None
    #: The cause itself (cloudpickle), when it pickles.
    cause: bytes | None = None
    #: The job's attempt the task belongs to (`JobInformation.attempt`).
    attempt: int | None = None


@_message("attempt_cancelled")
class AttemptCancelled(RpcMessage):
    """The answer to `CancelAttempt`: the attempt's tasks here ended and released their
    partitions; its sources had emitted `records_emitted` records."""

    job_id: str
    attempt: int
    records_emitted: int


@_message("acknowledge_checkpoint")
class AcknowledgeCheckpoint(RpcMessage):
    """A task took its snapshot of a checkpoint (Flink's `AcknowledgeCheckpoint`)."""

    job_id: str
    execution_id: str
    #: Its `SubtaskCheckpointAck` (cloudpickle).
    ack: bytes


@_message("decline_checkpoint")
class DeclineCheckpoint(RpcMessage):
    """A task cannot take a checkpoint (Flink's `DeclineCheckpoint`)."""

    job_id: str
    execution_id: str
    checkpoint_id: int
    reason: str


@_message("task_descriptions")
class TaskDescriptions(RpcMessage):
    """The answer to `DescribeTasks`: execution id -> what that task waits for
    (taskmgr.stall_report), for each of the job's tasks here still running."""

    job_id: str
    descriptions: dict


@_message("job_report")
class JobReport(RpcMessage):
    """What the TaskManager's tasks of a released job gathered (`taskmgr.results.TaskManagerReport`).
    A report larger than a frame comes in `JobReportPart`s first (`job_report_messages`)."""

    job_id: str
    #: The report without its metrics (cloudpickle).
    report: bytes
    #: The sampled metrics (Arrow IPC stream).
    metrics: bytes


@_message("job_report_part")
class JobReportPart(RpcMessage):
    """The start of a JobReport's `report` and `metrics` bytes, which the next parts and the
    JobReport itself continue (a long run's metrics outgrow one frame)."""

    job_id: str
    report: bytes
    metrics: bytes


#: Payload bytes per JobReportPart: half a frame, the rest is ample for the fields around it.
REPORT_PART_SIZE = MAX_FRAME_SIZE // 2
#: The most a JobManager gathers of one report (parts included).
MAX_REPORT_SIZE = 1 << 30


def job_report_messages(job_id: str, report: bytes, metrics: bytes,
                        part_size: int | None = None) -> list[JobReportPart | JobReport]:
    """A report as frames of at most `part_size` (`REPORT_PART_SIZE`) payload bytes each:
    parts, then the JobReport."""
    part_size = part_size or REPORT_PART_SIZE
    messages: list[JobReportPart | JobReport] = []
    report_view, metrics_view = memoryview(report), memoryview(metrics)
    at_report = at_metrics = 0  # offsets: each part copies only its own bytes
    while len(report) - at_report + len(metrics) - at_metrics > part_size:
        head = bytes(report_view[at_report:at_report + part_size])
        rest = bytes(metrics_view[at_metrics:at_metrics + part_size - len(head)])
        messages.append(JobReportPart(job_id, head, rest))
        at_report, at_metrics = at_report + len(head), at_metrics + len(rest)
    messages.append(JobReport(job_id, bytes(report_view[at_report:]), bytes(metrics_view[at_metrics:])))
    return messages


class ReportAssembler:
    """Joins the JobReportParts of one connection's reports, per job; at most `max_size`
    bytes of parts held at once, whatever the jobs."""

    def __init__(self, max_size: int = MAX_REPORT_SIZE) -> None:
        self.max_size = max_size
        self._parts: dict[str, tuple[list[bytes], list[bytes]]] = {}
        self._size = 0

    def add(self, part: JobReportPart) -> None:
        self._size += len(part.report) + len(part.metrics)
        if self._size > self.max_size:
            raise RpcError(f"job_report of job {part.job_id}: more than {self.max_size} bytes of parts")
        reports, metrics = self._parts.setdefault(part.job_id, ([], []))
        reports.append(part.report)
        metrics.append(part.metrics)

    def complete(self, report: JobReport) -> tuple[bytes, bytes]:
        """The whole `report` and `metrics` bytes of a JobReport, its parts first."""
        reports, metrics = self._parts.pop(report.job_id, ([], []))
        self._size -= sum(map(len, reports)) + sum(map(len, metrics))
        return b"".join([*reports, report.report]), b"".join([*metrics, report.metrics])

    def discard(self, job_id: str) -> None:
        """Forget the parts of a job that ended before its report did."""
        reports, metrics = self._parts.pop(job_id, ([], []))
        self._size -= sum(map(len, reports)) + sum(map(len, metrics))


# --- JobManager -> TaskManager ----------------------------------------------------------------

@_message("deploy_job")
class DeployJob(RpcMessage):
    """The job's program before its first task on this TaskManager: the JobGraph with its
    user functions (cloudpickle; Flink's serialized JobInformation). Each task's wiring
    comes in its own descriptor: no TaskManager holds the job's ExecutionGraph, whose
    channels grow with the square of the parallelism."""

    job_id: str
    job_graph: bytes


@_message("deploy_task")
class DeployTask(RpcMessage):
    descriptor: dict


@_message("cancel_task")
class CancelTask(RpcMessage):
    execution_id: str


@_message("trigger_checkpoint")
class TriggerCheckpoint(RpcMessage):
    """Start checkpoint `checkpoint_id` at a source task (Flink's `triggerCheckpoint`)."""

    job_id: str
    execution_id: str
    checkpoint_id: int
    timestamp: int
    #: The `AlignmentType` value.
    alignment: int
    aligned_timeout: float


@_message("abort_checkpoint")
class AbortCheckpoint(RpcMessage):
    """Checkpoint `checkpoint_id` is aborted: tasks drop what they hold for it."""

    job_id: str
    checkpoint_id: int


@_message("notify_checkpoint_complete")
class NotifyCheckpointComplete(RpcMessage):
    """Checkpoint `checkpoint_id` completed (Flink's `notifyCheckpointComplete`): a task
    waiting for its final checkpoint may finish."""

    job_id: str
    checkpoint_id: int


@_message("cancel_attempt")
class CancelAttempt(RpcMessage):
    """The job restarts (taskmgr.failover): cancel its tasks, answer `AttemptCancelled`."""

    job_id: str
    attempt: int


@_message("stop_sources")
class StopSources(RpcMessage):
    """The run's duration is over: stop sources, drain."""

    job_id: str


@_message("describe_tasks")
class DescribeTasks(RpcMessage):
    """The job cannot drain: say what its tasks here still wait for (`TaskDescriptions`)."""

    job_id: str


@_message("release_job")
class ReleaseJob(RpcMessage):
    """Release the job's tasks and partitions and send its `JobReport`."""

    job_id: str


@_message("shutdown")
class Shutdown(RpcMessage):
    pass


@_message("heartbeat_request")
class HeartbeatRequest(RpcMessage):
    pass


def encode_message(kind: str, **fields_: Any) -> bytes:
    """The frame of a message given by its wire name and fields (not checked: fuzzers send anything)."""
    body = msgpack.packb({"type": kind, **fields_}, use_bin_type=True)
    return _HEADER.pack(len(body), RPC_MAGIC) + body


def encode(message: RpcMessage) -> bytes:
    """The frame of `message`."""
    return encode_message(message.TYPE, **message.to_fields())


def check_message(message: Any) -> RpcMessage:
    """The typed message of a decoded body if it is one of `MESSAGES` with exactly its
    fields; `RpcError` otherwise."""
    if type(message) is not dict or type(message.get("type")) is not str:
        raise RpcError("malformed message: not a map with a type name")
    kind = message["type"]
    cls = MESSAGES.get(kind)
    if cls is None:
        raise RpcError(f"unknown message type {kind[:40]!r}")
    for name, value in message.items():
        expected = cls.FIELDS.get(name)
        if name != "type" and (expected is None or type(value) is not expected[0]):
            raise RpcError(f"{kind}: unexpected field or type of {str(name)[:40]!r}")
    missing = [name for name, (_, required) in cls.FIELDS.items() if required and name not in message]
    if missing:
        raise RpcError(f"{kind}: missing field {missing[0]!r}")
    return cls(**{name: value for name, value in message.items() if name != "type"})


class RpcDecoder:
    """Splits a byte stream fed in arbitrary chunks into checked messages.

    After an `RpcError` it keeps raising it and drops whatever is fed.
    """

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._error: RpcError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is None:
            self._buffer += data

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet decoded (an incomplete frame)."""
        return len(self._buffer)

    def __iter__(self) -> Iterator[RpcMessage]:
        return self

    def __next__(self) -> RpcMessage:
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        if len(buffer) < _HEADER.size:
            raise StopIteration
        length, magic = _HEADER.unpack_from(buffer)
        if magic != RPC_MAGIC:
            self._fail("wrong magic number: not a shufflesim RPC stream")
        if not 1 <= length <= self.max_frame_size:
            self._fail(f"message length {length} (must be 1 to {self.max_frame_size} bytes)")
        end = _HEADER.size + length
        if len(buffer) < end:
            raise StopIteration
        body = bytes(buffer[_HEADER.size:end])
        del buffer[:end]
        try:  # msgpack's errors, its limits and nesting depth included, are ValueErrors
            message = msgpack.unpackb(body, raw=False, max_str_len=length, max_bin_len=length,
                                      max_array_len=length, max_map_len=length, max_ext_len=0)
        except ValueError as exc:
            self._fail(f"message body is not valid msgpack ({exc})")
        try:
            return check_message(message)
        except RpcError as exc:
            self._fail(str(exc))

    def _fail(self, reason: str) -> NoReturn:
        self._error = RpcError(reason)
        self._buffer.clear()
        raise self._error


class RpcConnection:
    """Sends and receives messages on one stream; sends are serialized by a lock."""

    def __init__(self, stream: ByteStream, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.stream = stream
        self._send_lock = kernel.Lock()
        self._decoder = RpcDecoder(max_frame_size)

    async def send(self, message: RpcMessage) -> None:
        frame = encode(message)
        async with self._send_lock:
            await self.stream.send_all(frame)

    async def receive(self, timeout: float = math.inf) -> RpcMessage | None:
        """The next message, or None once the peer closed the stream; `RpcError` if the
        peer broke the protocol or sent no message within `timeout` seconds."""
        if timeout == math.inf:
            return await self._receive()
        with kernel.move_on_after(timeout):
            return await self._receive()
        raise RpcError(f"no message within {timeout:g} s")

    async def _receive(self) -> RpcMessage | None:
        decoder = self._decoder
        while True:
            message = next(decoder, None)
            if message is not None:
                return message
            try:
                data = await self.stream.receive_some(_RECEIVE_SIZE)
            except (kernel.BrokenResourceError, kernel.ClosedResourceError):
                return None
            if not data:
                if decoder.buffered_bytes:
                    raise RpcError("connection closed in the middle of a message")
                return None
            decoder.feed(data)

    async def aclose(self) -> None:
        await kernel.aclose_forcefully(self.stream)
