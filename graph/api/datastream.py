"""DataStream API (PyFlink's names): streams record Transformations in their environment.

Operator methods take a plain callable or the matching Function object, and optional
simulator keywords: ``cost`` (a ``Cost``, "5ms" or seconds per record), ``selectivity``
(filter), ``fan_out`` (flat_map). Misuse raises TypeError/ValueError at the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph import partitioners
from graph.api.functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeySelector,
    MapFunction,
    OutputTag,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    SinkFunction,
    SumAggregator,
    check_function,
    key_function,
)
from graph.api.sinks import PrintSink
from graph.api.workload import Cost
from graph.errors import IllegalArgumentException, UnsupportedOperationException
from graph.parallelism import check_max_parallelism, check_parallelism
from graph.partitioners import PartitionerSpec
from graph.transformations import (
    ChainingStrategy,
    FeedbackTransformation,
    LegacySinkTransformation,
    OneInputTransformation,
    Operator,
    PartitionTransformation,
    SideOutputTransformation,
    SinkTransformation,
    Transformation,
    TwoInputTransformation,
    UnionTransformation,
)
from graph.units import parse_duration

if TYPE_CHECKING:
    from graph.api.environment import StreamExecutionEnvironment


def _cost(operator: str, cost: Any) -> Cost | None:
    if cost is None:
        return None
    try:
        return Cost.of(cost)
    except ValueError as error:
        raise ValueError(f"{operator}: invalid cost {cost!r}: {error}") from None


class _OperatorSettings:
    """Per-operator settings shared by operator streams and sinks (Flink's
    SingleOutputStreamOperator / DataStreamSink)."""

    _transformation: Transformation

    def _operator(self, method: str) -> Transformation:
        return self._transformation

    def name(self, name: str) -> "_OperatorSettings":
        if not isinstance(name, str) or not name:
            raise ValueError(f"name: expected a non-empty string, got {name!r}")
        self._operator("name").name = name
        return self

    def get_name(self) -> str:
        return self._transformation.name

    def set_description(self, description: str) -> "_OperatorSettings":
        """What the plan shows as the operator's contents (and the vertex description)."""
        if not isinstance(description, str):
            raise TypeError(f"{self._transformation.name}: description must be a string, got {description!r}")
        self._operator("set_description").operator.description = description
        return self

    def uid(self, uid: str) -> "_OperatorSettings":
        if not isinstance(uid, str) or not uid:
            raise ValueError(f"{self._transformation.name}: uid must be a non-empty string, got {uid!r}")
        self._operator("uid").uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> "_OperatorSettings":
        t = self._operator("set_parallelism")
        check_parallelism(parallelism)
        t.parallelism = parallelism
        t.parallelism_configured = True
        return self

    def get_parallelism(self) -> int:
        return self._transformation.parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "_OperatorSettings":
        t = self._operator("set_max_parallelism")
        t.max_parallelism = check_max_parallelism(max_parallelism)
        return self

    def slot_sharing_group(self, name: str) -> "_OperatorSettings":
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self._transformation.name}: slot sharing group must be a non-empty string, got {name!r}")
        self._operator("slot_sharing_group").slot_sharing_group = name
        return self

    def disable_chaining(self) -> "_OperatorSettings":
        self._operator("disable_chaining").chaining_strategy = ChainingStrategy.NEVER
        return self


class DataStream(_OperatorSettings):
    """A stream of records; operator settings apply when it is an operator's output."""

    def __init__(self, env: "StreamExecutionEnvironment", transformation: Transformation) -> None:
        self._env = env
        self._transformation = transformation

    @property
    def transformation(self) -> Transformation:
        return self._transformation

    def get_execution_environment(self) -> "StreamExecutionEnvironment":
        return self._env

    def start_new_chain(self) -> "DataStream":
        self._operator("start_new_chain").chaining_strategy = ChainingStrategy.HEAD
        return self

    def set_buffer_timeout(self, timeout: str | float) -> "DataStream":
        """Seconds or "10ms" for this operator's outputs; 0 flushes every record, -1 means
        the environment's timeout (Flink's rule: only the environment can turn flushing off)."""
        t = self._operator("set_buffer_timeout")
        seconds = parse_duration(timeout)
        if seconds < 0 and seconds != -1:
            raise IllegalArgumentException("timeout must be >= -1")  # SingleOutputStreamOperator's
        t.buffer_timeout = seconds
        return self

    def _key_selector(self) -> Any:
        """The key of a KeyedStream's operators and sinks (Flink's state key selector)."""
        return None

    def _operator(self, method: str) -> Transformation:
        if isinstance(self._transformation, (PartitionTransformation, SideOutputTransformation,
                                             UnionTransformation, FeedbackTransformation)):
            raise TypeError(
                f"{method}: applies to an operator, but this stream is a "
                f"{type(self._transformation).__name__} (no operator of its own)"
            )
        return self._transformation

    # -- one-input operators -----------------------------------------------------------

    def _one_input(self, name: str, operator: Operator) -> "DataStream":
        transformation = OneInputTransformation(
            id=self._env.new_transformation_id(), name=name, parallelism=self._env.parallelism,
            input=self._transformation, operator=operator, key_selector=self._key_selector(),
        )
        self._env.add_operator(transformation)
        return DataStream(self._env, transformation)

    def map(self, func: Any = None, *, cost: Any = None) -> "DataStream":
        """``Map``; without a function it is the identity (a pure cost stage)."""
        if func is not None:
            check_function(func, MapFunction, "map")
        return self._one_input("Map", Operator("map", func, _cost("map", cost)))

    def flat_map(self, func: Any = None, *, fan_out: int | None = None, cost: Any = None) -> "DataStream":
        """``Flat Map``: a function, or synthetic ``fan_out`` copies of every record."""
        if (func is None) == (fan_out is None):
            raise TypeError("flat_map: give either a function or fan_out=")
        if func is not None:
            check_function(func, FlatMapFunction, "flat_map")
        elif isinstance(fan_out, bool) or not isinstance(fan_out, int) or fan_out < 0:
            raise ValueError(f"flat_map: fan_out must be an int >= 0, got {fan_out!r}")
        return self._one_input("Flat Map", Operator("flat_map", func, _cost("flat_map", cost), fan_out=fan_out))

    def filter(self, func: Any = None, *, selectivity: float | None = None, cost: Any = None) -> "DataStream":
        """``Filter``: a predicate, or a synthetic ``selectivity`` (fraction kept)."""
        if (func is None) == (selectivity is None):
            raise TypeError("filter: give either a function or selectivity=")
        if func is not None:
            check_function(func, FilterFunction, "filter")
        elif (isinstance(selectivity, bool) or not isinstance(selectivity, (int, float))
              or not 0 <= selectivity <= 1):
            raise ValueError(f"filter: selectivity must be in [0, 1], got {selectivity!r}")
        return self._one_input("Filter", Operator("filter", func, _cost("filter", cost), selectivity=selectivity))

    def process(self, func: Any, *, cost: Any = None) -> "DataStream":
        """``Process``: ``process_element(value, ctx)`` yields values or (OutputTag, value)."""
        check_function(func, ProcessFunction, "process")
        return self._one_input("Process", Operator("process", func, _cost("process", cost)))

    def get_side_output(self, tag: OutputTag) -> "DataStream":
        if not isinstance(tag, OutputTag):
            raise TypeError(f"get_side_output: expected an OutputTag, got {tag!r}")
        source = self._operator("get_side_output")
        transformation = SideOutputTransformation(
            id=self._env.new_transformation_id(), name="SideOutput", parallelism=source.parallelism,
            input=source, tag=tag,
        )
        return DataStream(self._env, transformation)

    # -- partitioning ------------------------------------------------------------------

    def _partition(self, partitioner: PartitionerSpec) -> "DataStream":
        transformation = PartitionTransformation(
            id=self._env.new_transformation_id(), name="Partition",
            parallelism=self._transformation.parallelism, input=self._transformation,
            partitioner=partitioner,
        )
        return DataStream(self._env, transformation)

    def forward(self) -> "DataStream":
        return self._partition(partitioners.forward())

    def rebalance(self) -> "DataStream":
        return self._partition(partitioners.simple("REBALANCE"))

    def rescale(self) -> "DataStream":
        return self._partition(partitioners.simple("RESCALE"))

    def shuffle(self) -> "DataStream":
        return self._partition(partitioners.simple("SHUFFLE"))

    def broadcast(self) -> "DataStream":
        return self._partition(partitioners.simple("BROADCAST"))

    def global_(self) -> "DataStream":
        return self._partition(partitioners.simple("GLOBAL"))

    def partition_custom(self, partitioner: Any, key_selector: Any) -> "DataStream":
        """``partitioner.partition(key, n)`` (or a callable) picks the channel of a key."""
        check_function(partitioner, Partitioner, "partition_custom")
        check_function(key_selector, KeySelector, "partition_custom")
        return self._partition(partitioners.custom(partitioner, key_function(key_selector)))

    def key_by(self, key_selector: Any) -> "KeyedStream":
        check_function(key_selector, KeySelector, "key_by")
        transformation = PartitionTransformation(
            id=self._env.new_transformation_id(), name="Partition",
            parallelism=self._transformation.parallelism, input=self._transformation,
            partitioner=partitioners.hash_by(key_function(key_selector)),
        )
        return KeyedStream(self._env, transformation)

    # -- multiple streams --------------------------------------------------------------

    def _same_environment(self, method: str, other: Any) -> None:
        if not isinstance(other, DataStream):
            raise TypeError(f"{method}: expected a DataStream, got {other!r}")
        if other._env is not self._env:
            raise ValueError(f"{method}: the streams belong to different environments")

    def union(self, *streams: "DataStream") -> "DataStream":
        for stream in streams:
            self._same_environment("union", stream)
        transformation = UnionTransformation(
            id=self._env.new_transformation_id(), name="Union",
            parallelism=self._transformation.parallelism,
            union_inputs=[self._transformation] + [stream._transformation for stream in streams],
        )
        return DataStream(self._env, transformation)

    def connect(self, stream: "DataStream") -> "ConnectedStreams":
        self._same_environment("connect", stream)
        return ConnectedStreams(self._env, self, stream)

    def iterate(self, max_wait_time: str | float = 0) -> "IterativeStream":
        """Start an iteration (Flink 1.x Java API); close it with ``close_with``."""
        wait = parse_duration(max_wait_time)
        if wait < 0:
            raise ValueError(f"iterate: max_wait_time must be >= 0, got {max_wait_time!r}")
        transformation = FeedbackTransformation(
            id=self._env.new_transformation_id(), name="Feedback",
            parallelism=self._transformation.parallelism, input=self._transformation, wait_time=wait,
        )
        return IterativeStream(self._env, transformation)

    # -- sinks -------------------------------------------------------------------------

    def print(self) -> "DataStreamSink":
        return self._legacy_sink("Print to Std. Out", PrintSink(), None)

    def add_sink(self, sink: Any, *, cost: Any = None) -> "DataStreamSink":
        """A legacy sink (``Sink: Unnamed`` unless renamed), a "Data Sink" in the plan."""
        check_function(sink, SinkFunction, "add_sink")
        return self._legacy_sink("Unnamed", sink, _cost("add_sink", cost))

    def sink_to(self, sink: Any, *, cost: Any = None) -> "DataStreamSink":
        """A Sink V2: compiled to a writer node ``Sink: Writer`` (``<name>: Writer``)."""
        check_function(sink, SinkFunction, "sink_to")
        transformation = SinkTransformation(
            id=self._env.new_transformation_id(), name="Sink", parallelism=self._env.parallelism,
            input=self._transformation, sink=sink, operator=Operator("sink", cost=_cost("sink_to", cost)),
            key_selector=self._key_selector(),
        )
        self._env.add_operator(transformation)
        return DataStreamSink(transformation)

    def _legacy_sink(self, name: str, sink: Any, cost: Cost | None) -> "DataStreamSink":
        transformation = LegacySinkTransformation(
            id=self._env.new_transformation_id(), name=name, parallelism=self._env.parallelism,
            input=self._transformation, sink=sink, operator=Operator("sink", cost=cost),
            key_selector=self._key_selector(),
        )
        self._env.add_operator(transformation)
        return DataStreamSink(transformation)


class DataStreamSink(_OperatorSettings):
    """What a sink method returns: name, uid, parallelism, max parallelism, slot sharing,
    disable_chaining (Flink's DataStreamSink has no start_new_chain nor buffer timeout)."""

    def __init__(self, transformation: Transformation) -> None:
        self._transformation = transformation

    @property
    def transformation(self) -> Transformation:
        return self._transformation


class KeyedStream(DataStream):
    """A stream partitioned by key (HASH); its operators are keyed."""

    def _key_selector(self) -> Any:
        return self._transformation.partitioner.key_selector

    def _partition(self, partitioner: PartitionerSpec) -> "DataStream":
        raise UnsupportedOperationException("Cannot override partitioning for KeyedStream.")

    def reduce(self, func: Any = None, *, cost: Any = None) -> DataStream:
        """``Keyed Reduce``: a rolling reduce per key; without a function each record is its
        key's new aggregate, as with ``lambda previous, record: record`` (a pure cost stage
        whose records keep their format: a synthetic row stays its size on the wire)."""
        if func is not None:
            check_function(func, ReduceFunction, "reduce")
        return self._one_input("Keyed Reduce", Operator("keyed_reduce", func, _cost("reduce", cost)))

    def sum(self, position_to_sum: int | str = 0, *, cost: Any = None) -> DataStream:
        """Running sum of a field (tuple index or dict key), as ``Keyed Aggregation``."""
        return self._one_input(
            "Keyed Aggregation", Operator("keyed_reduce", SumAggregator(position_to_sum), _cost("sum", cost))
        )

    def process(self, func: Any, *, cost: Any = None) -> DataStream:
        check_function(func, ProcessFunction, "process")
        return self._one_input("KeyedProcess", Operator("keyed_process", func, _cost("process", cost)))

    def count_window(self, size: int) -> "WindowedStream":
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"count_window: size must be an int >= 1, got {size!r}")
        return WindowedStream(self, size)


class WindowedStream:
    """``count_window(n)``: global windows purged every ``n`` records of a key."""

    def __init__(self, keyed_stream: KeyedStream, size: int) -> None:
        self._keyed_stream = keyed_stream
        self._size = size

    def reduce(self, func: Any, *, cost: Any = None) -> DataStream:
        check_function(func, ReduceFunction, "reduce")
        function_name = func.__name__ if hasattr(func, "__name__") else type(func).__name__
        description = (f"Window(GlobalWindows(trigger=NeverTrigger), PurgingTrigger, {function_name}, "
                       "PassThroughWindowFunction)")
        operator = Operator("count_window_reduce", func, _cost("reduce", cost),
                            description=description, window_size=self._size)
        return self._keyed_stream._one_input("GlobalWindows", operator)


class ConnectedStreams:
    """Two streams into one two-input operator (type numbers 1 and 2)."""

    def __init__(self, env: "StreamExecutionEnvironment", first: DataStream, second: DataStream) -> None:
        self._env = env
        self.first = first
        self.second = second

    def key_by(self, key_selector1: Any, key_selector2: Any) -> "ConnectedStreams":
        return ConnectedStreams(self._env, self.first.key_by(key_selector1), self.second.key_by(key_selector2))

    def _two_input(self, name: str, operator: Operator) -> DataStream:
        keyed = isinstance(self.first, KeyedStream) and isinstance(self.second, KeyedStream)
        transformation = TwoInputTransformation(
            id=self._env.new_transformation_id(), name=name, parallelism=self._env.parallelism,
            input1=self.first.transformation, input2=self.second.transformation, operator=operator,
            key_selector1=self.first._key_selector() if keyed else None,
            key_selector2=self.second._key_selector() if keyed else None,
        )
        self._env.add_operator(transformation)
        return DataStream(self._env, transformation)

    def map(self, func: CoMapFunction, *, cost: Any = None) -> DataStream:
        if not isinstance(func, CoMapFunction):
            raise TypeError(f"map: expected a CoMapFunction, got {func!r}")
        return self._two_input("Co-Map", Operator("co_map", func, _cost("map", cost)))

    def flat_map(self, func: CoFlatMapFunction, *, cost: Any = None) -> DataStream:
        if not isinstance(func, CoFlatMapFunction):
            raise TypeError(f"flat_map: expected a CoFlatMapFunction, got {func!r}")
        return self._two_input("Co-Flat Map", Operator("co_flat_map", func, _cost("flat_map", cost)))

    def process(self, func: CoProcessFunction, *, cost: Any = None) -> DataStream:
        if not isinstance(func, CoProcessFunction):
            raise TypeError(f"process: expected a CoProcessFunction, got {func!r}")
        return self._two_input("Co-Process", Operator("co_process", func, _cost("process", cost)))


class IterativeStream(DataStream):
    """The head of an iteration: operators applied to it see the input and the feedback."""

    def close_with(self, feedback_stream: DataStream) -> DataStream:
        """Close the loop with a stream computed from this iteration (Flink's checks)."""
        self._same_environment("close_with", feedback_stream)
        feedback = feedback_stream.transformation
        if self._transformation not in feedback.transitive_predecessors():
            raise UnsupportedOperationException(
                "Cannot close an iteration with a feedback DataStream that does not originate "
                "from said iteration."
            )
        if feedback.parallelism != self._transformation.parallelism:
            raise UnsupportedOperationException(
                "Parallelism of the feedback stream must match the parallelism of the original "
                f"stream. Parallelism of original stream: {self._transformation.parallelism}; "
                f"parallelism of feedback stream: {feedback.parallelism}. Parallelism can be "
                "modified using DataStream#setParallelism() method"
            )
        self._transformation.feedback_edges.append(feedback)
        return feedback_stream
