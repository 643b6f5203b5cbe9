"""Mutual authentication of every connection with the run's shared secret, as Spark's
`spark.authenticate`: a challenge-response with HMAC-SHA256 over nonces from both sides.

    client -> server   b"SSAU", version 1, the client's 32-byte nonce
    server -> client   the server's 32-byte nonce, HMAC(secret, "server" + both nonces)
    client -> server   HMAC(secret, "client" + both nonces)

Each side checks the other's proof with `hmac.compare_digest`; the server reads exactly
these bytes and nothing of the protocol above before the client has proved the secret,
and the whole exchange has a timeout. The secret never crosses the wire, a recorded
exchange cannot be replayed (fresh nonces) and a proof cannot be reflected (role labels).
The client sends its proof and goes on without waiting (it already checked the server's),
so a connection costs one extra round trip. What follows is not encrypted: the point is
that a stranger can neither join the cluster, nor request a partition, nor stop a job.

`AuthenticatedTransport` wraps any `Transport`: the RPC layer and the shuffle's
connection manager both get their streams from it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Hashable
from typing import Any

from shuffle import kernel

from shuffle.errors import ProtocolError
from shuffle.transport import ByteStream, StreamHandler, Transport

log = logging.getLogger(__name__)

HELLO = b"SSAU\x01"  # magic and version
NONCE_SIZE = 32
MAC_SIZE = hashlib.sha256().digest_size
MIN_SECRET_LENGTH = 16
#: Seconds a peer has to complete the handshake.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
#: Connections a server lets handshake at once; one more evicts the oldest (so strangers
#: that open connections and say nothing cost a bounded amount of memory and cannot crowd
#: out a peer, whose handshake takes one round trip).
DEFAULT_MAX_PENDING_HANDSHAKES = 128


class AuthenticationError(ProtocolError):
    """The peer did not prove the shared secret (wrong secret, not our protocol, too slow)."""


def generate_secret() -> bytes:
    """A fresh random secret (one per run unless the user gives one)."""
    return secrets.token_bytes(32)


def secret_from_text(text: str) -> bytes:
    """A user-given secret as bytes; `ValueError` (not showing it) if it is too short."""
    secret = text.encode()
    if len(secret) < MIN_SECRET_LENGTH:
        raise ValueError(f"a secret must be at least {MIN_SECRET_LENGTH} characters long, got {len(secret)} "
                         '(e.g. python -c "import secrets; print(secrets.token_hex(16))")')
    return secret


def _proof(secret: bytes, role: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(secret, role + client_nonce + server_nonce, hashlib.sha256).digest()


async def _receive_exactly(stream: ByteStream, n: int) -> bytes:
    """`n` bytes, and not one more (the rest belongs to the protocol above)."""
    data = bytearray()
    while len(data) < n:
        chunk = await stream.receive_some(n - len(data))
        if not chunk:
            raise AuthenticationError("the peer closed the connection during the handshake")
        data += chunk
    return bytes(data)


async def client_handshake(stream: ByteStream, secret: bytes, timeout: float) -> None:
    """Prove the secret to the server at the other end of `stream`, and check its proof."""
    client_nonce = secrets.token_bytes(NONCE_SIZE)
    try:
        with kernel.fail_after(timeout):
            await stream.send_all(HELLO + client_nonce)
            reply = await _receive_exactly(stream, NONCE_SIZE + MAC_SIZE)
            server_nonce, server_proof = reply[:NONCE_SIZE], reply[NONCE_SIZE:]
            if not hmac.compare_digest(server_proof, _proof(secret, b"server", client_nonce, server_nonce)):
                raise AuthenticationError("the server did not prove the shared secret (wrong secret?)")
            await stream.send_all(_proof(secret, b"client", client_nonce, server_nonce))
    except kernel.TooSlowError:
        raise AuthenticationError(f"the server did not answer the handshake within {timeout} s") from None
    except (kernel.BrokenResourceError, kernel.ClosedResourceError, OSError) as exc:
        raise AuthenticationError(f"the connection failed during the handshake: {exc}") from exc


async def server_handshake(stream: ByteStream, secret: bytes, timeout: float) -> None:
    """Check the client's proof of the secret (and prove it back); `AuthenticationError` if not."""
    try:
        with kernel.fail_after(timeout):
            hello = await _receive_exactly(stream, len(HELLO) + NONCE_SIZE)
            if not hello.startswith(HELLO):
                raise AuthenticationError("not a shufflesim handshake")
            client_nonce = hello[len(HELLO):]
            server_nonce = secrets.token_bytes(NONCE_SIZE)
            await stream.send_all(server_nonce + _proof(secret, b"server", client_nonce, server_nonce))
            client_proof = await _receive_exactly(stream, MAC_SIZE)
            if not hmac.compare_digest(client_proof, _proof(secret, b"client", client_nonce, server_nonce)):
                raise AuthenticationError("the client did not prove the shared secret (wrong secret?)")
    except kernel.TooSlowError:
        raise AuthenticationError(f"no handshake within {timeout} s") from None
    except (kernel.BrokenResourceError, kernel.ClosedResourceError, OSError) as exc:
        raise AuthenticationError(f"the connection failed during the handshake: {exc}") from exc


def describe(stream: ByteStream) -> str:
    """"from <peer> to <local address>" for a TCP stream (empty for other streams), for log lines."""
    try:
        sock = stream.socket  # type: ignore[attr-defined]
        peer, local = sock.getpeername(), sock.getsockname()
    except (AttributeError, OSError):
        return ""
    return f" from {peer[0]}:{peer[1]} to {local[0]}:{local[1]}"


class AuthenticatedTransport:
    """A `Transport` whose connections start with the handshake on `secret`, both ways.

    A peer that fails it is logged and disconnected before the handler sees its stream;
    so is the oldest of `max_pending_handshakes` connections still handshaking when one
    more arrives.
    """

    def __init__(self, transport: Transport, secret: bytes,
                 handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
                 max_pending_handshakes: int = DEFAULT_MAX_PENDING_HANDSHAKES) -> None:
        if max_pending_handshakes < 1:
            raise ValueError(f"max_pending_handshakes must be >= 1, got {max_pending_handshakes}")
        self.transport = transport
        self.secret = secret
        self.handshake_timeout = handshake_timeout
        self.max_pending_handshakes = max_pending_handshakes

    async def serve(self, address: Hashable, handler: StreamHandler, *,
                    task_status: Any = kernel.TASK_STATUS_IGNORED) -> None:
        pending: dict[kernel.CancelScope, None] = {}  # handshakes in progress, oldest first

        async def authenticate_then_handle(stream: ByteStream) -> None:
            if len(pending) >= self.max_pending_handshakes:
                next(iter(pending)).cancel()
            error: Exception | None = None
            with kernel.CancelScope() as scope:
                pending[scope] = None
                try:
                    await server_handshake(stream, self.secret, self.handshake_timeout)
                except AuthenticationError as exc:
                    error = exc
                finally:
                    del pending[scope]
            if scope.cancelled_caught:
                error = AuthenticationError(f"evicted: {self.max_pending_handshakes} newer connections "
                                            "were handshaking")
            if error is not None:
                log.warning("refused a connection%s: %s", describe(stream), error)
                await kernel.aclose_forcefully(stream)
                return
            await handler(stream)

        await self.transport.serve(address, authenticate_then_handle, task_status=task_status)

    async def connect(self, address: Hashable) -> ByteStream:
        stream = await self.transport.connect(address)
        try:
            await client_handshake(stream, self.secret, self.handshake_timeout)
        except AuthenticationError as exc:
            await kernel.aclose_forcefully(stream)
            raise AuthenticationError(f"connecting to {address}: {exc}") from exc.__cause__
        return stream
