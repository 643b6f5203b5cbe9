"""What one set-up, idle remote channel costs at its two ends, object by object.

A wide job has N x N channels that mostly wait: every reference an idle channel's objects
hold costs 8 bytes per channel, so what is the same for a whole gate, partition or
connection (configuration, tracer, pools, managers, partition id) is read through the
gate or partition instead of copied into each channel, and what only traces and errors
ask for (names) is made when asked. `shufflesim bench idle_channel_bytes` measures the
whole (with the receiver id, dict entries and list slots); this test keeps the objects'
layouts from growing back unnoticed.
"""

import sys

from shuffle.config import NetworkConfig
from shuffle.consumer.remote_input_channel import RemoteInputChannel

#: Bytes per object (CPython 3.11, 64-bit: 32 bytes of header and GC links, 8 per slot).
#: RemoteInputChannel's 21st slot is Flink's totalQueueSizeInBytes: `inputQueueSize` is a
#: running count that a polled announcement and a release leave apart from what is queued.
BUDGET = {"RemoteInputChannel": 32 + 8 * 21, "BufferManager": 32 + 8 * 7, "PipelinedSubpartition": 32 + 8 * 13,
          "PipelinedSubpartitionView": 32 + 8 * 3, "CreditBasedSequenceNumberingViewReader": 32 + 8 * 8}


async def test_an_idle_remote_channel_holds_only_its_own_state(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    channel = h.channel(0)
    assert isinstance(channel, RemoteInputChannel)
    reader = h.producer.connection_manager.find_reader(channel.receiver_id)
    objects = [channel, channel.buffer_manager, reader.view.subpartition, reader.view, reader]
    sizes = {type(o).__name__: sys.getsizeof(o) for o in objects}
    assert sizes == BUDGET
    # shared values are the gate's and the partition's, not copies
    assert channel.gate.credit_based and reader.view.subpartition.parent.partition_id == channel.partition_id
