"""An input gate's one buffer pool (Flink 2.x, `SingleInputGateFactory`, spec 1.5): it holds
the remote channels' exclusive buffers and the floating ones, and is sized by the remote
channels (Flink's `SingleInputGateTest`: expected `2 * non-local + 1`, max `2 * non-local + 8`)."""

import pytest

from shuffle import kernel
from shuffle.buffer.network_buffer_pool import InsufficientBuffersError
from shuffle.config import NetworkConfig
from shuffle.consumer.local_input_channel import LocalInputChannel
from shuffle.consumer.remote_input_channel import RemoteInputChannel
from shuffle.environment import InputChannelDescriptor, NettyShuffleEnvironment
from shuffle.transport.sim_link import SimNetwork

CONFIG = NetworkConfig(buffer_size=4096)


async def _mixed_gate(nursery, config=CONFIG):
    """A gate on tm-1 reading a local partition (channel 0) and one on tm-0 (channel 1)."""
    network = SimNetwork(config.link_bandwidth, config.link_latency, config.socket_window)
    remote_env = NettyShuffleEnvironment(config, network)
    remote_address = await remote_env.start(nursery, "tm-0")
    local_env = NettyShuffleEnvironment(config, network)
    local_address = await local_env.start(nursery, "tm-1")
    remote = remote_env.create_result_partition("remote", 1)
    local = local_env.create_result_partition("local", 1)
    gate = local_env.create_input_gate(0, "consumer", [InputChannelDescriptor("local", 0, local_address),
                                                       InputChannelDescriptor("remote", 0, remote_address)])
    gate.setup()
    await gate.request_partitions()
    return gate, remote, (remote_env, local_env)


async def test_remote_channel_of_a_mixed_gate_floats_the_local_channels_share(sim_kernel):
    async with kernel.open_nursery() as nursery:
        gate, remote, envs = await _mixed_gate(nursery)
        local_channel, remote_channel = gate.channels
        assert isinstance(local_channel, LocalInputChannel) and isinstance(remote_channel, RemoteInputChannel)
        # min 2*1+1, max 2*1+8: the local channel reads the producer's buffers, not the gate's
        assert (gate.buffer_pool.min_buffers, gate.buffer_pool.num_buffers) == (3, 10)
        assert remote_channel.initial_credit == 2 and len(remote_channel.buffer_manager.exclusive) == 2
        for _ in range(14):
            await remote.emit_record(bytes(CONFIG.buffer_size), 0)
        await kernel.sleep(0.05)
        assert len(remote_channel.received) == 10  # 2 exclusive + 8 floating, nothing consumed
        usage = gate.buffers_usage()
        assert (usage.used, usage.total, usage.exclusive_used, usage.exclusive_total) == (10, 10, 2, 2)
        assert (usage.floating_used, usage.floating_total) == (8, 8)
        gate.close()
        remote.release()
        for env in envs:
            await env.close()
        nursery.cancel_scope.cancel()
    for env in envs:
        assert env.network_pool.num_available_segments == env.network_pool.total_segments


async def test_gate_requires_its_exclusive_buffers_up_front(sim_kernel):
    # 4 segments: the local partition requires 2, the gate 2*1+1 = 3 (its remote channel's
    # exclusive buffers included): the gate's pool fails, before any channel asks.
    config = NetworkConfig(buffer_size=4096, network_memory=4 * 4096)
    async with kernel.open_nursery() as nursery:
        with pytest.raises(InsufficientBuffersError, match="required 3, but only 2 available"):
            await _mixed_gate(nursery, config)
        nursery.cancel_scope.cancel()


async def test_exclusive_buffers_held_elsewhere_are_not_waited_for(sim_kernel):
    """Flink 2.x requests exclusive segments without blocking: a channel whose gate pool
    cannot give them right now starts without them (no credit) and reads through floating
    buffers once the other pool gives its segments back."""
    config = NetworkConfig(buffer_size=4096, network_memory=12 * 4096)
    network = SimNetwork(config.link_bandwidth, config.link_latency, config.socket_window)
    async with kernel.open_nursery() as nursery:
        remote_env = NettyShuffleEnvironment(config, network)
        remote_address = await remote_env.start(nursery, "tm-0")
        env = NettyShuffleEnvironment(config, network)
        await env.start(nursery, "tm-1")
        hog = env.create_result_partition("hog", 1)  # takes every segment (size + overdraft)
        held = [hog.buffer_pool.request_buffer_builder(0) for _ in range(12)]
        assert env.network_pool.num_available_segments == 0
        producer = remote_env.create_result_partition("remote", 1)
        gate = env.create_input_gate(0, "consumer", [InputChannelDescriptor("remote", 0, remote_address)])
        gate.setup()
        (channel,) = gate.channels
        assert gate.buffer_pool.num_buffers >= 3
        assert (len(channel.buffer_manager.exclusive), channel.initial_credit) == (0, 0)
        await gate.request_partitions()
        for builder in held:
            builder.close()
        for _ in range(5):
            await producer.emit_record(bytes(config.buffer_size), 0)
        producer.flush_all()
        received = 0
        while received < 5:
            await gate.availability.wait()
            if (item := gate.poll_next()) is not None:
                received += 1
                item.buffer.recycle()
        assert len(channel.buffer_manager.exclusive) == 0  # never made up: floating ones serve
        gate.close()
        producer.release()
        hog.release()
        await env.close()
        await remote_env.close()
        nursery.cancel_scope.cancel()
