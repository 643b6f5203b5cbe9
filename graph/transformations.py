"""Transformations: what the DataStream API records, before any graph is built.

As in Flink, every API call that creates a stream creates a Transformation with an id from
the environment's counter. Partitioning, side outputs, unions and feedback (iterations) are
*virtual*: they get an id but never a StreamNode; their information moves onto edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from graph.api.functions import OutputTag
from graph.api.workload import Cost
from graph.partitioners import PartitionerSpec


class ChainingStrategy(Enum):
    """Flink's ``ChainingStrategy``."""

    ALWAYS = "ALWAYS"
    NEVER = "NEVER"
    HEAD = "HEAD"
    HEAD_WITH_SOURCES = "HEAD_WITH_SOURCES"


@dataclass
class Operator:
    """What a physical transformation runs: the StreamNode fields the runtime reads.

    ``kind`` is one of the kinds listed in docs/internals.md; ``description`` is Flink's
    operator description where it differs from the name (windows, ``set_description``).
    """

    kind: str
    function: Any = None
    cost: Cost | None = None
    selectivity: float | None = None
    fan_out: int | None = None
    description: str | None = None
    window_size: int | None = None


@dataclass(eq=False)
class Transformation:
    """Common fields; ``parallelism`` is taken from the environment when created."""

    id: int
    name: str
    parallelism: int
    parallelism_configured: bool = False
    max_parallelism: int = -1
    uid: str | None = None
    slot_sharing_group: str | None = None
    buffer_timeout: float | None = None
    chaining_strategy: ChainingStrategy = ChainingStrategy.ALWAYS

    @property
    def inputs(self) -> list["Transformation"]:
        return []

    def transitive_predecessors(self) -> list["Transformation"]:
        """This transformation and everything upstream of it (Flink's
        ``getTransitivePredecessors``)."""
        seen: dict[int, Transformation] = {}
        stack: list[Transformation] = [self]
        while stack:
            current = stack.pop()
            if current.id not in seen:
                seen[current.id] = current
                stack.extend(current.inputs)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id}, name={self.name!r})"


@dataclass(eq=False, repr=False)
class SourceTransformation(Transformation):
    """A source; ``source`` describes it (sequence, collection, generator)."""

    source: Any = None
    operator: Operator = field(default_factory=lambda: Operator("source"))


@dataclass(eq=False, repr=False)
class OneInputTransformation(Transformation):
    input: Transformation | None = None
    operator: Operator = field(default_factory=lambda: Operator("map"))
    key_selector: Any = None

    @property
    def inputs(self) -> list[Transformation]:
        return [self.input]


@dataclass(eq=False, repr=False)
class TwoInputTransformation(Transformation):
    input1: Transformation | None = None
    input2: Transformation | None = None
    operator: Operator = field(default_factory=lambda: Operator("co_map"))
    key_selector1: Any = None
    key_selector2: Any = None

    @property
    def inputs(self) -> list[Transformation]:
        return [self.input1, self.input2]


@dataclass(eq=False, repr=False)
class LegacySinkTransformation(Transformation):
    """``add_sink``/``print``: one StreamNode named ``Sink: <name>``, a Flink "Data Sink";
    keyed on a KeyedStream (Flink's ``KeyedStream.addSink``)."""

    input: Transformation | None = None
    sink: Any = None
    operator: Operator = field(default_factory=lambda: Operator("sink"))
    key_selector: Any = None

    @property
    def inputs(self) -> list[Transformation]:
        return [self.input]


@dataclass(eq=False, repr=False)
class SinkTransformation(Transformation):
    """``sink_to`` (Sink V2): expanded when translated into a writer node
    ``<name>: Writer`` with an id taken then, keyed when the input is a KeyedStream."""

    input: Transformation | None = None
    sink: Any = None
    operator: Operator = field(default_factory=lambda: Operator("sink"))
    key_selector: Any = None

    @property
    def inputs(self) -> list[Transformation]:
        return [self.input]


@dataclass(eq=False, repr=False)
class PartitionTransformation(Transformation):
    """Virtual: sets the partitioner of the edges out of ``input``."""

    input: Transformation | None = None
    partitioner: PartitionerSpec | None = None

    @property
    def inputs(self) -> list[Transformation]:
        return [self.input]


@dataclass(eq=False, repr=False)
class SideOutputTransformation(Transformation):
    """Virtual: selects the side output ``tag`` of ``input``."""

    input: Transformation | None = None
    tag: OutputTag | None = None

    @property
    def inputs(self) -> list[Transformation]:
        return [self.input]


@dataclass(eq=False, repr=False)
class UnionTransformation(Transformation):
    """Virtual: the consumer gets one edge per input."""

    union_inputs: list[Transformation] = field(default_factory=list)

    @property
    def inputs(self) -> list[Transformation]:
        return list(self.union_inputs)


@dataclass(eq=False, repr=False)
class FeedbackTransformation(Transformation):
    """``iterate()``: the input plus an iteration head fed by the ``feedback_edges``
    (``close_with``) through an iteration tail, co-located with the head."""

    input: Transformation | None = None
    wait_time: float = 0.0
    feedback_edges: list[Transformation] = field(default_factory=list)

    @property
    def inputs(self) -> list[Transformation]:
        return [self.input]
