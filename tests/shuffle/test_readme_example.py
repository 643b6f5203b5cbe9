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
