"""Two-input operators of `connect`: co_map, co_flat_map, co_process.

Input 1 and 2 are the JobEdge type numbers of the task's gates; each calls the
function's method for its side (`map1`/`map2`, ...).
"""

from __future__ import annotations

from typing import Any

from graph import StreamNode
from taskmgr.operators.base import OperatorContext, Output, StreamOperator
from taskmgr.operators.one_input import ProcessContext, emit_process_results
from taskmgr.operators.records import Records, as_generic

_METHODS = {
    "co_map": ("map1", "map2"),
    "co_flat_map": ("flat_map1", "flat_map2"),
    "co_process": ("process_element1", "process_element2"),
}


class CoOperator(StreamOperator):
    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        first, second = _METHODS[node.kind]
        self.methods = {1: getattr(node.function, first), 2: getattr(node.function, second)}
        self.process_ctx = ProcessContext()

    async def process(self, records: Records, input_index: int) -> None:
        await self.ctx.charge(self.node.cost, len(records))
        fn = self.methods[input_index]
        kind = self.node.kind
        results: list[tuple[Any, int]] = []
        for value, ts in as_generic(records):
            if kind == "co_map":
                results.append((fn(value), ts))
            elif kind == "co_flat_map":
                results.extend((out, ts) for out in fn(value) or ())
            else:
                self.process_ctx._timestamp = ts
                results.extend((out, ts) for out in fn(value, self.process_ctx) or ())
        await emit_process_results(self.output, results)
