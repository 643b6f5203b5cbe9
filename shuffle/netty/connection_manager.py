"""ConnectionManager: the TaskManager's Netty server and its client connections (spec 3.3).

One server accepts consumers' connections; one client connection per remote producer
TaskManager is shared by every remote input channel that reads from it (Flink's default
of one TCP connection per TaskManager pair and direction).
"""

from __future__ import annotations

from typing import Any

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.errors import RemoteTransportError
from shuffle.netty.client_handler import CreditBasedPartitionRequestClientHandler
from shuffle.netty.server_handler import PartitionRequestServerHandler
from shuffle.netty.view_reader import CreditBasedSequenceNumberingViewReader
from shuffle.partition.result_partition_manager import ResultPartitionManager
from shuffle.trace import Tracer
from shuffle.transport import Transport
from shuffle.transport import ByteStream


class ConnectionManager:
    def __init__(self, transport: Transport, partition_manager: ResultPartitionManager,
                 config: NetworkConfig, tracer: Tracer) -> None:
        self.transport = transport
        self.partition_manager = partition_manager
        self.config = config
        self.tracer = tracer
        self.address: Any = None
        self._nursery: Any | None = None
        self._clients: dict[Any, CreditBasedPartitionRequestClientHandler] = {}
        self._connecting: dict[Any, kernel.Lock] = {}
        #: In the order they connected (a set's order would follow memory addresses, and closing
        #: them in that order would make a run's end differ between processes).
        self._server_handlers: dict[PartitionRequestServerHandler, None] = {}

    async def start(self, nursery: Any, address: Any) -> Any:
        """Start serving in `nursery`; returns the address consumers connect to."""
        self._nursery = nursery
        self.address = await nursery.start(self.transport.serve, address, self._serve_connection)
        return self.address

    async def _serve_connection(self, stream: ByteStream) -> None:
        handler = PartitionRequestServerHandler(stream, self.partition_manager, self.config, self.tracer)
        self._server_handlers[handler] = None
        try:
            await handler.run()
        finally:
            self._server_handlers.pop(handler, None)

    def find_reader(self, receiver_id: int) -> CreditBasedSequenceNumberingViewReader | None:
        """The server-side reader serving `receiver_id` (inspection: harness, metrics)."""
        for handler in self._server_handlers:
            reader = handler.queue.all_readers.get(receiver_id)
            if reader is not None:
                return reader
        return None

    def client(self, address: Any) -> CreditBasedPartitionRequestClientHandler | None:
        return self._clients.get(address)

    def clients(self) -> list[CreditBasedPartitionRequestClientHandler]:
        """The client connections (inspection: harness)."""
        return list(self._clients.values())

    def server_handlers(self) -> list[PartitionRequestServerHandler]:
        """The served connections (inspection: harness)."""
        return list(self._server_handlers)

    async def create_partition_request_client(self, address: Any) -> CreditBasedPartitionRequestClientHandler:
        """The shared connection to `address`, connecting on first use and after it failed."""
        client = self._clients.get(address)
        if client is not None and _usable(client):
            return client
        lock = self._connecting.setdefault(address, kernel.Lock())
        async with lock:
            client = self._clients.get(address)
            if client is None or not _usable(client):
                if self._nursery is None:
                    raise RuntimeError("connection manager is not started")
                try:
                    stream = await self.transport.connect(address)
                except (OSError, kernel.BrokenResourceError) as exc:  # Flink's PartitionRequestClientFactory.connect
                    raise RemoteTransportError(
                        f"Connecting to remote task manager '{address}' has failed. This might indicate that the "
                        "remote task manager has been lost.") from exc
                client = CreditBasedPartitionRequestClientHandler(
                    stream, address, self.config.credit_based, self.tracer, self.config.frame_size_limit,
                    self.config.max_partition_requests_per_connection)
                self._clients[address] = client
                self._nursery.start_soon(client.run)
        return client

    async def close(self) -> None:
        """Close every connection, client and server side."""
        for client in self._clients.values():
            await kernel.aclose_forcefully(client.stream)
        for handler in list(self._server_handlers):
            await kernel.aclose_forcefully(handler.stream)
        self._clients.clear()


def _usable(client: CreditBasedPartitionRequestClientHandler) -> bool:
    """Flink drops a client whose handler saw a channel error (or whose connection ended)."""
    return client.channel_error is None and not client.closed
