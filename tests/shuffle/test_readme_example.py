"""The credit-flow harness's documented examples, as written: the README section's test files
(run by pytest, as a user's suite runs them) and the module docstring's example."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from shuffle import kernel
from shuffle.harness import credit_flow

from test_pytest_plugin import run_pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_section_code(title: str) -> list[str]:
    """The python blocks of the README section `title`."""
    section = (ROOT / "README.md").read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_examples_pass_as_a_users_test_files(tmp_path: Path) -> None:
    blocks = readme_section_code("Writing regression tests of credit flow")
    assert len(blocks) == 2
    for block in blocks:
        result = run_pytest(tmp_path, block)
        assert result.returncode == 0, result.stdout
        assert "1 passed" in result.stdout


def test_the_module_docstring_example_runs_on_the_sim_kernel() -> None:
    """It claimed the sender had no credit left and a recycled buffer was announced as
    AddCredit(1): the first buffer's backlog brings two floating buffers (AddCredit(2)) and
    the recycled exclusive buffer sends a floating one back instead of making credit."""
    block = credit_flow.__doc__.split('mode="sim")`:\n\n', 1)[1].split("\n\n", 1)[0]
    namespace = {"CreditFlowHarness": credit_flow.CreditFlowHarness}
    exec("async def main():\n" + textwrap.indent(textwrap.dedent(block), "    "), namespace)
    kernel.run(namespace["main"], mode="sim")


def test_the_readme_says_which_harness_calls_are_awaited() -> None:
    """Every public call of the harness is documented, written `await h.name(` exactly where it
    is a coroutine: the README listed `flush` among `emit`s that are awaited, and `await h.flush()`
    fails with "object NoneType can't be used in 'await' expression"; `producer_available` was
    not mentioned."""
    import inspect

    section = (ROOT / "README.md").read_text().split("## Writing regression tests of credit flow\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    harness = credit_flow.CreditFlowHarness
    public = [name for name in vars(harness) if not name.startswith("_") and name not in ("start", "open")]
    for name in public:
        assert re.search(rf"\b{name}\b", section), f"{name} is not in the README"
        awaited = re.search(rf"await h\.{name}\(", section) is not None
        assert awaited == inspect.iscoroutinefunction(inspect.unwrap(getattr(harness, name))), name


def test_an_emit_the_consumer_never_takes_fails_the_test_as_the_readme_says(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, """
async def test_emit_past_the_pool(credit_flow):
    h = await credit_flow(channels=2)
    await h.emit_buffers(1, 50)
""")
    assert result.returncode == 1, result.stdout
    assert "SimulationStuckError: the simulation is stuck at t=" in result.stdout
    assert "LocalBufferPool.request_buffer_builder_blocking" in result.stdout


async def test_producer_available_says_an_emit_would_wait(credit_flow) -> None:
    h = await credit_flow(channels=2)
    emitted = 0
    while h.producer_available(1):  # channel 1 is never consumed: the consumer's buffers, then the producer's fill
        await h.emit_buffers(1, 1)
        await h.settle()
        emitted += 1
    assert emitted > 10 and h.receiver(1).queued == 10  # 2 exclusive + 8 floating
    await h.settle(1.0)
    assert not h.producer_available(1) and not h.producer_available(0)  # one pool for both subpartitions
