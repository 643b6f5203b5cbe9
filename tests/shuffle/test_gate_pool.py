"""An input gate's one buffer pool (Flink 2.x, `SingleInputGateFactory`, spec 1.5): it holds
the remote channels' exclusive buffers and the floating ones, and is sized by all channels,
local ones included."""

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
    await gate.setup()
    await gate.request_partitions()
    return gate, remote, (remote_env, local_env)


async def test_remote_channel_of_a_mixed_gate_floats_the_local_channels_share(sim_kernel):
    async with kernel.open_nursery() as nursery:
        gate, remote, envs = await _mixed_gate(nursery)
        local_channel, remote_channel = gate.channels
        assert isinstance(local_channel, LocalInputChannel) and isinstance(remote_channel, RemoteInputChannel)
        # min 2*2+1, max 2*2+8: the local channel's two buffers float for the remote one
        assert (gate.buffer_pool.min_buffers, gate.buffer_pool.num_buffers) == (5, 12)
        assert remote_channel.initial_credit == 2 and len(remote_channel.buffer_manager.exclusive) == 2
        for _ in range(14):
            await remote.emit_record(bytes(CONFIG.buffer_size), 0)
        await kernel.sleep(0.05)
        assert len(remote_channel.received) == 12  # 2 exclusive + 10 floating, nothing consumed
        usage = gate.buffers_usage()
        assert (usage.used, usage.total, usage.exclusive_used, usage.exclusive_total) == (12, 12, 2, 2)
        assert (usage.floating_used, usage.floating_total) == (10, 10)
        gate.close()
        remote.release()
        for env in envs:
            await env.close()
        nursery.cancel_scope.cancel()
    for env in envs:
        assert env.network_pool.num_available_segments == env.network_pool.total_segments


async def test_gate_requires_its_exclusive_buffers_up_front(sim_kernel):
    # 6 segments: the local partition requires 2, the gate 2*2+1 = 5 (its remote channel's
    # exclusive buffers included): the gate's pool fails, before any channel asks.
    config = NetworkConfig(buffer_size=4096, network_memory=6 * 4096)
    async with kernel.open_nursery() as nursery:
        with pytest.raises(InsufficientBuffersError, match="required 5, but only 4 available"):
            await _mixed_gate(nursery, config)
        nursery.cancel_scope.cancel()


async def test_exclusive_buffers_wait_for_segments_held_elsewhere_then_time_out(sim_kernel):
    config = NetworkConfig(buffer_size=4096, network_memory=12 * 4096, exclusive_buffers_request_timeout=1.0)
    network = SimNetwork(config.link_bandwidth, config.link_latency, config.socket_window)
    async with kernel.open_nursery() as nursery:
        remote_env = NettyShuffleEnvironment(config, network)
        remote_address = await remote_env.start(nursery, "tm-0")
        env = NettyShuffleEnvironment(config, network)
        await env.start(nursery, "tm-1")
        partition = env.create_result_partition("hog", 1)  # takes every segment (size + overdraft)
        held = [partition.buffer_pool.request_buffer_builder(0) for _ in range(12)]
        assert env.network_pool.num_available_segments == 0
        gate = env.create_input_gate(0, "consumer", [InputChannelDescriptor("remote", 0, remote_address)])
        with pytest.raises(InsufficientBuffersError, match="exclusive-buffers-request-timeout"):
            await gate.setup()
        assert kernel.current_time() == pytest.approx(1.0)
        gate.close()
        for builder in held:
            builder.close()
        partition.release()
        assert env.network_pool.num_available_segments == env.network_pool.total_segments
        nursery.cancel_scope.cancel()
