"""A partition request for a partition its TaskManager has not registered (yet): Flink 2.x's
server keeps it as a listener (`ResultPartitionManager`), expired by a checker that runs
every `partition-request-timeout` from the TaskManager's start and fails the requests older
than the timeout; the remote channel then retries at once while its backoff allows
(`RemoteInputChannel.increaseBackoff`: timeout added, below 2 x max backoff)."""

from __future__ import annotations

import pytest

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.environment import InputChannelDescriptor, NettyShuffleEnvironment
from shuffle.errors import PartitionNotFoundError
from shuffle.transport.sim_link import SimNetwork

CONFIG = NetworkConfig(partition_request_timeout=10.0, request_backoff_max=10.0)


async def _request_missing(nursery, config: NetworkConfig, request_at: float,
                           register_at: float | None = None):
    """A consumer requests a partition of a producer TaskManager (both started at time 0)
    at `request_at`; the producer registers it at `register_at` (None: never)."""
    network = SimNetwork(config.link_bandwidth, config.link_latency, config.socket_window)
    producer = NettyShuffleEnvironment(config, network)
    address = await producer.start(nursery, "producer")
    consumer = NettyShuffleEnvironment(config, network)
    await consumer.start(nursery, "consumer")
    gate = consumer.create_input_gate(0, "consumer", [InputChannelDescriptor("missing", 0, address)])
    await gate.setup()
    await kernel.sleep_until(request_at)
    await gate.request_partitions()
    if register_at is not None:
        await kernel.sleep_until(register_at)
        producer.create_result_partition("missing", 1)
    return gate.channels[0], producer


async def _time_of_failure(channel) -> float:
    while channel.error is None:
        await kernel.sleep(0.01)
    assert isinstance(channel.error, PartitionNotFoundError)
    return kernel.current_time()


async def test_a_request_fails_at_the_first_check_after_its_timeout_and_is_retried_once(sim_kernel):
    # Checks at 10, 20, 30 s: a request at 3 s is older than 10 s first at 20 s; the retry
    # made then is older than 10 s first at 40 s, and 20 s of backoff is 2 x max: it fails.
    async with kernel.open_nursery() as nursery:
        channel, _ = await _request_missing(nursery, CONFIG, request_at=3.0)
        assert 40.0 <= await _time_of_failure(channel) < 40.1
        nursery.cancel_scope.cancel()


async def test_a_request_answered_not_found_is_retried_and_served_once_registered(sim_kernel):
    async with kernel.open_nursery() as nursery:
        channel, producer = await _request_missing(nursery, CONFIG, request_at=3.0, register_at=25.0)
        await kernel.sleep(1.0)
        assert channel.error is None and channel.client is not None
        partition = producer.partition_manager.partitions[0]
        assert partition.subpartitions[0].read_view is not None  # the retry (at 20 s) got its view
        nursery.cancel_scope.cancel()


async def test_without_a_timeout_a_request_waits_for_its_partition(sim_kernel):
    config = NetworkConfig(partition_request_timeout=0.0)
    async with kernel.open_nursery() as nursery:
        channel, producer = await _request_missing(nursery, config, request_at=3.0, register_at=500.0)
        await kernel.sleep(1.0)
        assert channel.error is None
        assert producer.partition_manager.partitions[0].subpartitions[0].read_view is not None
        nursery.cancel_scope.cancel()


async def _request_missing_locally(nursery, register_at: float | None):
    """A local channel requests, at time 0, a partition of its own TaskManager that is
    registered at `register_at` (None: never)."""
    network = SimNetwork(CONFIG.link_bandwidth, CONFIG.link_latency, CONFIG.socket_window)
    env = NettyShuffleEnvironment(NetworkConfig(), network)
    address = await env.start(nursery, "tm")
    gate = env.create_input_gate(0, "consumer", [InputChannelDescriptor("missing", 0, address)])
    await gate.setup()
    nursery.start_soon(gate.request_partitions)
    if register_at is not None:
        await kernel.sleep_until(register_at)
        env.create_result_partition("missing", 1)
    return gate.channels[0]


async def test_a_local_channel_retries_with_exponential_backoff(sim_kernel):
    # Flink's LocalInputChannel: attempts at 0, 0.1, 0.3, 0.7 s (backoff 100 ms doubling).
    async with kernel.open_nursery() as nursery:
        channel = await _request_missing_locally(nursery, register_at=0.5)
        await kernel.sleep_until(0.69)
        assert channel.view is None and channel.error is None
        await kernel.sleep_until(0.71)
        assert channel.view is not None
        nursery.cancel_scope.cancel()


async def test_a_local_channel_fails_once_its_backoff_is_exhausted(sim_kernel):
    # 100 + 200 + ... + 6400 + 10000 ms of backoff, then PartitionNotFound.
    async with kernel.open_nursery() as nursery:
        channel = await _request_missing_locally(nursery, register_at=None)
        assert 22.7 <= await _time_of_failure(channel) < 22.8
        nursery.cancel_scope.cancel()


def test_a_request_made_a_whole_number_of_timeouts_after_the_start_outlives_the_check_at_its_timeout():
    # Flink fails a listener strictly older than the timeout; 0.7 + 0.1 is 0.7999... in floats
    from shuffle.partition.result_partition_manager import ResultPartitionManager

    async def main() -> float:
        manager = ResultPartitionManager(0.1)
        manager.start_listener_timeout_checks()
        await kernel.sleep_until(0.7)
        assert not await manager.wait_for_partition("missing")
        return kernel.current_time()

    assert kernel.run(main, mode="sim") == pytest.approx(0.9)
