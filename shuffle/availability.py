"""Availability signalled through the kernel: Flink's AvailabilityProvider in one thread.

`is_available` is a plain flag the hot path reads (an attribute: change it only through
`set_available` / `set_unavailable`); `wait()` parks until the flag is set, and
`when_available` runs a callback then, as Flink's `getAvailableFuture().thenRun(...)`.
"""

from __future__ import annotations

from collections.abc import Callable

from shuffle import kernel


class AvailabilityHelper:
    """A resettable "available" flag with waiters."""

    __slots__ = ("is_available", "_event", "_callbacks")

    def __init__(self, available: bool = False) -> None:
        self.is_available = available
        self._event: kernel.Event | None = None
        self._callbacks: list[Callable[[], None]] | None = None

    def set_available(self) -> None:
        if not self.is_available:
            self.is_available = True
            if self._event is not None:
                self._event.set()
                self._event = None
            callbacks = self._callbacks
            if callbacks is not None:
                self._callbacks = None
                for callback in callbacks:
                    callback()

    def when_available(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, now if available, else when it next becomes available."""
        if self.is_available:
            callback()
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def set_unavailable(self) -> None:
        self.is_available = False

    async def wait(self) -> None:
        """Return once available (at once if it already is; no checkpoint then)."""
        while not self.is_available:
            if self._event is None:
                self._event = kernel.Event()
            await self._event.wait()
