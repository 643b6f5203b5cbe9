"""Ctrl-C and SIGTERM during a run: the first ends the run early, the second aborts.

The first signal only sets a flag (a signal handler must not unwind the simulation from
an arbitrary point): the runtime asks it as it reports progress, ends the job, drains and
writes complete outputs that say where the run was stopped. A second signal raises
KeyboardInterrupt at once; `run_scenario` then leaves no outputs of this run behind. Raised
at an arbitrary point, it may leave the simulation's state torn, so whatever error the
unwinding meets after an abort counts as the abort (`StopRequest.aborted`).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from shuffle.kernel import realtime

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Callable as the runtime's stop check: True once a signal asked the run to stop."""

    def __init__(self) -> None:
        self.requested = False
        #: A second signal came: the run is being unwound from wherever it was.
        self.aborted = False

    def __call__(self) -> bool:
        return self.requested

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            # A realtime run unwinds by cancellation, then raises KeyboardInterrupt; a sim run,
            # or one already aborted (a third signal), at once.
            first_abort = not self.aborted
            self.aborted = True
            if first_abort and realtime.abort_run():
                return
            raise KeyboardInterrupt
        self.requested = True
        print(f"\nshufflesim: {signal.Signals(signum).name}: stopping the run and writing its outputs "
              "(again to abort without outputs)", file=sys.stderr)


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Within the block, SIGINT and SIGTERM request a stop (the previous handlers come back after)."""
    request = StopRequest()
    previous = {sig: signal.signal(sig, request._on_signal) for sig in SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM is taken as Ctrl-C: it raises SIGINT, which whatever SIGINT
    handler is in effect then handles (a sweep's: cancel the points running, say which are
    done). A batch system's time limit or `timeout` sends SIGTERM; by default it killed the
    process at once, silently."""
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: signal.raise_signal(signal.SIGINT))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
