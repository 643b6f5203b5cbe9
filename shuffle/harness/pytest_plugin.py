"""pytest plugin (installed with shufflesim): the `credit_flow` and `sim_kernel` fixtures.

    async def test_credit(credit_flow):
        h = await credit_flow(channels=2, config=NetworkConfig(buffer_size=4096))
        ...

An `async def` test that requests `credit_flow` or `sim_kernel` runs on shufflesim's
discrete-event kernel, in virtual time from 0, deterministic: whatever it awaits through
`shuffle.kernel` takes virtual time only, so a test that settles for an hour of network
time still takes milliseconds. Harnesses opened with `credit_flow` are closed when the
test ends, and a network buffer that did not come back fails the test. A test that asks
for them without being `async def` fails, saying so. Other async tests run as before
(under pytest-trio, in real time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
import inspect
from typing import Any

import pytest

from shuffle import kernel
from shuffle.harness.credit_flow import CreditFlowHarness

_SIM_FIXTURES = ("credit_flow", "sim_kernel")


class CreditFlowFixture:
    """Opens harnesses in the test's nursery: `await credit_flow(**CreditFlowHarness.start options)`."""

    def __init__(self) -> None:
        self.nursery: Any = None
        self.opened: list[CreditFlowHarness] = []

    async def __call__(self, **kwargs: Any) -> CreditFlowHarness:
        if self.nursery is None:
            raise RuntimeError("credit_flow can only be awaited inside the async test that requested it")
        harness = await CreditFlowHarness.start(self.nursery, **kwargs)
        self.opened.append(harness)
        return harness

    async def close_all(self) -> None:
        for harness in self.opened:
            await harness.close()


@pytest.fixture
def sim_kernel() -> None:
    """Request it to run an async test on the sim kernel (virtual time)."""


@pytest.fixture
def credit_flow() -> CreditFlowFixture:
    """Opens credit-flow harnesses; the test runs on the sim kernel."""
    return CreditFlowFixture()


def _on_sim_kernel(test: Callable[..., Any]) -> Callable[..., None]:
    def run(**kwargs: Any) -> None:
        fixture = kwargs.get("credit_flow")

        async def main() -> None:
            async with kernel.open_nursery() as nursery:
                if fixture is not None:
                    fixture.nursery = nursery
                await test(**kwargs)
                if fixture is not None:
                    await fixture.close_all()
                nursery.cancel_scope.cancel()

        kernel.run(main, mode="sim")

    return run


def _not_async(name: str, fixture: str) -> Callable[..., None]:
    """The test `name` that asked for `fixture` but is no `async def`: it fails saying so (it
    would pass having run nothing: its `credit_flow(...)` is a coroutine never awaited)."""
    def fail(**_kwargs: Any) -> None:
        pytest.fail(f"{name} asks for the {fixture} fixture, which runs async tests only: "
                    f"write 'async def {name}(...)' (and 'await credit_flow(...)')", pytrace=False)
    return fail


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Hand async tests that asked for the sim kernel to it (before pytest-trio claims them);
    fail other tests that asked for it."""
    test = getattr(item, "obj", None)
    wanted = [name for name in _SIM_FIXTURES if name in getattr(item, "fixturenames", ())]
    if wanted and inspect.iscoroutinefunction(test):
        item.own_markers = [m for m in item.own_markers if m.name != "trio"]
        item.obj = _on_sim_kernel(test)
    elif wanted and callable(test):
        item.obj = _not_async(getattr(item, "originalname", item.name), wanted[0])
    yield
