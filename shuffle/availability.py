"""Availability signalled through the kernel: Flink's AvailabilityProvider in one thread.

`is_available` is a plain flag the hot path reads; `wait()` parks until the flag is set.
"""

from __future__ import annotations

from shuffle import kernel


class AvailabilityHelper:
    """A resettable "available" flag with waiters."""

    __slots__ = ("_available", "_event")

    def __init__(self, available: bool = False) -> None:
        self._available = available
        self._event: kernel.Event | None = None

    @property
    def is_available(self) -> bool:
        return self._available

    def set_available(self) -> None:
        if not self._available:
            self._available = True
            if self._event is not None:
                self._event.set()
                self._event = None

    def set_unavailable(self) -> None:
        self._available = False

    def set(self, available: bool) -> None:
        if available:
            self.set_available()
        else:
            self._available = False

    async def wait(self) -> None:
        """Return once available (at once if it already is; no checkpoint then)."""
        while not self._available:
            if self._event is None:
                self._event = kernel.Event()
            await self._event.wait()
