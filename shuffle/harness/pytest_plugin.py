"""pytest plugin (installed with shufflesim): the `credit_flow` and `sim_kernel` fixtures.

    async def test_credit(credit_flow):
        h = await credit_flow(channels=2, config=NetworkConfig(buffer_size=4096))
        ...

An `async def` test that requests `credit_flow` or `sim_kernel` runs on shufflesim's
discrete-event kernel, in virtual time from 0, deterministic: whatever it awaits through
`shuffle.kernel` takes virtual time only, so a test that settles for an hour of network
time still takes milliseconds. Harnesses opened with `credit_flow` are closed when the
test ends, and a network buffer that did not come back fails the test. A test that asks
for them without being `async def` fails, saying so. Fixtures of such a test may be
`async def` (function scope): they are set up in the test's run, before it, and an async
generator fixture is finished after it:

    @pytest.fixture
    async def h(credit_flow):
        return await credit_flow(channels=2)

Other async tests run as before (under pytest-trio, in real time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
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


class _AsyncFixture:
    """An async fixture of a sim-kernel test, as pytest holds it: set up later, in the test's
    kernel run (pytest sets fixtures up before the test, where no kernel runs)."""

    _UNSET = object()

    def __init__(self, name: str, func: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        self.name = name
        self.func = func
        self.kwargs = kwargs
        self.value: Any = self._UNSET

    async def set_up(self, teardown: AsyncExitStack) -> Any:
        """Its value (set up once per test, after the async fixtures it asks for); an async
        generator's finish goes on `teardown`."""
        if self.value is self._UNSET:
            made = self.func(**await _resolve(self.kwargs, teardown))
            if inspect.isasyncgen(made):
                self.value = await made.__anext__()
                teardown.push_async_callback(self._finish, made)
            else:
                self.value = await made
        return self.value

    async def _finish(self, generator: Any) -> None:
        try:
            await generator.__anext__()
        except StopAsyncIteration:
            return
        raise RuntimeError(f"fixture {self.name!r} yielded more than once")


async def _resolve(kwargs: dict[str, Any], teardown: AsyncExitStack) -> dict[str, Any]:
    return {name: await value.set_up(teardown) if isinstance(value, _AsyncFixture) else value
            for name, value in kwargs.items()}


def _wants_sim_kernel(node: Any) -> bool:
    return any(name in getattr(node, "fixturenames", ()) for name in _SIM_FIXTURES)


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Any:
    """An async fixture of a sim-kernel test becomes a placeholder that the test's run sets
    up (before pytest-trio would make it a trio fixture, or pytest refuse it)."""
    func = fixturedef.func
    if not (inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func)):
        return None
    if request.scope != "function" or not _wants_sim_kernel(request.node):
        return None
    kwargs = {name: request.getfixturevalue(name) for name in fixturedef.argnames}
    placeholder = _AsyncFixture(fixturedef.argname, func, kwargs)
    fixturedef.cached_result = (placeholder, fixturedef.cache_key(request), None)
    return placeholder


def _on_sim_kernel(test: Callable[..., Any], fixture: CreditFlowFixture | None) -> Callable[..., None]:
    def run(**kwargs: Any) -> None:
        async def main() -> None:
            async with kernel.open_nursery() as nursery:
                if fixture is not None:
                    fixture.nursery = nursery
                async with AsyncExitStack() as teardown:
                    await test(**await _resolve(kwargs, teardown))
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
        item.obj = _on_sim_kernel(test, getattr(item, "funcargs", {}).get("credit_flow"))
    elif wanted and callable(test):
        item.obj = _not_async(getattr(item, "originalname", item.name), wanted[0])
    yield
