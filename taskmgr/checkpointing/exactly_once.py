"""Exactly-once accounting of a completed checkpoint (issue 8's verifying check).

The checkpoint is consistent when, for every source subtask (origin), the records it
emitted before its barrier are each found exactly once in the union of what the
verifying sinks received before their barriers and the in-flight data the checkpoint
persisted (per channel: the consumer's share, then the producer's, which continue each
other byte for byte).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from shuffle.serialization.records import FixedWidthFormat
from shuffle.serialization.spanning_deserializer import SpanningRecordDeserializer
from taskmgr.checkpointing.subtask_checkpoint_coordinator import SubtaskCheckpointAck
from taskmgr.results import ORIGIN_SHIFT


def persisted_seqs(acks: Iterable[SubtaskCheckpointAck]) -> np.ndarray:
    """Sequence numbers of the records in the checkpoint's persisted in-flight data."""
    acks = list(acks)
    inputs: dict[Any, list[bytes]] = {}
    outputs: dict[Any, list[bytes]] = {}
    formats: dict[str, Any] = {}
    for ack in acks:
        for key, chunks in ack.channel_state.inputs.items():
            inputs.setdefault(key, []).extend(chunks)
        for key, chunks in ack.channel_state.outputs.items():
            outputs.setdefault(key, []).extend(chunks)
        formats.update(ack.formats)
    seqs: list[np.ndarray] = []
    for key in sorted(set(inputs) | set(outputs)):
        data = b"".join(inputs.get(key, []) + outputs.get(key, []))
        if not data:
            continue
        deserializer = SpanningRecordDeserializer(formats[key[0]])
        deserializer.add_buffer(data)
        records = deserializer.read()
        if deserializer.has_unfinished_data:
            raise ValueError(f"persisted in-flight data of channel {key} ends inside a record")
        if isinstance(formats[key[0]], FixedWidthFormat):
            seqs.append(records.seqs)
        else:
            seqs.append(np.fromiter((value[1] for value, _ in records), dtype=np.int64, count=len(records)))
    return np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)


def verify_checkpoint(acks: Iterable[SubtaskCheckpointAck]) -> dict[str, Any] | None:
    """Counts of the accounting, or None if the job has no verifying sink."""
    acks = list(acks)
    positions: dict[int, int] = {}
    sink_arrays: list[np.ndarray] = []
    has_sink = False
    for ack in acks:
        positions.update(ack.operator_state.get("source_positions", {}))
        for arrays in ack.operator_state.get("sink_seqs", {}).values():
            has_sink = True
            sink_arrays.extend(arrays)
    if not has_sink:
        return None
    try:
        persisted = persisted_seqs(acks)
    except ValueError as exc:  # the persisted bytes do not read back as whole records
        return {"ok": False, "error": str(exc)}
    received = np.concatenate(sink_arrays) if sink_arrays else np.zeros(0, dtype=np.int64)
    got = np.sort(np.concatenate([received, persisted]))
    distinct = got[np.concatenate(([True], got[1:] != got[:-1]))] if len(got) else got
    duplicates = len(got) - len(distinct)
    expected = valid = 0
    for origin, emitted in positions.items():
        base = origin << ORIGIN_SHIFT
        expected += emitted
        valid += int(np.count_nonzero((distinct >= base) & (distinct < base + emitted)))
    unexpected = len(distinct) - valid
    return {"expected": expected, "in_sinks": len(received), "persisted": len(persisted),
            "duplicates": duplicates, "missing": expected - valid, "unexpected": unexpected,
            "ok": duplicates == 0 and expected == valid and unexpected == 0}
