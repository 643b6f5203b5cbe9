"""The metric time series: rows (t, vertex, subtask, task_manager, metric, value).

Rows are appended column by column while a run samples; ``to_arrow()`` gives the table in
the schema of ``metrics.parquet`` (ARCHITECTURE.md, "Outputs of a run"), which is also what
the run summary reads.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("t", pa.float64()),
        ("vertex", pa.string()),
        ("subtask", pa.int32()),
        ("task_manager", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
    ]
)


class MetricTable:
    """Append-only columnar rows of sampled metrics."""

    def __init__(self) -> None:
        self._columns: dict[str, list] = {name: [] for name in SCHEMA.names}

    def __len__(self) -> int:
        return len(self._columns["t"])

    def append(
        self, t: float, vertex: str, subtask: int, task_manager: str, metric: str, value: float
    ) -> None:
        row = (t, vertex, subtask, task_manager, metric, value)
        for column, item in zip(self._columns.values(), row):
            column.append(item)

    def to_arrow(self) -> pa.Table:
        return pa.table(self._columns, schema=SCHEMA)
