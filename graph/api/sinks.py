"""Sinks of the simulator.

What a sink does with records is the runtime's business; these objects only say which
sink it is. ``print()`` adds a ``PrintSink`` named ``Sink: Print to Std. Out``.
"""

from __future__ import annotations

from typing import Any

from graph.api.functions import SinkFunction


class DiscardingSink(SinkFunction):
    """Drops every record (Flink's ``DiscardingSink``): measures the pipeline, not a sink."""

    def invoke(self, value: Any) -> None:
        return None

    def __repr__(self) -> str:
        return "DiscardingSink()"


class CollectSink(SinkFunction):
    """Records are gathered by the runtime under ``name`` and handed back after the run."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"CollectSink name must be a non-empty string, got {name!r}")
        self.name = name

    def invoke(self, value: Any) -> None:
        raise RuntimeError("CollectSink records are gathered by the runtime")

    def __repr__(self) -> str:
        return f"CollectSink({self.name!r})"


class PrintSink(SinkFunction):
    """Prints each record to standard output (what ``DataStream.print()`` adds)."""

    def invoke(self, value: Any) -> None:
        print(value)

    def __repr__(self) -> str:
        return "PrintSink()"
