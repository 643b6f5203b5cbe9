"""Trace events emitted by the network stack (ARCHITECTURE.md, "trace events").

Call sites test `tracer.enabled` before building an event, so tracing off costs one
attribute read. Events are dicts `{"t": seconds, "event": name, ...}` in emission order;
the time is trio's clock (virtual in sim mode), so a sim run's trace is reproducible.
"""

from __future__ import annotations

import json
from typing import IO, Any, Callable

from shuffle import kernel


class Tracer:
    """Collects events in memory, or streams them as JSON lines to `out`."""

    def __init__(self, out: IO[str] | None = None, clock: Callable[[], float] = kernel.current_time,
                 tm: str | None = None) -> None:
        self.enabled = True
        self.events: list[dict[str, Any]] = []
        self._out = out
        self._clock = clock
        self._tm = tm

    def emit(self, event: str, **fields: Any) -> None:
        record: dict[str, Any] = {"t": round(self._clock(), 9), "event": event}
        if self._tm is not None:
            record["tm"] = self._tm
        record.update(fields)
        if self._out is not None:
            self._out.write(json.dumps(record, separators=(",", ":")) + "\n")
        else:
            self.events.append(record)

    def for_task_manager(self, tm: str) -> "Tracer":
        """A tracer writing to the same place, tagging events with the TaskManager."""
        child = Tracer(self._out, self._clock, tm)
        child.events = self.events
        return child

    def of(self, event: str) -> list[dict[str, Any]]:
        """The collected events of one kind (tests and the harness)."""
        return [e for e in self.events if e["event"] == event]


class _NullTracer(Tracer):
    def __init__(self) -> None:
        super().__init__()
        self.enabled = False

    def emit(self, event: str, **fields: Any) -> None:
        """Tracing is off."""

    def for_task_manager(self, tm: str) -> "Tracer":
        return self


NULL_TRACER: Tracer = _NullTracer()
