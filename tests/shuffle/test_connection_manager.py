"""One shared connection per producer TaskManager, replaced after it failed (spec 3.3)."""

from shuffle.config import NetworkConfig


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
