"""The same end-to-end exchanges over the simulated link and over TCP on loopback."""

import pytest

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.harness.credit_flow import CreditFlowHarness

VALUES = [(i, "payload-" * (i % 40)) for i in range(2000)]


async def exchange(transport: str, flow_control: str) -> list[list]:
    cfg = NetworkConfig(buffer_size=1024, flow_control=flow_control, floating_buffers_per_gate=2)
    async with CreditFlowHarness.open(cfg, channels=3, transport=transport, separate_producers=True) as h:
        for channel in range(3):
            h.auto_consume(channel)
        with kernel.fail_after(20):
            for start in range(0, len(VALUES), 100):
                for channel in range(3):
                    await h.emit_values(channel, VALUES[start:start + 100][::1 if channel % 2 == 0 else -1])
                h.flush()
            h.finish()
            while not all(g.is_finished for g in h.gates):
                await kernel.sleep(0.01)
        # With credit the consumer announces credit; without (tcp mode) it never does.
        assert bool(h.trace.of("credit_announced")) == (flow_control == "credit")
        return [list(r) for r in h.received]


def expected() -> list[list]:
    out = [[], [], []]
    for start in range(0, len(VALUES), 100):
        chunk = VALUES[start:start + 100]
        for channel in range(3):
            out[channel].extend(chunk if channel % 2 == 0 else chunk[::-1])
    return out


@pytest.mark.parametrize("flow_control", ["credit", "tcp"])
def test_exchange_over_the_simulated_link(flow_control):
    assert kernel.run(exchange, "sim", flow_control, mode="sim") == expected()


@pytest.mark.tcp
@pytest.mark.parametrize("flow_control", ["credit", "tcp"])
def test_exchange_over_tcp(flow_control):
    assert kernel.run(exchange, "tcp", flow_control, mode="realtime") == expected()
