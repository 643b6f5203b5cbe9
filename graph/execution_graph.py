"""ExecutionGraph: the parallel subtasks of each JobVertex and how their result
partitions and input gates connect, as Flink's ``EdgeManagerBuildUtil`` and deployment
descriptors wire them. The runtime deploys from this."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from graph.errors import JobException
from graph.job_graph import IntermediateDataSet, JobEdge, JobGraph, JobVertex


@dataclass(eq=False)
class IntermediateResultPartition:
    """What one producer subtask writes for one data set: ``num_subpartitions``
    subpartitions; ``consumers[i]`` are the subtasks reading subpartition i (one, unless
    a BLOCKING data set is reused by several consumer vertices)."""

    partition_id: str
    data_set: IntermediateDataSet
    producer: "ExecutionVertex"
    num_subpartitions: int = 0
    consumers: list[list["ExecutionVertex"]] = field(default_factory=list)

    @property
    def partition_number(self) -> int:
        return self.producer.subtask_index

    @property
    def result_partition_type(self) -> str:
        return self.data_set.result_partition_type

    def __repr__(self) -> str:
        return f"IntermediateResultPartition({self.partition_id}, subpartitions={self.num_subpartitions})"


class ConsumedPartitionGroup(Sequence[tuple[IntermediateResultPartition, int]]):
    """The channels of one subtask's input gate on an all-to-all edge (Flink's
    ``ConsumedPartitionGroup`` with the subtask's subpartition): ``(partition,
    subpartition_index)`` for every producer's partition, in producer order. The consumers of
    the edge share one list of partitions, so an N x N edge keeps N entries, not N^2 pairs."""

    __slots__ = ("partitions", "subpartition_index")

    def __init__(self, partitions: list[IntermediateResultPartition], subpartition_index: int) -> None:
        self.partitions = partitions
        self.subpartition_index = subpartition_index

    def __len__(self) -> int:
        return len(self.partitions)

    @overload
    def __getitem__(self, index: int) -> tuple[IntermediateResultPartition, int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[IntermediateResultPartition, int]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [(partition, self.subpartition_index) for partition in self.partitions[index]]
        return self.partitions[index], self.subpartition_index

    def __iter__(self) -> Iterator[tuple[IntermediateResultPartition, int]]:
        subpartition_index = self.subpartition_index
        return ((partition, subpartition_index) for partition in self.partitions)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same pairs (as the list it stands for)."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ConsumedPartitionGroup({[p.partition_id for p in self.partitions]}, subpartition={self.subpartition_index})"


@dataclass(eq=False)
class ExecutionVertex:
    """Subtask ``subtask_index`` of ``job_vertex``. ``input_gates[g]`` lists, in channel
    order, the ``(partition, subpartition_index)`` read through input gate ``g``."""

    job_vertex: JobVertex
    subtask_index: int
    produced_partitions: list[IntermediateResultPartition] = field(default_factory=list)
    input_gates: list[Sequence[tuple[IntermediateResultPartition, int]]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return subtask_name(self.job_vertex, self.subtask_index)

    def __repr__(self) -> str:
        return f"ExecutionVertex({self.name!r})"


@dataclass
class ExecutionGraph:
    """``task_vertices[job_vertex.id]`` are the subtasks of a vertex, in subtask order;
    ``partitions`` maps partition ids to partitions."""

    job_graph: JobGraph
    task_vertices: dict[str, list[ExecutionVertex]]
    partitions: dict[str, IntermediateResultPartition]

    def execution_vertices(self, job_vertex: JobVertex | str) -> list[ExecutionVertex]:
        """Subtasks of a vertex given as object, id or chained name."""
        if isinstance(job_vertex, str):
            job_vertex = self.job_graph.vertex(job_vertex)
        return self.task_vertices[job_vertex.id]

    @property
    def all_execution_vertices(self) -> list[ExecutionVertex]:
        return [ev for vertex in self.job_graph.vertices for ev in self.task_vertices[vertex.id]]


def subtask_name(vertex: JobVertex, subtask_index: int) -> str:
    """Flink's task name with subtask: ``Map -> Filter (2/4)``."""
    return f"{vertex.name} ({subtask_index + 1}/{vertex.parallelism})"


def pointwise_consumers(num_producers: int, num_consumers: int) -> list[range]:
    """For each producer subtask, the consumer subtasks it feeds (Flink's
    ``connectPointwise``): S >= T: consumer i reads producers [floor(i*S/T),
    floor((i+1)*S/T)); S < T: producer p feeds [ceil(p*T/S), ceil((p+1)*T/S))."""
    if num_producers < num_consumers:
        return [range(-(-p * num_consumers // num_producers), -(-(p + 1) * num_consumers // num_producers))
                for p in range(num_producers)]
    feeds = [range(0)] * num_producers
    for consumer in range(num_consumers):
        for producer in range(consumer * num_producers // num_consumers,
                              (consumer + 1) * num_producers // num_consumers):
            feeds[producer] = range(consumer, consumer + 1)
    return feeds


def _check_parallelism(vertex: JobVertex) -> None:
    """Flink's ``ExecutionJobVertex`` check."""
    if vertex.parallelism > vertex.max_parallelism:
        raise JobException(
            f"Vertex {vertex.name}'s parallelism ({vertex.parallelism}) is higher than the max "
            f"parallelism ({vertex.max_parallelism}). Please lower the parallelism or increase "
            "the max parallelism."
        )


def build_execution_graph(job_graph: JobGraph) -> ExecutionGraph:
    """Expand every JobVertex into subtasks and wire partitions to input gates."""
    task_vertices: dict[str, list[ExecutionVertex]] = {}
    partitions: dict[str, IntermediateResultPartition] = {}
    for vertex in job_graph.vertices:
        _check_parallelism(vertex)
        task_vertices[vertex.id] = [ExecutionVertex(vertex, i) for i in range(vertex.parallelism)]
    for vertex in job_graph.vertices:
        for data_set in vertex.produced_data_sets:
            for producer in task_vertices[vertex.id]:
                partition = IntermediateResultPartition(f"{data_set.id}#{producer.subtask_index}", data_set, producer)
                producer.produced_partitions.append(partition)
                partitions[partition.partition_id] = partition
    for vertex in job_graph.vertices:
        for edge in vertex.inputs:
            _connect(edge, task_vertices)
    return ExecutionGraph(job_graph, task_vertices, partitions)


def _connect(edge: JobEdge, task_vertices: dict[str, list[ExecutionVertex]]) -> None:
    """Wire one JobEdge: ALL_TO_ALL reads subpartition i of every producer; POINTWISE
    reads the producers that feed it, subpartition ``i % numConsumers`` as
    Flink's ``computeConsumedSubpartitionRange`` does. An all-to-all edge's partitions share
    their consumer lists and its consumers their list of partitions, as Flink's
    ``ConsumerVertexGroup`` and ``ConsumedPartitionGroup`` do."""
    producers = task_vertices[edge.source_vertex.id]
    consumers = task_vertices[edge.target.id]
    data_set_index = edge.source_vertex.produced_data_sets.index(edge.source)
    partitions = [producer.produced_partitions[data_set_index] for producer in producers]
    if edge.distribution_pattern == "ALL_TO_ALL" and not any(partition.consumers for partition in partitions):
        shared = [[consumer] for consumer in consumers]
        for partition in partitions:
            partition.num_subpartitions = len(consumers)
            partition.consumers = shared
        for consumer in consumers:
            consumer.input_gates.append(ConsumedPartitionGroup(partitions, consumer.subtask_index))
        return
    if edge.distribution_pattern == "ALL_TO_ALL":
        feeds = [range(len(consumers))] * len(producers)
    else:
        feeds = pointwise_consumers(len(producers), len(consumers))
    for partition, readers in zip(partitions, feeds):
        if not partition.consumers:
            partition.num_subpartitions = len(readers)
            partition.consumers = [[] for _ in readers]
        else:  # read by another edge already: its lists may be shared with other partitions
            partition.consumers = [list(readers_of) for readers_of in partition.consumers]
        for reader in readers:
            partition.consumers[reader % len(readers)].append(consumers[reader])
    for consumer in consumers:
        consumer.input_gates.append([
            (partition, consumer.subtask_index % len(readers))
            for partition, readers in zip(partitions, feeds)
            if consumer.subtask_index in readers
        ])
