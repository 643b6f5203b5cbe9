"""Per-channel timelines from `trace.jsonl`: credit, backlog and buffers in flight.

Read by the report (credit and backlog plots) and by the Perfetto converter (counters),
so both show the same numbers. A channel is named `<partition_id>#<subpartition>` in
every event (ARCHITECTURE.md). The sender's available credit follows Flink's credit loop
(spec 3.3): the initial credit of the `partition_request`, plus every `credit_received`
(AddCredit at the producer), minus one per data buffer sent (events cost no credit).
Channels that never had credit (local channels, `flow_control = "tcp"`) have no credit
timeline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The only buffer type that costs credit (`shuffle.buffer.data_type.DataType.is_buffer`).
CREDIT_BUFFER_TYPE = "DATA_BUFFER"


class TraceFileError(ValueError):
    """trace.jsonl cannot be read; the message names the file and the line."""


def read_trace(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a trace.jsonl file, in file (= time) order."""
    try:
        with open(path) as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TraceFileError(f"{path}:{number}: not a JSON object: {e.msg}") from None
                if not isinstance(event, dict) or "t" not in event or "event" not in event:
                    raise TraceFileError(f"{path}:{number}: an event needs 't' and 'event'")
                yield event
    except OSError as e:
        raise TraceFileError(f"{path}: cannot read: {e.strerror}") from None


@dataclass
class Steps:
    """A quantity that changes at instants: `values[i]` holds from `times[i]` on."""

    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def set(self, t: float, value: float) -> None:
        if self.times and self.times[-1] == t:
            self.values[-1] = value
        else:
            self.times.append(t)
            self.values.append(value)

    @property
    def last(self) -> float:
        return self.values[-1] if self.values else 0.0


@dataclass
class ChannelTimeline:
    """One channel's credit (None without credit), backlog and buffers in flight over time."""

    name: str
    local: bool = False
    sender_tm: str | None = None
    receiver_tm: str | None = None
    credit: Steps | None = None
    backlog: Steps = field(default_factory=Steps)
    in_flight: Steps = field(default_factory=Steps)
    #: AddCredit announcements of the consumer: (time, credit).
    announced: list[tuple[float, int]] = field(default_factory=list)

    def _credit(self, t: float, change: float) -> None:
        if self.credit is None:
            self.credit = Steps()
        self.credit.set(t, self.credit.last + change)


def apply_event(timelines: dict[str, ChannelTimeline], event: Mapping[str, Any]) -> ChannelTimeline | None:
    """Update the timeline of the event's channel; the timeline, or None for other events."""
    channel = event.get("channel")
    if channel is None:
        return None
    timeline = timelines.get(channel)
    if timeline is None:
        timeline = timelines[channel] = ChannelTimeline(str(channel))
    t, name = event["t"], event["event"]
    if event.get("local"):
        timeline.local = True
    if name == "partition_request":
        timeline.receiver_tm = event.get("tm")
        if event.get("initial_credit"):
            timeline._credit(t, event["initial_credit"])
    elif name == "credit_received":
        timeline._credit(t, event["credit"])
    elif name == "credit_announced":
        timeline.announced.append((t, event["credit"]))
    elif name == "buffer_sent":
        timeline.sender_tm = event.get("tm")
        timeline.backlog.set(t, event.get("backlog", 0))
        timeline.in_flight.set(t, timeline.in_flight.last + 1)
        if timeline.credit is not None and event.get("data_type") == CREDIT_BUFFER_TYPE:
            timeline._credit(t, -1)
    elif name == "buffer_received":
        timeline.receiver_tm = event.get("tm")
        timeline.in_flight.set(t, timeline.in_flight.last - 1)
    return timeline


def channel_timelines(events: Iterable[Mapping[str, Any]]) -> dict[str, ChannelTimeline]:
    """Every channel's timeline, in the order channels first appear."""
    timelines: dict[str, ChannelTimeline] = {}
    for event in events:
        apply_event(timelines, event)
    return timelines
