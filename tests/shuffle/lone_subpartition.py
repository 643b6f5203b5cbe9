"""A subpartition for tests of one subpartition: the only one of its ResultPartition `"p"`
(a subpartition reads its partition's id, configuration and channel state writer)."""

from shuffle.config import NetworkConfig
from shuffle.partition.pipelined_subpartition import PipelinedSubpartition
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.result_partition_type import ResultPartitionType


def lone_subpartition() -> PipelinedSubpartition:
    return ResultPartition("p", 1, ResultPartitionType.of("PIPELINED_BOUNDED"), NetworkConfig()).subpartitions[0]
