"""shufflesim's compiler: DataStream API -> Transformations -> StreamGraph -> JobGraph ->
ExecutionGraph, exactly as Apache Flink 2.3.0 compiles a program (docs/internals.md)."""

from graph.api.datastream import (
    ConnectedStreams,
    DataStream,
    DataStreamSink,
    IterativeStream,
    KeyedStream,
    WindowedStream,
)
from graph.api.environment import (
    CheckpointConfig,
    CheckpointingMode,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from graph.api.functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    OutputTag,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    SinkFunction,
    SumAggregator,
)
from graph.api.sinks import CollectSink, DiscardingSink, PrintSink
from graph.api.workload import (
    CollectionSource,
    Cost,
    GeneratorSource,
    KeyDistribution,
    SequenceSource,
)
from graph.dot import to_dot
from graph.errors import (
    IllegalArgumentException,
    IllegalStateException,
    JobException,
    UnsupportedOperationException,
)
from graph.execution_graph import (
    ExecutionGraph,
    ExecutionVertex,
    IntermediateResultPartition,
    build_execution_graph,
)
from graph.job_graph import IntermediateDataSet, JobEdge, JobGraph, JobVertex
from graph.partitioners import PartitionerSpec
from graph.plan_json import plan_json
from graph.render import render_plan
from graph.stream_graph import StreamEdge, StreamGraph, StreamNode
from graph.units import parse_bandwidth, parse_duration, parse_size

__all__ = [
    "CheckpointConfig",
    "CheckpointingMode",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "CollectSink",
    "CollectionSource",
    "ConnectedStreams",
    "Cost",
    "DataStream",
    "DataStreamSink",
    "DiscardingSink",
    "ExecutionGraph",
    "ExecutionVertex",
    "FilterFunction",
    "FlatMapFunction",
    "Function",
    "GeneratorSource",
    "IllegalArgumentException",
    "IllegalStateException",
    "IntermediateDataSet",
    "IntermediateResultPartition",
    "IterativeStream",
    "JobEdge",
    "JobException",
    "JobGraph",
    "JobVertex",
    "KeyDistribution",
    "KeySelector",
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "OutputTag",
    "Partitioner",
    "PartitionerSpec",
    "PrintSink",
    "ProcessFunction",
    "ReduceFunction",
    "RuntimeExecutionMode",
    "SequenceSource",
    "SinkFunction",
    "StreamEdge",
    "StreamExecutionEnvironment",
    "StreamGraph",
    "StreamNode",
    "SumAggregator",
    "UnsupportedOperationException",
    "WindowedStream",
    "build_execution_graph",
    "parse_bandwidth",
    "parse_duration",
    "parse_size",
    "plan_json",
    "render_plan",
    "to_dot",
]
