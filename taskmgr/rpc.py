"""JobManager <-> TaskManager messages over a trio Stream (the same transports as the shuffle).

A frame is a 4-byte big-endian length, then a msgpack map `{"type": name, ...fields}`.
What cannot travel as msgpack (the job's user code, exceptions, metric tables) travels
by reference: `REGISTRY.put(obj)` gives a string the peer resolves with `REGISTRY.get`.
In-process deployments share the registry; a deployment across processes would replace
the registry by serialization and keep the messages as they are.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import msgpack

from shuffle import kernel
from shuffle.transport import ByteStream

_LENGTH = struct.Struct(">I")
_RECEIVE_SIZE = 65536


class RpcError(RuntimeError):
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


class RpcConnection:
    """Sends and receives messages on one stream; sends are serialized by a lock."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self._send_lock = kernel.Lock()
        self._buffer = bytearray()

    async def send(self, kind: str, **fields: Any) -> None:
        body = msgpack.packb({"type": kind, **fields}, use_bin_type=True)
        async with self._send_lock:
            await self.stream.send_all(_LENGTH.pack(len(body)) + body)

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None once the peer closed the stream."""
        while True:
            message = self._take_message()
            if message is not None:
                return message
            try:
                data = await self.stream.receive_some(_RECEIVE_SIZE)
            except (kernel.BrokenResourceError, kernel.ClosedResourceError):
                return None
            if not data:
                if self._buffer:
                    raise RpcError("connection closed in the middle of a message")
                return None
            self._buffer += data

    def _take_message(self) -> dict[str, Any] | None:
        buffer = self._buffer
        if len(buffer) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(buffer)
        end = _LENGTH.size + length
        if len(buffer) < end:
            return None
        message = msgpack.unpackb(bytes(buffer[_LENGTH.size:end]), raw=False)
        del buffer[:end]
        if not isinstance(message, dict) or "type" not in message:
            raise RpcError(f"malformed message {message!r}")
        return message

    async def aclose(self) -> None:
        await kernel.aclose_forcefully(self.stream)
