"""A task's input buffer gauges over its gates, as Flink's AbstractBuffersUsageGauge: per gate
used and total, summed over the task's gates, then one ratio (0 when the total is 0);
`inPoolUsage` (CreditBasedInputBuffersUsageGauge) adds the exclusive and floating figures."""

from types import SimpleNamespace

import pytest

from shuffle.buffer.buffer import Buffer
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.config import NetworkConfig
from shuffle.consumer.local_input_channel import LocalInputChannel
from shuffle.consumer.remote_input_channel import RemoteInputChannel
from shuffle.consumer.single_input_gate import SingleInputGate
from taskmgr.metrics.task_io_metrics import TaskIOMetricGroup
from taskmgr.task import TaskMetrics

GAUGES = ("inPoolUsage", "inputExclusiveBuffersUsage", "inputFloatingBuffersUsage")


def _gate(exclusive: tuple[int, int], floating: tuple[int, int]) -> SimpleNamespace:
    return SimpleNamespace(exclusive_buffers_usage=lambda: exclusive, floating_buffers_usage=lambda: floating,
                           input_queue_length=0, input_queue_size=0, buffer_debloater=None, channels=[])


def _gauges(*gates: SimpleNamespace) -> dict[str, float]:
    snapshot = TaskMetrics(TaskIOMetricGroup(clock=lambda: 0.0), [], list(gates)).snapshot()
    return {name: snapshot[name] for name in GAUGES}


def test_task_gauges_are_one_ratio_of_sums_over_its_gates():
    # gate 1: its 4 exclusive buffers used, 0 of 8 floating; gate 2: 0 of 2 exclusive, 10 of 18 floating
    gauges = _gauges(_gate((4, 4), (0, 8)), _gate((0, 2), (10, 18)))
    assert gauges["inPoolUsage"] == pytest.approx(14 / 32)  # not the mean of 4/12 and 10/20
    assert gauges["inputExclusiveBuffersUsage"] == pytest.approx(4 / 6)  # not the mean of 1 and 0
    assert gauges["inputFloatingBuffersUsage"] == pytest.approx(10 / 26)  # not the mean of 0 and 10/18


def test_gates_without_buffers_count_for_nothing_and_zero_totals_read_zero():
    assert _gauges(_gate((0, 0), (0, 0))) == dict.fromkeys(GAUGES, 0.0)
    gauges = _gauges(_gate((0, 0), (0, 0)), _gate((1, 2), (2, 10)))
    assert gauges == pytest.approx({"inPoolUsage": 3 / 12, "inputExclusiveBuffersUsage": 1 / 2,
                                    "inputFloatingBuffersUsage": 2 / 10})


# Flink's InputBuffersMetricsTest, on real gates: gate 1 reads two remote channels, gate 2 one
# remote and one local channel; 2 exclusive buffers per remote channel, 8 floating per gate.
async def _gates() -> tuple[SingleInputGate, SingleInputGate]:
    network_pool = NetworkBufferPool(64, 64)
    gates = []
    for index, kinds in enumerate((("remote", "remote"), ("remote", "local"))):
        gate = SingleInputGate(index, "consumer", NetworkConfig(buffer_size=64), network_pool)
        for channel_index, kind in enumerate(kinds):
            channel = (RemoteInputChannel(gate, channel_index, f"p{index}", channel_index, "producer", 2,
                                          2 * index + channel_index)
                       if kind == "remote" else LocalInputChannel(gate, channel_index, f"p{index}", channel_index))
            gate.add_channel(channel)
        await gate.setup()
        gates.append(gate)
    return gates[0], gates[1]


def _drain(channel: RemoteInputChannel, n: int) -> list[Buffer]:
    """Take up to `n` free buffers as incoming data would (Flink's drainBuffer)."""
    buffers = [channel.request_buffer() for _ in range(n)]
    return [buffer for buffer in buffers if buffer is not None]


def _real_gauges(*gates: SingleInputGate) -> dict[str, float]:
    snapshot = TaskMetrics(TaskIOMetricGroup(clock=lambda: 0.0), [], list(gates)).snapshot()
    return {name: snapshot[name] for name in GAUGES}


async def test_totals_count_exclusive_buffers_of_remote_channels_only(sim_kernel):
    # testCalculateTotalBuffersSize (and its local channel: no exclusive buffers counted)
    gate1, gate2 = await _gates()
    assert gate1.exclusive_buffers_usage() == (0, 2 * 2) and gate1.floating_buffers_usage() == (0, 8)
    assert gate2.exclusive_buffers_usage() == (0, 2) and gate2.floating_buffers_usage() == (0, 8)
    assert _real_gauges(gate1, gate2) == dict.fromkeys(GAUGES, 0.0)


async def test_exclusive_buffers_taken_count_as_used(sim_kernel):
    # testExclusiveBuffersUsage: 6 exclusive buffers, 22 in all over both gates
    gate1, gate2 = await _gates()
    taken = []
    for drained, channel in enumerate(gate1.remote_channels, start=1):
        taken += _drain(channel, 2)
        assert gate1.exclusive_buffers_usage()[0] == 2 * drained
        gauges = _real_gauges(gate1, gate2)
        assert gauges["inputExclusiveBuffersUsage"] == pytest.approx(2 * drained / 6)
        assert gauges["inPoolUsage"] == pytest.approx(2 * drained / 22)
    for buffer in taken:
        buffer.recycle()


async def test_floating_buffers_count_as_used_once_taken_not_while_held_free(sim_kernel):
    # testFloatingBuffersUsage: with its exclusive buffers taken, a backlog of 3 brings the
    # channel 2 + 3 floating buffers; held free they are not used, taken they are
    gate1, gate2 = await _gates()
    channel = gate1.remote_channels[0]
    taken = _drain(channel, 2)
    channel.on_sender_backlog(3)
    assert len(channel.buffer_manager.floating) == 5
    assert gate1.floating_buffers_usage() == (0, 8)
    taken += _drain(channel, 5)
    assert len(channel.buffer_manager.floating) == 0
    gauges = _real_gauges(gate1, gate2)
    assert gauges["inPoolUsage"] == pytest.approx((2 + 5) / 22)
    assert gauges["inputFloatingBuffersUsage"] == pytest.approx(5 / 16)
    for buffer in taken:
        buffer.recycle()


async def test_a_released_channel_counts_its_exclusive_buffers_as_used(sim_kernel):
    # Flink 2.3's unsynchronizedGetExclusiveBuffersUsed is max(0, initialCredit - available
    # exclusive), and a release (a channel that delivered EndOfPartition) leaves none available
    gate1, gate2 = await _gates()
    gate1.remote_channels[0].release_all_resources()
    assert gate1.exclusive_buffers_usage() == (2, 4)
    assert _real_gauges(gate1, gate2)["inputExclusiveBuffersUsage"] == pytest.approx(2 / 6)
