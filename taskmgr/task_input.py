"""What the mailbox loop drives (an input processor or a source) and what one turn returns.

Kept apart from `input_processor` so that operators (sources) can use it without
importing the input side, which imports the operators.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable
from typing import Protocol


class InputStatus(enum.Enum):
    """Flink's `DataInputStatus`: END_OF_DATA once every record is in (a source ran out,
    or every input channel sent EndOfData), END_OF_INPUT once the input is closed."""

    MORE_AVAILABLE = "more_available"
    NOTHING_AVAILABLE = "nothing_available"
    END_OF_DATA = "end_of_data"
    END_OF_INPUT = "end_of_input"


class TaskInput(Protocol):
    """What the mailbox loop drives: an input processor, or a source."""

    async def process_input(self) -> InputStatus: ...

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once there is input to process (an `async def`, or the wait itself)."""

    async def before_mail(self) -> None:
        """Runs before the mailbox actions of a turn (a source emits what it owes by now)."""
