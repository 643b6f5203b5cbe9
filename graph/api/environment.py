"""``StreamExecutionEnvironment``: where a DataStream program starts, with PyFlink's names.

Durations (buffer timeout, checkpoint interval) are seconds or strings with units
("100ms"), not PyFlink's milliseconds: the project's unit convention (docs/internals.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable

from graph.api.workload import (
    CollectionSource,
    GeneratorSource,
    KeyDistribution,
    KEYED_RECORD_SIZE,
    SequenceSource,
)
from graph.errors import IllegalArgumentException, IllegalStateException
from graph.parallelism import check_max_parallelism, check_parallelism
from graph.transformations import Operator, SourceTransformation, Transformation
from graph.units import parse_duration

if TYPE_CHECKING:
    from graph.api.datastream import DataStream
    from graph.execution_graph import ExecutionGraph
    from graph.job_graph import JobGraph
    from graph.stream_graph import StreamGraph

DEFAULT_BUFFER_TIMEOUT = 0.1  # Flink's execution.buffer-timeout: 100 ms
#: Flink's CheckpointConfig.MINIMAL_CHECKPOINT_TIME: the shortest checkpoint interval and timeout (s).
MINIMAL_CHECKPOINT_TIME = 0.010


class RuntimeExecutionMode(Enum):
    """STREAMING: pipelined exchanges. BATCH: blocking exchanges, sorted keyed inputs.
    AUTOMATIC: BATCH if every source is bounded, else STREAMING."""

    STREAMING = "STREAMING"
    BATCH = "BATCH"
    AUTOMATIC = "AUTOMATIC"


class CheckpointingMode(Enum):
    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"


@dataclass
class CheckpointConfig:
    """Checkpoint settings; ``interval`` None means checkpointing is disabled."""

    interval: float | None = None
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    unaligned: bool = False
    aligned_checkpoint_timeout: float = 0.0
    force: bool = False
    #: Flink's execution.checkpointing.unaligned.forced: unaligned checkpoints also for jobs
    #: Flink would refuse them for (iterations, custom partitioners).
    force_unaligned: bool = False
    #: Flink's defaults: a checkpoint expires after 10 min, one at a time, no pause.
    timeout: float = 600.0
    max_concurrent: int = 1
    min_pause: float = 0.0
    #: Flink's execution.checkpointing.checkpoints-after-tasks-finish (FLIP-147, default true).
    checkpoints_after_tasks_finish: bool = True
    #: Flink's execution.checkpointing.tolerable-failed-checkpoints: consecutive failures
    #: (expired, declined) tolerated before the job fails (default 0: none).
    tolerable_failed_checkpoints: int = 0

    def is_checkpointing_enabled(self) -> bool:
        return self.interval is not None

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> "CheckpointConfig":
        self.unaligned = bool(enabled)
        return self

    def set_force_unaligned_checkpoints(self, force: bool = True) -> "CheckpointConfig":
        """Allow unaligned checkpoints despite iteration feedback or custom partitioners
        (Flink's execution.checkpointing.unaligned.forced). An edge that cannot take them
        (forward, rescale, broadcast, custom) still gets aligned barriers, as in Flink 2.3."""
        self.force_unaligned = bool(force)
        return self

    def is_force_unaligned_checkpoints(self) -> bool:
        return self.force_unaligned

    def set_aligned_checkpoint_timeout(self, timeout: str | float) -> "CheckpointConfig":
        self.aligned_checkpoint_timeout = _non_negative_duration("aligned checkpoint timeout", timeout)
        return self

    def set_checkpoint_timeout(self, timeout: str | float) -> "CheckpointConfig":
        seconds = _non_negative_duration("checkpoint timeout", timeout)
        if seconds < MINIMAL_CHECKPOINT_TIME:
            raise ValueError(f"checkpoint timeout must be at least 10 ms (Flink's minimum), got {timeout!r}")
        self.timeout = seconds
        return self

    def set_max_concurrent_checkpoints(self, n: int) -> "CheckpointConfig":
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"max concurrent checkpoints must be an int >= 1, got {n!r}")
        self.max_concurrent = n
        return self

    def set_min_pause_between_checkpoints(self, pause: str | float) -> "CheckpointConfig":
        self.min_pause = _non_negative_duration("min pause between checkpoints", pause)
        return self

    def set_tolerable_checkpoint_failure_number(self, n: int) -> "CheckpointConfig":
        """How many checkpoints may fail in a row (expired, declined) before the job fails."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"tolerable checkpoint failure number must be an int >= 0, got {n!r}")
        self.tolerable_failed_checkpoints = n
        return self

    def enable_checkpoints_after_tasks_finish(self, enabled: bool = True) -> "CheckpointConfig":
        """Keep checkpointing once some tasks have finished; a task that ends its input then
        waits for a final checkpoint before it finishes (Flink 2.x's default)."""
        self.checkpoints_after_tasks_finish = bool(enabled)
        return self

    def set_checkpointing_mode(self, mode: CheckpointingMode) -> "CheckpointConfig":
        if not isinstance(mode, CheckpointingMode):
            raise TypeError(f"checkpointing mode must be a CheckpointingMode, got {mode!r}")
        self.mode = mode
        return self


def _non_negative_duration(what: str, value: Any) -> float:
    seconds = parse_duration(value)
    if seconds < 0:
        raise ValueError(f"{what} must not be negative, got {value!r}")
    return seconds


class StreamExecutionEnvironment:
    """Collects transformations; compiles them on request. Transformation ids come from
    this environment's counter, starting at 1 (as the golden plans show)."""

    def __init__(self) -> None:
        self.parallelism = 1
        self.max_parallelism = -1
        self.buffer_timeout = DEFAULT_BUFFER_TIMEOUT
        self.chaining_enabled = True
        self.runtime_mode = RuntimeExecutionMode.STREAMING
        self.job_name: str | None = None
        self.transformations: list[Transformation] = []
        self._checkpoint_config = CheckpointConfig()
        self._next_id = 1

    @staticmethod
    def get_execution_environment() -> "StreamExecutionEnvironment":
        """A fresh environment on every call."""
        return StreamExecutionEnvironment()

    # -- configuration -----------------------------------------------------------------

    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        """Default parallelism of operators created after this call (default 1)."""
        self.parallelism = check_parallelism(parallelism, environment=True)
        return self

    def get_parallelism(self) -> int:
        return self.parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        self.max_parallelism = check_max_parallelism(max_parallelism, environment=True)
        return self

    def get_max_parallelism(self) -> int:
        return self.max_parallelism

    def set_buffer_timeout(self, timeout: str | float) -> "StreamExecutionEnvironment":
        """Output flush interval: seconds or "100ms"; 0 flushes every record, -1 only full
        buffers."""
        seconds = parse_duration(timeout)
        if seconds < 0 and seconds != -1:
            raise IllegalArgumentException("Timeout of buffer must be non-negative or -1")
        self.buffer_timeout = seconds
        return self

    def get_buffer_timeout(self) -> float:
        return self.buffer_timeout

    def disable_operator_chaining(self) -> "StreamExecutionEnvironment":
        self.chaining_enabled = False
        return self

    def is_chaining_enabled(self) -> bool:
        return self.chaining_enabled

    def set_runtime_mode(self, mode: RuntimeExecutionMode) -> "StreamExecutionEnvironment":
        if not isinstance(mode, RuntimeExecutionMode):
            raise TypeError(f"StreamExecutionEnvironment: runtime mode must be a RuntimeExecutionMode, got {mode!r}")
        self.runtime_mode = mode
        return self

    def enable_checkpointing(self, interval: str | float, mode: CheckpointingMode | None = None,
                             force: bool = False) -> "StreamExecutionEnvironment":
        """Checkpoint every ``interval`` (seconds or "3s"); ``force`` allows iterations
        (Flink's deprecated force flag)."""
        seconds = parse_duration(interval)
        if seconds < MINIMAL_CHECKPOINT_TIME:
            raise ValueError(f"StreamExecutionEnvironment: checkpoint interval must be at least 10 ms "
                             f"(Flink's minimum), got {interval!r}")
        self._checkpoint_config.interval = seconds
        self._checkpoint_config.force = bool(force)
        if mode is not None:
            self._checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    # -- sources -----------------------------------------------------------------------

    def from_sequence(self, start: int, end: int) -> "DataStream":
        """Parallel source of start..end, named ``Source: Sequence Source``."""
        for value in (start, end):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"from_sequence: start and end must be ints, got {value!r}")
        if start > end:
            raise ValueError(f"from_sequence: start {start} is after end {end}")
        return self._add_source("Sequence Source", SequenceSource(start, end))

    def from_collection(self, collection: Iterable[Any]) -> "DataStream":
        """Non-parallel source (p=1) of the elements, named ``Source: Collection Source``."""
        if isinstance(collection, (str, bytes)) or not hasattr(collection, "__iter__"):
            raise TypeError(f"from_collection: expected a collection, got {collection!r}")
        elements = tuple(collection)
        if not elements:
            raise ValueError("from_collection: the collection must not be empty")
        stream = self._add_source("Collection Source", CollectionSource(elements))
        return stream.set_parallelism(1)

    def from_generator(self, rate: float = 0, record_size: int = KEYED_RECORD_SIZE,
                       keys: KeyDistribution | None = None, count: int | None = None) -> "DataStream":
        """Parallel synthetic source named ``Source: Generator``: ``rate`` records/s per
        subtask (0 = as fast as downstream allows), fixed-width rows of ``record_size``
        bytes, keys from ``keys`` (uniform over 1024 by default), ``count`` records per
        subtask (None = unbounded)."""
        description = GeneratorSource(rate, record_size, keys or KeyDistribution(), count)
        return self._add_source("Generator", description)

    def _add_source(self, name: str, description: Any) -> "DataStream":
        from graph.api.datastream import DataStream

        transformation = SourceTransformation(
            id=self.new_transformation_id(), name=name, parallelism=self.parallelism,
            source=description, operator=Operator("source"),
        )
        return DataStream(self, transformation)

    # -- transformations ---------------------------------------------------------------

    def new_transformation_id(self) -> int:
        transformation_id = self._next_id
        self._next_id += 1
        return transformation_id

    def peek_next_transformation_id(self) -> int:
        return self._next_id

    def add_operator(self, transformation: Transformation) -> None:
        """Record a transformation the graph generator starts from (Flink's addOperator)."""
        self.transformations.append(transformation)

    # -- compilation -------------------------------------------------------------------

    def get_stream_graph(self) -> "StreamGraph":
        from graph.stream_graph_generator import StreamGraphGenerator

        if not self.transformations:
            raise IllegalStateException("No operators defined in streaming topology. Cannot execute.")
        return StreamGraphGenerator(self).generate()

    def get_job_graph(self) -> "JobGraph":
        from graph.streaming_job_graph_generator import create_job_graph

        return create_job_graph(self.get_stream_graph())

    def get_execution_graph(self) -> "ExecutionGraph":
        from graph.execution_graph import build_execution_graph

        return build_execution_graph(self.get_job_graph())

    def get_execution_plan(self) -> str:
        """Flink's ``getStreamingPlanAsJSON``."""
        from graph.plan_json import stream_graph_json

        return stream_graph_json(self.get_stream_graph())
