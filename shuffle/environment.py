"""NettyShuffleEnvironment: one TaskManager's network stack.

Owns the NetworkBufferPool, the ResultPartitionManager and the ConnectionManager, and
builds the producer and consumer objects a task needs: result partitions, and input gates
whose channels are local (producer in this TaskManager) or remote.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.consumer.local_input_channel import LocalInputChannel
from shuffle.consumer.remote_input_channel import RemoteInputChannel
from shuffle.consumer.single_input_gate import SingleInputGate, gate_buffers_spec
from shuffle.netty.connection_manager import ConnectionManager
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.result_partition_manager import ResultPartitionManager
from shuffle.partition.result_partition_type import ResultPartitionType
from shuffle.trace import NULL_TRACER, Tracer
from shuffle.transport import Transport


@dataclass(frozen=True, slots=True)
class InputChannelDescriptor:
    """Where one input channel reads from: a producer's partition, subpartition and TaskManager."""

    partition_id: str
    subpartition_index: int
    producer_address: Any


class NettyShuffleEnvironment:
    def __init__(self, config: NetworkConfig, transport: Transport, tracer: Tracer = NULL_TRACER) -> None:
        self.config = config
        self.tracer = tracer
        self.network_pool = NetworkBufferPool(config.num_network_buffers, config.buffer_size,
                                              config.exclusive_buffers_request_timeout)
        self.partition_manager = ResultPartitionManager(config.partition_request_timeout)
        self.connection_manager = ConnectionManager(transport, self.partition_manager, config, tracer)
        #: Remote channels' receiver ids, drawn in order: a restarted task's channels get new
        #: ones, so the buffers a producer still sends to its predecessors find no channel.
        self._receiver_ids = itertools.count()

    @property
    def address(self) -> Any:
        return self.connection_manager.address

    async def start(self, nursery: Any, address: Any) -> Any:
        """Serve partitions at `address` (tasks of `nursery`); returns the bound address."""
        self.partition_manager.start_listener_timeout_checks()
        return await self.connection_manager.start(nursery, address)

    def create_result_partition(self, partition_id: str, num_subpartitions: int,
                                partition_type: str | ResultPartitionType = "PIPELINED_BOUNDED",
                                owner_name: str = "") -> ResultPartition:
        """A registered partition with its buffer pool."""
        if isinstance(partition_type, str):
            partition_type = ResultPartitionType.of(partition_type)
        partition = ResultPartition(partition_id, num_subpartitions, partition_type, self.config, owner_name)
        partition.setup(self.network_pool)
        self.partition_manager.register_result_partition(partition)
        return partition

    def create_input_gate(self, gate_index: int, owner_name: str,
                          channels: Sequence[InputChannelDescriptor], blocking: bool = False) -> SingleInputGate:
        """A gate with one channel per descriptor; call `await gate.setup()` before requesting."""
        if not channels:
            raise ValueError(f"input gate {gate_index} of {owner_name} has no channels")
        cfg = self.config
        gate = SingleInputGate(gate_index, owner_name, cfg, self.network_pool, blocking, self.tracer,
                               self.connection_manager, self.partition_manager)
        # Exclusive buffers per remote channel; in pre-credit mode ("tcp") the channels keep
        # the same buffer budget but announce no credit.
        exclusive = gate_buffers_spec(len(channels), cfg, blocking).exclusive_per_channel
        for index, descriptor in enumerate(channels):
            if descriptor.producer_address == self.address:
                channel = LocalInputChannel(gate, index, descriptor.partition_id, descriptor.subpartition_index)
            else:
                channel = RemoteInputChannel(gate, index, descriptor.partition_id, descriptor.subpartition_index,
                                             descriptor.producer_address, exclusive, next(self._receiver_ids))
            gate.add_channel(channel)
        return gate

    async def close(self) -> None:
        """Release partitions and close connections."""
        self.partition_manager.release_all()
        await self.connection_manager.close()
