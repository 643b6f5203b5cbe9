"""ResultPartitionType: how a result is exchanged (spec 2.6)."""

from __future__ import annotations

import enum


class ResultPartitionType(enum.Enum):
    BLOCKING = ("BLOCKING", False, False)
    PIPELINED = ("PIPELINED", True, False)
    PIPELINED_BOUNDED = ("PIPELINED_BOUNDED", True, True)

    def __init__(self, label: str, pipelined: bool, bounded: bool) -> None:
        self.label = label
        self.is_pipelined = pipelined
        self.is_bounded = bounded

    @classmethod
    def of(cls, name: str) -> "ResultPartitionType":
        try:
            return cls[name]
        except KeyError:
            raise ValueError(f"unknown result partition type {name!r}; "
                             f"known: {', '.join(t.name for t in cls)}") from None
