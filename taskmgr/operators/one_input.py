"""One-input operators: map, filter, flat_map, process, keyed reduce/process, count windows.

Without a user function an operator is *modelled*: it works on whole batches (filter
keeps a seeded random `selectivity` fraction, flat_map repeats each record `fan_out`
times, map and reduce pass records through). With a user function it calls the function
per record and emits generic records. Either way it first spends its modelled cost.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

import numpy as np

from graph import OutputTag, StreamNode
from shuffle.serialization.records import FixedWidthRecords
from taskmgr.operators.base import OperatorContext, Output, StreamOperator, user_method
from taskmgr.operators.records import GenericRecords, NS_PER_MS, Records, as_generic


class ProcessContext:
    """The `ctx` of a (keyed) process function: the record's timestamp and current key."""

    __slots__ = ("_timestamp", "_key")

    def __init__(self) -> None:
        self._timestamp = 0
        self._key: Any = None

    def timestamp(self) -> int:
        """The record's timestamp in milliseconds (its creation time since the job started)."""
        return self._timestamp // NS_PER_MS

    def get_current_key(self) -> Any:
        return self._key


async def emit_process_results(output: Output, results: list[tuple[Any, int]]) -> None:
    """Emit what process functions yielded: values, or `(OutputTag, value)` side outputs."""
    main: GenericRecords = []
    side: dict[OutputTag, GenericRecords] = defaultdict(list)
    for value, timestamp in results:
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], OutputTag):
            side[value[0]].append((value[1], timestamp))
        else:
            main.append((value, timestamp))
    await output.emit(main)
    for tag, records in side.items():
        await output.emit(records, tag)


def _outputs(produced: Iterable[Any] | None, timestamp: int) -> list[tuple[Any, int]]:
    return [(value, timestamp) for value in (produced or ())]


class MapOperator(StreamOperator):
    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        self.fn = None if node.function is None else user_method(node.function, "map")

    async def process(self, records: Records, input_index: int) -> None:
        await self.ctx.charge(self.node.cost, len(records))
        if self.fn is not None:
            fn = self.fn
            records = [(fn(value), ts) for value, ts in as_generic(records)]
        await self.output.emit(records)


class FilterOperator(StreamOperator):
    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        self.fn = None if node.function is None else user_method(node.function, "filter")
        self.selectivity = 1.0 if node.selectivity is None else node.selectivity
        self.rng = ctx.rng(f"filter-{node.id}")

    async def process(self, records: Records, input_index: int) -> None:
        await self.ctx.charge(self.node.cost, len(records))
        if self.fn is not None:
            fn = self.fn
            records = [(value, ts) for value, ts in as_generic(records) if fn(value)]
        elif self.selectivity < 1.0:
            keep = self.rng.random(len(records)) < self.selectivity
            if isinstance(records, FixedWidthRecords):
                records = records.take(keep)
            else:
                records = [record for record, kept in zip(records, keep.tolist()) if kept]
        await self.output.emit(records)


class FlatMapOperator(StreamOperator):
    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        self.fn = None if node.function is None else user_method(node.function, "flat_map")
        self.fan_out = 1 if node.fan_out is None else node.fan_out

    async def process(self, records: Records, input_index: int) -> None:
        await self.ctx.charge(self.node.cost, len(records))
        if self.fn is not None:
            fn = self.fn
            records = [out for value, ts in as_generic(records) for out in _outputs(fn(value), ts)]
        elif self.fan_out != 1:
            if isinstance(records, FixedWidthRecords):
                records = FixedWidthRecords(np.repeat(records.rows, self.fan_out), records.format)
            else:
                records = [record for record in records for _ in range(self.fan_out)]
        await self.output.emit(records)


class ProcessOperator(StreamOperator):
    """`process` and `keyed_process`: the function yields values or side outputs."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        self.fn = user_method(node.function, "process_element")
        self.key_selector = node.key_selector
        self.process_ctx = ProcessContext()

    async def process(self, records: Records, input_index: int) -> None:
        await self.ctx.charge(self.node.cost, len(records))
        fn, pctx, key_of = self.fn, self.process_ctx, self.key_selector
        results: list[tuple[Any, int]] = []
        for value, ts in as_generic(records):
            pctx._timestamp = ts
            pctx._key = key_of(value) if key_of is not None else None
            results.extend(_outputs(fn(value, pctx), ts))
        await emit_process_results(self.output, results)


class KeyedReduceOperator(StreamOperator):
    """Rolling reduce per key: emits the new aggregate for every record (Flink's reduce).
    Modelled (no function): records pass through, one output per input."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        self.fn = None if node.function is None else user_method(node.function, "reduce")
        self.state: dict[Any, Any] = {}

    async def process(self, records: Records, input_index: int) -> None:
        await self.ctx.charge(self.node.cost, len(records))
        if self.fn is not None:
            fn, state, key_of = self.fn, self.state, self.node.key_selector
            out = []
            for value, ts in as_generic(records):
                key = key_of(value)
                state[key] = fn(state[key], value) if key in state else value
                out.append((state[key], ts))
            records = out
        await self.output.emit(records)

    def snapshot_state(self) -> dict[str, Any]:
        return {self.state_key: dict(self.state)} if self.fn is not None else {}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.state = dict(state.get(self.state_key, {}))


class CountWindowReduceOperator(StreamOperator):
    """`count_window(n).reduce(f)`: per key, emits the reduce of every n records."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        self.fn = user_method(node.function, "reduce")
        self.size = node.window_size
        self.windows: dict[Any, tuple[Any, int]] = {}

    async def process(self, records: Records, input_index: int) -> None:
        await self.ctx.charge(self.node.cost, len(records))
        fn, windows, key_of, size = self.fn, self.windows, self.node.key_selector, self.size
        out = []
        for value, ts in as_generic(records):
            key = key_of(value)
            if key in windows:
                acc, count = windows[key]
                acc, count = fn(acc, value), count + 1
            else:
                acc, count = value, 1
            if count == size:
                del windows[key]
                out.append((acc, ts))
            else:
                windows[key] = (acc, count)
        await self.output.emit(out)

    def snapshot_state(self) -> dict[str, Any]:
        return {self.state_key: dict(self.windows)}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.windows = dict(state.get(self.state_key, {}))
