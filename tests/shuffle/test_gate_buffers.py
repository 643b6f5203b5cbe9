"""An input gate's buffers as released Flink has them (spec 1.5, `SingleInputGateFactory`):
a floating pool sized over all channels (min `N*B + 1 - e*N`, max `N*B + F - e*N`) and `e`
exclusive buffers per remote channel, taken as unpooled segments of the NetworkBufferPool;
local channels take none."""

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
    local_env.create_result_partition("local", 1)
    gate = local_env.create_input_gate(0, "consumer", [InputChannelDescriptor("local", 0, local_address),
                                                       InputChannelDescriptor("remote", 0, remote_address)])
    await gate.setup()
    await gate.request_partitions()
    return gate, remote, local_env


async def test_mixed_gate_floats_eight_buffers_and_its_remote_channel_holds_two_exclusive(sim_kernel):
    async with kernel.open_nursery() as nursery:
        gate, remote, env = await _mixed_gate(nursery)
        local_channel, remote_channel = gate.channels
        assert isinstance(local_channel, LocalInputChannel) and isinstance(remote_channel, RemoteInputChannel)
        # N = 2 (the local channel counts in the spec): floating min 2*2+1-2*2 = 1, max 2*2+8-2*2 = 8
        assert (gate.buffer_pool.min_buffers, gate.buffer_pool.max_buffers) == (1, 8)
        assert remote_channel.initial_credit == 2 and remote_channel.buffer_manager.num_free_exclusive == 2
        # required: the local partition's 2, the floating pool's 1, the remote channel's 2
        assert env.network_pool.num_total_required_buffers == 5
        for _ in range(14):
            await remote.emit_record(bytes(CONFIG.buffer_size), 0)
        await kernel.sleep(0.05)
        assert len(remote_channel.received) == 10  # 2 exclusive + 8 floating, nothing consumed
        assert gate.exclusive_buffers_usage() == (2, 2)
        assert gate.floating_buffers_usage() == (8, 8)
        nursery.cancel_scope.cancel()


async def test_exclusive_buffers_beyond_the_memory_fail_the_gate_at_once(sim_kernel):
    # 4 segments: the local partition requires 2, the floating pool 1; the remote channel's 2
    # exclusive segments cannot be required (Flink's tryRedistributeBuffers, no waiting).
    config = NetworkConfig(buffer_size=4096, network_memory=4 * 4096)
    async with kernel.open_nursery() as nursery:
        with pytest.raises(InsufficientBuffersError, match="^Insufficient number of network buffers: "
                                                           "required 2, but only 1 available"):
            await _mixed_gate(nursery, config)
        assert kernel.current_time() == 0
        nursery.cancel_scope.cancel()


async def test_exclusive_segments_held_by_another_pool_are_waited_for_until_the_timeout(sim_kernel):
    config = NetworkConfig(buffer_size=4096, network_memory=12 * 4096, exclusive_buffers_request_timeout=2.0)
    network = SimNetwork(config.link_bandwidth, config.link_latency, config.socket_window)
    async with kernel.open_nursery() as nursery:
        remote_env = NettyShuffleEnvironment(config, network)
        remote_address = await remote_env.start(nursery, "tm-0")
        env = NettyShuffleEnvironment(config, network)
        await env.start(nursery, "tm-1")
        hog = env.create_result_partition("hog", 1)  # takes every segment (size + overdraft)
        held = [hog.buffer_pool.request_buffer_builder(0) for _ in range(12)]
        assert env.network_pool.num_available_segments == 0
        gate = env.create_input_gate(0, "consumer", [InputChannelDescriptor("remote", 0, remote_address)])
        required = env.network_pool.num_total_required_buffers
        with pytest.raises(InsufficientBuffersError, match="^Timeout triggered when requesting exclusive buffers"):
            await gate.setup()
        assert kernel.current_time() == pytest.approx(2.0)
        # the floating pool's 1 stays required until the gate is closed; the channel's 2 are given back
        assert env.network_pool.num_total_required_buffers == required + 1
        for builder in held:
            builder.close()
        nursery.cancel_scope.cancel()
