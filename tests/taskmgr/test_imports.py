"""Every taskmgr module imports on its own, as the first taskmgr module (no import cycles)."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest

import taskmgr

MODULES = sorted(m.name for m in pkgutil.walk_packages(taskmgr.__path__, "taskmgr."))


def _ours(name: str) -> bool:
    return name == "taskmgr" or name.startswith("taskmgr.")


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_first(name: str) -> None:
    saved = {m: module for m, module in sys.modules.items() if _ours(m)}
    for m in saved:
        del sys.modules[m]
    try:
        importlib.import_module(name)
    finally:
        for m in [m for m in sys.modules if _ours(m)]:
            del sys.modules[m]
        sys.modules.update(saved)
