"""pytest plugin (installed with shufflesim): the `credit_flow` fixture.

    async def test_credit(credit_flow):
        h = await credit_flow(channels=2, config=NetworkConfig(buffer_size=4096))
        ...

The fixture runs the test in virtual time (`virtual_clock`, shufflesim's sim-mode clock)
and checks for leaked network buffers when the test ends.
"""

from __future__ import annotations

import pytest

from shuffle.harness.credit_flow import CreditFlowHarness
from shuffle.sim_time import VirtualClock


@pytest.fixture
def virtual_clock() -> VirtualClock:
    """Run the requesting trio test in sim-mode virtual time."""
    return VirtualClock()


@pytest.fixture
async def credit_flow(nursery, virtual_clock):
    opened: list[CreditFlowHarness] = []

    async def open_harness(**kwargs) -> CreditFlowHarness:
        harness = await CreditFlowHarness.start(nursery, **kwargs)
        opened.append(harness)
        return harness

    yield open_harness
    for harness in opened:
        await harness.close()
