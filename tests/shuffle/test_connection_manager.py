"""One shared connection per producer TaskManager, replaced after it failed (spec 3.3)."""

import pytest

from shuffle.config import NetworkConfig
from shuffle.environment import InputChannelDescriptor
from shuffle.errors import PartitionConnectionError, RemoteTransportError


async def test_a_failed_connection_is_replaced_not_reused(credit_flow):
    # Flink's PartitionRequestClientFactory drops a client whose handler has a channel error
    # and connects anew; reusing it fails (or strands) every later channel.
    h = await credit_flow(config=NetworkConfig(buffer_size=4096))
    manager = h.consumer.connection_manager
    address = h.channel(0).producer_address
    failed = manager.client(address)
    (server,) = h.producer.connection_manager._server_handlers
    await server.stream.send_all(b"\x00\x00\x00\x10" + b"\x00" * 12)
    await h.settle()
    assert failed.channel_error is not None
    fresh = await manager.create_partition_request_client(address)
    assert fresh is not failed and fresh.channel_error is None


async def test_a_partition_request_to_a_task_manager_nobody_serves_fails_with_flinks_exceptions(credit_flow):
    # Flink: PartitionRequestClientFactory.connect wraps the connect error in a
    # RemoteTransportException, RemoteInputChannel.requestSubpartitions that in a
    # PartitionConnectionException (the consumer of a dead TaskManager's partition).
    h = await credit_flow()
    gate = h.consumer.create_input_gate(1, "orphan", [InputChannelDescriptor("lost-partition", 0, "nowhere")])
    await gate.setup()
    with pytest.raises(PartitionConnectionError,
                       match=r"^Connection for partition lost-partition not reachable\.$") as info:
        await gate.channels[0].request_subpartition()
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTransportError) and str(cause) == (
        "Connecting to remote task manager 'nowhere' has failed. This might indicate that the remote task manager "
        "has been lost.")
    gate.close()
