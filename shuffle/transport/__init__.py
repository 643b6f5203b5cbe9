"""Byte streams under the Netty layer: the simulated link (`sim_link`) and TCP (`tcp`).

Both offer the `Transport` interface: the Netty layer serves and connects by address and
reads and writes frames on a `ByteStream`, the same code in sim and realtime mode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol

from shuffle import kernel


class ByteStream(Protocol):
    """A bidirectional byte stream (trio's Stream interface), as both transports give."""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None: ...

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray: ...

    async def aclose(self) -> None: ...


StreamHandler = Callable[[ByteStream], Awaitable[Any]]


class Transport(Protocol):
    async def serve(
        self, address: Hashable, handler: StreamHandler, *, task_status: Any = kernel.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections at `address` until cancelled, running `handler(stream)` for each;
        reports the address actually bound through `task_status.started(address)`."""
        ...

    async def connect(self, address: Hashable) -> ByteStream:
        """A stream connected to the server at `address`."""
        ...
