"""Virtual time and a seeded, deterministic trio scheduler for sim mode.

trio runs the tasks that wake at the same instant in random order. For a reproducible
simulation (same scenario and seed, same trace bytes) we use trio's own switch for
deterministic scheduling, the one its Hypothesis integration turns on: runnable tasks are
ordered by creation and shuffled with trio's private random generator, which we seed. It
is a private switch, so it is touched only here (and tested).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import trio.testing
from trio._core import _run as _trio_run


def sim_clock() -> trio.testing.MockClock:
    """A virtual clock that jumps to the next deadline whenever every task is blocked."""
    return trio.testing.MockClock(autojump_threshold=0)


@contextmanager
def deterministic_scheduling(seed: int) -> Iterator[None]:
    """Within the block, trio's scheduling order depends only on `seed` (restored after)."""
    previous_flag = _trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    previous_state = _trio_run._r.getstate()
    _trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True
    _trio_run._r.seed(seed)
    try:
        yield
    finally:
        _trio_run._ALLOW_DETERMINISTIC_SCHEDULING = previous_flag
        _trio_run._r.setstate(previous_state)
