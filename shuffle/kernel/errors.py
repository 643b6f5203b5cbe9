"""The exceptions of the kernel interface, the same classes under both kernels.

trio's resource errors are reused as they are (the TCP transport raises them, and code
above the kernel catches them whichever kernel runs). `Cancelled` is the kernel's own:
each kernel raises its own cancellation exception, and the interface names the one of
the kernel in use (`shuffle.kernel.Cancelled`).
"""

from __future__ import annotations

import trio

BrokenResourceError = trio.BrokenResourceError
ClosedResourceError = trio.ClosedResourceError
BusyResourceError = trio.BusyResourceError
TooSlowError = trio.TooSlowError


class Cancelled(BaseException):
    """Raised in a task of the sim kernel whose cancel scope was cancelled.

    A BaseException, like trio's, so that `except Exception` does not swallow it.
    """


class SimulationStuckError(RuntimeError):
    """Every task of a sim run waits on another and no timer is pending: it would hang forever."""
