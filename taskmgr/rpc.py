"""JobManager <-> TaskManager messages over a trio Stream (the same transports as the shuffle).

A frame is a 4-byte big-endian length of the body, the magic number `RPC_MAGIC`, then
the body: a msgpack map `{"type": name, ...fields}` of one of the `MESSAGES`.
What cannot travel as msgpack (the job's user code, exceptions, metric tables) travels
by reference: `REGISTRY.put(obj)` gives a string the peer resolves with `REGISTRY.get`.
In-process deployments share the registry; a deployment across processes would replace
the registry by serialization and keep the messages as they are.

Decoding trusts nothing: a wrong magic, a length of 0 or above the maximum (refused from
the length field, before the body is buffered: Flink's `pekko.framesize`, 10 MiB), a body
that is not msgpack within limits, an unknown type or fields that are not the type's
raise `RpcError`, and only that.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Iterator
from typing import Any, NoReturn

import msgpack

from shuffle import kernel
from shuffle.transport import ByteStream

from shuffle.errors import ProtocolError

RPC_MAGIC = 0x52504331  # "RPC1"
MAX_FRAME_SIZE = 10 * 1024 * 1024
#: Seconds an authenticated connection to the JobManager has to register (after that,
#: heartbeats watch it): a peer that connects and idles is disconnected.
FIRST_MESSAGE_TIMEOUT = 10.0
_HEADER = struct.Struct(">II")  # body length, magic
_RECEIVE_SIZE = 65536

#: Every message: its required and its optional fields, with their msgpack types.
MESSAGES: dict[str, tuple[dict[str, type], dict[str, type]]] = {
    "register_task_manager": ({"task_manager": str, "shuffle_address": str, "num_slots": int}, {}),
    "deploy_task": ({"descriptor": dict}, {}),
    "cancel_task": ({"execution_id": str}, {}),
    "stop_sources": ({"job_id": str}, {}),
    "release_job": ({"job_id": str}, {}),
    "cancel_attempt": ({"job_id": str, "attempt": int}, {}),
    "attempt_cancelled": ({"job_id": str, "attempt": int, "records_emitted": int}, {}),
    "shutdown": ({}, {}),
    "heartbeat_request": ({}, {}),
    "heartbeat": ({}, {}),
    "task_state": ({"job_id": str, "execution_id": str, "state": str},
                   {"error": str, "error_ref": str, "attempt": int}),
    "job_report": ({"job_id": str, "report_ref": str}, {}),
    "trigger_checkpoint": ({"job_id": str, "execution_id": str, "checkpoint_id": int, "timestamp": int,
                            "alignment": int, "aligned_timeout": float}, {}),
    "abort_checkpoint": ({"job_id": str, "checkpoint_id": int}, {}),
    "acknowledge_checkpoint": ({"job_id": str, "execution_id": str, "ack_ref": str}, {}),
    "decline_checkpoint": ({"job_id": str, "execution_id": str, "checkpoint_id": int, "reason": str}, {}),
}


class RpcError(ProtocolError, RuntimeError):
    """A malformed frame or message, or a peer that broke the protocol."""


class ObjectRegistry:
    """Process-local objects passed by reference in messages."""

    def __init__(self) -> None:
        self._objects: dict[str, Any] = {}
        self._ids = itertools.count()

    def put(self, obj: Any) -> str:
        ref = f"ref-{next(self._ids)}"
        self._objects[ref] = obj
        return ref

    def get(self, ref: str) -> Any:
        try:
            return self._objects[ref]
        except KeyError:
            raise RpcError(f"unknown object reference {ref!r} (not in this process)") from None

    def pop(self, ref: str) -> Any:
        obj = self.get(ref)
        del self._objects[ref]
        return obj


REGISTRY = ObjectRegistry()


def encode_message(kind: str, **fields: Any) -> bytes:
    """The frame of one message."""
    body = msgpack.packb({"type": kind, **fields}, use_bin_type=True)
    return _HEADER.pack(len(body), RPC_MAGIC) + body


def check_message(message: Any) -> dict[str, Any]:
    """`message` if it is one of `MESSAGES` with exactly its fields; `RpcError` otherwise."""
    if type(message) is not dict or type(message.get("type")) is not str:
        raise RpcError("malformed message: not a map with a type name")
    kind = message["type"]
    if kind not in MESSAGES:
        raise RpcError(f"unknown message type {kind[:40]!r}")
    required, optional = MESSAGES[kind]
    for name, value in message.items():
        expected = required.get(name) or optional.get(name)
        if name != "type" and (expected is None or type(value) is not expected):
            raise RpcError(f"{kind}: unexpected field or type of {str(name)[:40]!r}")
    missing = required.keys() - message.keys()
    if missing:
        raise RpcError(f"{kind}: missing field {sorted(missing)[0]!r}")
    return message


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

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
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

    async def send(self, kind: str, **fields: Any) -> None:
        frame = encode_message(kind, **fields)
        async with self._send_lock:
            await self.stream.send_all(frame)

    async def receive(self, timeout: float = math.inf) -> dict[str, Any] | None:
        """The next message, or None once the peer closed the stream; `RpcError` if the
        peer broke the protocol or sent no message within `timeout` seconds."""
        if timeout == math.inf:
            return await self._receive()
        with kernel.move_on_after(timeout):
            return await self._receive()
        raise RpcError(f"no message within {timeout:g} s")

    async def _receive(self) -> dict[str, Any] | None:
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
