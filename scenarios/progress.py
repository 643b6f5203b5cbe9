"""Progress of a run on the terminal: virtual time against the duration, records emitted
so far, and how fast the simulation runs against the wall clock.

On a terminal a one-line bar is redrawn (at most 10 times a wall second); otherwise a
plain line is printed at most every `PLAIN_INTERVAL` wall seconds, so logs stay short.
This is the one place that reads the wall clock during a run (the runtime never does).
"""

from __future__ import annotations

import time
from typing import TextIO

BAR_WIDTH = 24
REDRAW_INTERVAL = 0.1
PLAIN_INTERVAL = 5.0


class StatusLine:
    """One line of status on `stream`: redrawn in place on a terminal, a new line otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.on_terminal = stream.isatty()
        self._drawn = False

    def show(self, text: str) -> None:
        if self.on_terminal:
            self.stream.write("\r" + text + "\x1b[K")
            self._drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def clear(self) -> None:
        """Erase a redrawn line (another stream is about to write on the terminal)."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def close(self) -> None:
        """End a redrawn line, so that what follows starts on a line of its own."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


class ProgressPrinter:
    """`printer(job_time, records)` as the runtime's progress callback; `close()` at the end."""

    def __init__(self, label: str, duration: float, stream: TextIO) -> None:
        self.label = label
        self.duration = duration
        self.status = StatusLine(stream)
        self.on_terminal = self.status.on_terminal
        self.start = time.monotonic()
        self._last_print = self.start

    def __call__(self, job_time: float, records: int | None) -> None:
        now = time.monotonic()
        interval = REDRAW_INTERVAL if self.on_terminal else PLAIN_INTERVAL
        if now - self._last_print < interval and job_time < self.duration:
            return
        self._last_print = now
        self.status.show(self.line(job_time, records, now - self.start))

    def line(self, job_time: float, records: int | None, wall: float) -> str:
        fraction = min(job_time / self.duration, 1.0) if self.duration > 0 else 1.0
        speed = job_time / wall if wall > 0 else 0.0
        counted = "" if records is None else f"{records:,} records  "  # None: counted where the sources run
        text = (f"{self.label}: {job_time:.1f}/{self.duration:g} s  {counted}"
                f"{speed:.2f}x real time  {wall:.0f} s elapsed")
        if not self.on_terminal:
            return text
        filled = round(fraction * BAR_WIDTH)
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] " + text

    def close(self) -> None:
        """End the bar's line (the table follows)."""
        self.status.close()
