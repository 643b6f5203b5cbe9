"""Helpers for tests that play a peer on a byte stream (a stray client, a rogue producer)."""

from __future__ import annotations

from typing import Any

from shuffle import kernel


async def read_until_closed(stream: Any) -> bytes:
    """What arrives until the peer closes the stream (a TCP peer that closes with our bytes
    unread resets it, and a closed stream ends the read too)."""
    data = bytearray()
    try:
        while chunk := await stream.receive_some():
            data += chunk
    except (kernel.BrokenResourceError, kernel.ClosedResourceError):
        pass
    return bytes(data)
