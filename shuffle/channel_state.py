"""In-flight data of unaligned checkpoints: what is persisted, per checkpoint and channel
(Flink's `ChannelStateWriter`), and when an input channel persists (`ChannelStatePersister`).

An unaligned checkpoint persists the data its barrier overtook: on the producer side, the
data buffers queued in a subpartition behind the priority barrier (spec 2.4, 5.4); on the
consumer side, the data buffers of a channel that come before that channel's barrier and
after the checkpoint started at the task. The bytes are copies; the buffers themselves
flow on and are processed as usual.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from shuffle import kernel
from shuffle.api.events import CheckpointBarrier
from shuffle.buffer.buffer import Buffer
from shuffle.errors import CheckpointException


@dataclass
class ChannelStateSnapshot:
    """The in-flight data one task persisted for one checkpoint, in arrival order per channel."""

    inputs: dict[Hashable, list[bytes]] = field(default_factory=dict)
    outputs: dict[Hashable, list[bytes]] = field(default_factory=dict)

    @property
    def input_bytes(self) -> int:
        return sum(len(chunk) for chunks in self.inputs.values() for chunk in chunks)

    @property
    def output_bytes(self) -> int:
        return sum(len(chunk) for chunks in self.outputs.values() for chunk in chunks)

    @property
    def persisted_bytes(self) -> int:
        return self.input_bytes + self.output_bytes


class ChannelStateWriter:
    """Collects a task's persisted in-flight data per checkpoint until the task takes it.

    The output data of a timeoutable aligned barrier is not known when the barrier is
    queued: it is nothing if the barrier is sent in time, or the data it overtakes if it
    times out first. As Flink's `addOutputDataFuture`, the subpartition announces such an
    output (`expect_output`) and resolves it later (`complete_output`); the checkpoint's
    data is complete (`wait_outputs`) once every announced output is resolved.
    """

    def __init__(self) -> None:
        self._snapshots: dict[int, ChannelStateSnapshot] = {}
        self._pending_outputs: dict[int, set[Hashable]] = {}
        self._outputs_done: dict[int, kernel.Event] = {}

    def start(self, checkpoint_id: int) -> None:
        """Open checkpoint `checkpoint_id` (data for checkpoints never started is dropped)."""
        self._snapshots.setdefault(checkpoint_id, ChannelStateSnapshot())

    def add_input_data(self, checkpoint_id: int, channel: Hashable, data: Iterable[bytes]) -> None:
        chunks = [chunk for chunk in data if chunk]
        snapshot = self._snapshots.get(checkpoint_id)
        if snapshot is not None and chunks:
            snapshot.inputs.setdefault(channel, []).extend(chunks)

    def add_output_data(self, checkpoint_id: int, subpartition: Hashable, data: Iterable[bytes]) -> None:
        chunks = [chunk for chunk in data if chunk]
        snapshot = self._snapshots.get(checkpoint_id)
        if snapshot is not None and chunks:
            snapshot.outputs.setdefault(subpartition, []).extend(chunks)

    def expect_output(self, checkpoint_id: int, subpartition: Hashable) -> None:
        """A timeoutable barrier of a started checkpoint is queued in `subpartition`."""
        if checkpoint_id in self._snapshots:
            self._pending_outputs.setdefault(checkpoint_id, set()).add(subpartition)

    def complete_output(self, checkpoint_id: int, subpartition: Hashable, data: Iterable[bytes]) -> None:
        """The barrier queued in `subpartition` was sent (no data) or timed out (`data`)."""
        pending = self._pending_outputs.get(checkpoint_id)
        if pending is None or subpartition not in pending:
            return
        self.add_output_data(checkpoint_id, subpartition, data)
        pending.discard(subpartition)
        if not pending:
            self._resolve_outputs(checkpoint_id)

    async def wait_outputs(self, checkpoint_id: int) -> None:
        """Until every output announced for `checkpoint_id` is resolved (or it is aborted)."""
        if self._pending_outputs.get(checkpoint_id):
            await self._outputs_done.setdefault(checkpoint_id, kernel.Event()).wait()

    def _resolve_outputs(self, checkpoint_id: int) -> None:
        self._pending_outputs.pop(checkpoint_id, None)
        event = self._outputs_done.pop(checkpoint_id, None)
        if event is not None:
            event.set()

    def take(self, checkpoint_id: int) -> ChannelStateSnapshot:
        """The checkpoint's data so far; later additions for it are dropped."""
        return self._snapshots.pop(checkpoint_id, None) or ChannelStateSnapshot()

    def abort(self, checkpoint_id: int) -> None:
        """Drop the data of `checkpoint_id` and of every older checkpoint."""
        for stale in [cid for cid in self._snapshots if cid <= checkpoint_id]:
            del self._snapshots[stale]
        for stale in [cid for cid in self._pending_outputs if cid <= checkpoint_id]:
            self._resolve_outputs(stale)


class CheckpointStatus(enum.Enum):
    COMPLETED = "completed"
    BARRIER_PENDING = "barrier_pending"
    BARRIER_RECEIVED = "barrier_received"


class ChannelStatePersister:
    """Decides which buffers of one input channel are in-flight data of a checkpoint.

    Between `start_persisting` (the task started the checkpoint) and the channel's own
    barrier (`check_for_barrier`), every data buffer the channel receives is persisted.
    """

    __slots__ = ("channel", "writer", "status", "last_seen_barrier")

    def __init__(self, channel: Hashable, writer: ChannelStateWriter | None = None) -> None:
        self.channel = channel
        self.writer = writer
        self.status = CheckpointStatus.COMPLETED
        self.last_seen_barrier = -1

    def start_persisting(self, barrier_id: int, known_buffers: list[Buffer]) -> None:
        """The task started checkpoint `barrier_id`; `known_buffers` are queued before its barrier."""
        if self.status is CheckpointStatus.BARRIER_RECEIVED and self.last_seen_barrier > barrier_id:
            # an unaligned barrier of the next checkpoint overtook this one's on the channel
            raise CheckpointException(f"Barrier for newer checkpoint {self.last_seen_barrier} has already been "
                                      f"received compared to the requested checkpoint {barrier_id}",
                                      "CHECKPOINT_SUBSUMED")
        if self.last_seen_barrier < barrier_id:
            # a newer checkpoint than any barrier seen: wait for its barrier
            self.status = CheckpointStatus.BARRIER_PENDING
            self.last_seen_barrier = barrier_id
        if known_buffers and self.writer is not None:
            self.writer.add_input_data(barrier_id, self.channel, [bytes(b.memory()) for b in known_buffers])

    def stop_persisting(self, checkpoint_id: int) -> None:
        if checkpoint_id >= self.last_seen_barrier:
            self.status = CheckpointStatus.COMPLETED
            self.last_seen_barrier = checkpoint_id

    def maybe_persist(self, buffer: Buffer) -> None:
        if self.status is CheckpointStatus.BARRIER_PENDING and buffer.is_buffer and self.writer is not None:
            self.writer.add_input_data(self.last_seen_barrier, self.channel, [bytes(buffer.memory())])

    def check_for_barrier(self, event: object) -> int | None:
        """The barrier's id if `event` is the barrier this channel waits for (or a newer one)."""
        if not isinstance(event, CheckpointBarrier):
            return None
        expected = self.last_seen_barrier + 1 if self.status is CheckpointStatus.COMPLETED else self.last_seen_barrier
        if event.id >= expected:
            self.status = CheckpointStatus.BARRIER_RECEIVED
            self.last_seen_barrier = event.id
            return event.id
        return None

    @property
    def has_barrier_received(self) -> bool:
        return self.status is CheckpointStatus.BARRIER_RECEIVED
