"""The record format of every operator's output, decided by the runtime.

Generator sources emit fixed-width rows. Operators without a user function (modelled
map, filter and flat_map, a keyed reduce without function, ...) keep their input's
format, so synthetic pipelines stay vectorized end to end; anything with a user function,
and any operator whose inputs differ, emits generic (msgpack) records.
"""

from __future__ import annotations

from graph import GeneratorSource, StreamNode
from shuffle.serialization.records import FixedWidthFormat, GenericFormat

RecordFormat = FixedWidthFormat | GenericFormat

GENERIC = GenericFormat()
#: Operator kinds that may work on whole fixed-width batches when they have no function.
_VECTORIZED_KINDS = frozenset({"map", "filter", "flat_map", "keyed_reduce", "sink"})


def output_format(node: StreamNode, cache: dict[int, RecordFormat] | None = None) -> RecordFormat:
    """The format of the records `node` emits."""
    cache = {} if cache is None else cache
    if node.id not in cache:
        cache[node.id] = _decide(node, cache)
    return cache[node.id]


def _decide(node: StreamNode, cache: dict[int, RecordFormat]) -> RecordFormat:
    if node.kind == "source":
        source = node.source
        return FixedWidthFormat(source.record_size) if isinstance(source, GeneratorSource) else GENERIC
    if node.function is not None or node.kind not in _VECTORIZED_KINDS or not node.in_edges:
        return GENERIC
    inputs = {output_format(edge.source, cache) for edge in node.in_edges}
    return inputs.pop() if len(inputs) == 1 else GENERIC
