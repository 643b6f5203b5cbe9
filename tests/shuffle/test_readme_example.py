"""The credit-flow harness's documented examples, as written: the README section's test file
(run by pytest, as a user's suite runs it) and the module docstring's example."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from shuffle import kernel
from shuffle.harness import credit_flow

from test_pytest_plugin import run_pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_section_code(title: str) -> str:
    """The first python block of the README section `title`."""
    section = (ROOT / "README.md").read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_passes_as_a_users_test_file(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, readme_section_code("Writing regression tests of credit flow"))
    assert result.returncode == 0, result.stdout
    assert " passed" in result.stdout


def test_the_module_docstring_example_runs_on_the_sim_kernel() -> None:
    """It claimed the sender had no credit left and a recycled buffer was announced as
    AddCredit(1): the first buffer's backlog brings two floating buffers (AddCredit(2)) and
    the recycled exclusive buffer sends a floating one back instead of making credit."""
    block = credit_flow.__doc__.split('mode="sim")`:\n\n', 1)[1].split("\n\n", 1)[0]
    namespace = {"CreditFlowHarness": credit_flow.CreditFlowHarness}
    exec("async def main():\n" + textwrap.indent(textwrap.dedent(block), "    "), namespace)
    kernel.run(namespace["main"], mode="sim")
