"""RecordWriter: serializes records and routes them to subpartitions (spec 2.1).

One writer per non-chained output of a task. Generic records take the per-record path;
fixed-width batches are routed with one vectorized channel selection, grouped by target
with a stable sort (order per channel is kept) and appended as contiguous byte runs.
The buffer timeout decides flushing: 0 flushes after every emit, -1 never (only full
buffers and events make data visible), > 0 runs the OutputFlusher.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import Any

import numpy as np

from shuffle import kernel
from shuffle.partition.result_partition import ResultPartition
from shuffle.partition.target_groups import TargetGroups
from shuffle.partitioner.channel_selectors import StreamPartitioner
from shuffle.serialization.record_serializer import RecordSerializer
from shuffle.serialization.records import FixedWidthRecords


#: Batches up to this many records are grouped by target in plain Python (numpy's per-call
#: overhead dominates them: a paced source emits a few records per wakeup).
SMALL_BATCH = 32


def _small_runs(targets: list[int], wire: memoryview, row: int) -> list[tuple[int, memoryview]]:
    """`RecordWriter._runs` for a small batch: the same runs, from slices of the wire bytes."""
    rows_of: dict[int, list[int]] = {}
    for index, target in enumerate(targets):
        rows_of.setdefault(target, []).append(index)
    if len(rows_of) == 1:
        return [(targets[0], wire)]
    runs = []
    for target in sorted(rows_of):
        rows = rows_of[target]
        if len(rows) == 1:
            runs.append((target, wire[rows[0] * row:(rows[0] + 1) * row]))
        else:
            runs.append((target, memoryview(b"".join([wire[i * row:(i + 1) * row] for i in rows]))))
    return runs


class RecordWriter:
    def __init__(self, partition: ResultPartition, selector: StreamPartitioner,
                 serializer: RecordSerializer, timeout: float) -> None:
        self.partition = partition
        self.selector = selector
        self.serializer = serializer
        self.timeout = timeout
        self.flush_always = timeout == 0
        #: When the OutputFlusher flushes next (virtual s; 0 until it runs, inf without one):
        #: a paced source need not emit before then what no buffer fills with.
        self.next_flush_at = 0.0 if timeout > 0 else math.inf
        self.num_subpartitions = partition.num_subpartitions
        selector.setup(self.num_subpartitions)
        #: Channels selected for records that were not written (`writable_prefix` cut their
        #: batch): the same records come again first, and keep them (a selector may be stateful).
        self._preselected: np.ndarray | None = None
        #: How the batch `writable_prefix` last cut is grouped by target, for its `emit_batch`.
        self._groups: TargetGroups | None = None

    async def emit(self, value: Any, timestamp: int = 0) -> None:
        """Serialize one record and append it to its channel (all channels for broadcast)."""
        data = self.serializer.serialize(value, timestamp)
        if self.selector.is_broadcast:
            await self.partition.broadcast_record(data)
            if self.flush_always:
                self.partition.flush_all()
            return
        target = self.selector.select_channel(value)
        await self.partition.emit_record(data, target)
        if self.flush_always:
            self.partition.flush(target)

    async def emit_batch(self, batch: FixedWidthRecords) -> None:
        """Route a batch of fixed-width records, vectorized."""
        groups, self._groups = self._groups, None
        if not len(batch):
            return
        row = batch.format.wire_size
        wire = self.serializer.serialize_batch(batch)
        if self.selector.is_broadcast:
            await self.partition.broadcast_record(wire, row)
            if self.flush_always:
                self.partition.flush_all()
            return
        small = len(batch) <= SMALL_BATCH
        if self._preselected is not None:
            targets = self._select(batch)
            self._preselected = targets[len(batch):] if len(targets) > len(batch) else None
            targets = targets[:len(batch)]
            if small:
                targets = targets.tolist()
        else:
            targets = self.selector.select_channel_list(batch) if small else self.selector.select_channels(batch)
        if self.num_subpartitions == 1:
            await self.partition.emit_record(wire, 0, row)
            if self.flush_always:
                self.partition.flush(0)
            return
        if small:
            runs = _small_runs(targets, wire, row)
        else:  # the groups `writable_prefix` found for the batch this one was cut from, if any
            groups = (groups.prefix(len(batch)) if groups is not None and len(groups) >= len(batch)
                      else TargetGroups(targets, self.num_subpartitions))
            runs = self._runs(groups, batch, wire)
        for target, data in runs:
            await self.partition.emit_record(data, target, row)
            if self.flush_always:
                self.partition.flush(target)

    def writable_prefix(self, batch: FixedWidthRecords) -> int:
        """Of `batch`, how many records Flink's per-record loop writes before the writer turns
        unavailable: exact, from the channel of each record (kept, and their grouping, for
        `emit_batch` of those records)."""
        if self.selector.is_broadcast or self.num_subpartitions == 1:
            return self.records_before_unavailable(batch.format.wire_size, len(batch))
        targets = self._preselected = self._select(batch)
        groups = self._groups = TargetGroups(targets[:len(batch)], self.num_subpartitions)
        return self.partition.records_before_unavailable_to(groups, batch.format.wire_size)

    def _select(self, batch: FixedWidthRecords) -> np.ndarray:
        """The channels of `batch`: those kept from an earlier selection first, then new ones
        (at least one per record of `batch`)."""
        kept = self._preselected
        if kept is None:
            return self.selector.select_channels(batch)
        if len(kept) >= len(batch):
            return kept
        rest = FixedWidthRecords.of_rows(batch.rows[len(kept):], batch.format)
        return np.concatenate([kept, self.selector.select_channels(rest)])

    @staticmethod
    def _runs(groups: TargetGroups, batch: FixedWidthRecords, wire: memoryview) -> list[tuple[int, memoryview]]:
        """The batch's wire bytes grouped by target channel (ascending), order kept per channel."""
        channels = groups.channels
        if len(channels) == 1:
            return [(channels[0], wire)]
        row = batch.format.wire_size
        grouped = memoryview(batch.rows.take(groups.order).view(np.uint8))  # copies whole rows
        runs = []
        offset = 0
        for target in channels:
            size = groups.counts[target] * row
            runs.append((target, grouped[offset:offset + size]))
            offset += size
        return runs

    def broadcast_event(self, event: object, is_priority: bool = False) -> None:
        self.partition.broadcast_event(event, is_priority)
        if self.flush_always:
            self.partition.flush_all()

    def flush_all(self) -> None:
        self.partition.flush_all()

    def is_available(self) -> bool:
        return self.partition.is_available()

    def records_before_unavailable(self, record_size: int, limit: int) -> int:
        """Of the next `limit` records, how many go out before the writer turns unavailable
        (ResultPartition.records_before_unavailable)."""
        return self.partition.records_before_unavailable(record_size, self.selector.is_broadcast, limit)

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once the partition is available (the partition's wait itself)."""
        return self.partition.wait_available()

    async def run_output_flusher(self, phase: float = 0.0, overshoot: float = 0.0) -> None:
        """Flush every `timeout` seconds until cancelled (Flink's OutputFlusher thread), the
        first time after `phase` seconds: where a flusher thread starts relative to the
        records is arbitrary in Flink, and a phase of 0 everywhere would align every flush
        with every paced source in sim mode. Each sleep lasts `timeout + overshoot`, as a
        thread's sleep overshoots: the flushes drift against a paced source's records
        instead of meeting each at the same point of its wait."""
        if self.timeout <= 0:
            return
        period = self.timeout + overshoot
        self.next_flush_at = kernel.current_time() + phase + period
        await kernel.sleep(phase)
        while not self.partition.is_finished:
            self.next_flush_at = kernel.current_time() + period
            await kernel.sleep(period)
            self.partition.flush_all()
        self.next_flush_at = math.inf
