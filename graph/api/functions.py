"""User function interfaces, with PyFlink's names.

An operator takes either a plain callable or an instance of the matching Function class;
the compiler stores the user object as it is (``StreamNode.function``) and the runtime
calls it. ``ProcessFunction.process_element(value, ctx)`` yields values, or
``(OutputTag, value)`` pairs for side outputs.
"""

from __future__ import annotations

from typing import Any, Iterable


class Function:
    """Base of every user function (Flink's ``org.apache.flink.api.common.functions.Function``)."""


class MapFunction(Function):
    def map(self, value: Any) -> Any:
        raise NotImplementedError


class FlatMapFunction(Function):
    def flat_map(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError


class FilterFunction(Function):
    def filter(self, value: Any) -> bool:
        raise NotImplementedError


class ReduceFunction(Function):
    def reduce(self, value1: Any, value2: Any) -> Any:
        raise NotImplementedError


class KeySelector(Function):
    def get_key(self, value: Any) -> Any:
        raise NotImplementedError


class Partitioner(Function):
    """Custom partitioner for ``partition_custom``: picks a channel for a key."""

    def partition(self, key: Any, num_partitions: int) -> int:
        raise NotImplementedError


class ProcessFunction(Function):
    """``process_element`` yields output values or ``(OutputTag, value)`` side outputs."""

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        raise NotImplementedError


class KeyedProcessFunction(ProcessFunction):
    """A ProcessFunction on a KeyedStream (``ctx`` also gives the current key)."""


class CoMapFunction(Function):
    def map1(self, value: Any) -> Any:
        raise NotImplementedError

    def map2(self, value: Any) -> Any:
        raise NotImplementedError


class CoFlatMapFunction(Function):
    def flat_map1(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError

    def flat_map2(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError


class CoProcessFunction(Function):
    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any]:
        raise NotImplementedError

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any]:
        raise NotImplementedError


class SinkFunction(Function):
    """A legacy sink (``add_sink``); also accepted by ``sink_to``."""

    def invoke(self, value: Any) -> None:
        raise NotImplementedError


class OutputTag:
    """Names a side output; tags are equal when their ids are equal (as in Flink)."""

    def __init__(self, tag_id: str) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ValueError(f"OutputTag id must be a non-empty string, got {tag_id!r}")
        self.tag_id = tag_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"


def check_function(function: Any, interface: type, operator: str) -> Any:
    """Return ``function`` if it is an ``interface`` instance or a callable, else TypeError."""
    if isinstance(function, interface) or (callable(function) and not isinstance(function, type)):
        return function
    raise TypeError(
        f"{operator}: expected a callable or a {interface.__name__}, got {function!r}"
    )


def key_function(key_selector: Any) -> Any:
    """A checked key selector as the callable the runtime applies: a `KeySelector`'s
    `get_key`, or the callable itself."""
    return key_selector.get_key if isinstance(key_selector, KeySelector) else key_selector


class SumAggregator(ReduceFunction):
    """What ``KeyedStream.sum`` reduces with: adds field ``position`` (a tuple/list index
    or dict key) of the new record to the running record."""

    def __init__(self, position: int | str = 0) -> None:
        if isinstance(position, bool) or not isinstance(position, (int, str)):
            raise TypeError(f"sum: position must be an int index or a str key, got {position!r}")
        self.position = position

    def reduce(self, value1: Any, value2: Any) -> Any:
        if isinstance(value1, (int, float)):
            return value1 + value2
        if isinstance(value1, dict):
            return {**value1, self.position: value1[self.position] + value2[self.position]}
        fields = list(value1)
        fields[self.position] += value2[self.position]
        return type(value1)(fields)
