"""Byte streams under the Netty layer: the simulated link (`sim_link`) and TCP (`tcp`).

Both offer the `Transport` interface: the Netty layer serves and connects by address and
reads and writes frames on a `trio.abc.Stream`, the same code in sim and realtime mode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol

import trio

StreamHandler = Callable[[trio.abc.Stream], Awaitable[Any]]


class ProtocolError(Exception):
    """A peer's bytes break a protocol on a stream (framing, handshake, message): the
    connection is closed; never anything else than this connection fails."""


class Transport(Protocol):
    async def serve(
        self, address: Hashable, handler: StreamHandler, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections at `address` until cancelled, running `handler(stream)` for each;
        reports the address actually bound through `task_status.started(address)`."""
        ...

    async def connect(self, address: Hashable) -> trio.abc.Stream:
        """A stream connected to the server at `address`."""
        ...
