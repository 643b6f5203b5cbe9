"""A connection stub for PartitionRequestQueue tests: its writer never runs (Flink's blocked
EmbeddedChannel), so readers and messages wait until a test drains the queue itself."""

from typing import Any


class BlockedConnection:
    defers = False

    def seal(self, msg: Any, buffer: Any = None) -> Any:
        return msg
