"""LocalInputChannel: reads a producer's subpartition in the same TaskManager (spec 4.4).

No credit and no buffers of its own: it holds the producer's buffers until the task has
deserialized them, so back-pressure shows only as the producer's pool running dry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shuffle import kernel
from shuffle.consumer.input_channel import BufferAndAvailability, InputChannel
from shuffle.errors import CancelTaskError, IllegalStateError, PartitionNotFoundError
from shuffle.partition.subpartition_view import PipelinedSubpartitionView
from shuffle.serialization.event_serializer import deserialize_event

if TYPE_CHECKING:
    from shuffle.consumer.single_input_gate import SingleInputGate


class LocalInputChannel(InputChannel):
    __slots__ = ("view", "current_backoff")

    def __init__(self, gate: SingleInputGate, channel_index: int, partition_id: str,
                 subpartition_index: int) -> None:
        super().__init__(gate, channel_index, partition_id, subpartition_index)
        self.view: PipelinedSubpartitionView | None = None
        # Only a local channel retries its request with this backoff (a remote one waits
        # for the producer's answer, see RemoteInputChannel.on_failed_partition_request).
        self.current_backoff = 0.0 if gate.config.request_backoff_initial > 0 else -1.0

    async def request_subpartition(self) -> None:
        """Create the view; while the partition is not there yet, retry with backoff."""
        while self.view is None and not self.is_released:
            try:
                self.view = self.gate.partition_manager.create_subpartition_view(
                    self.partition_id, self.subpartition_index, self)
            except PartitionNotFoundError as exc:
                if not self.increase_backoff():
                    self.set_error(exc)
                    return
                await kernel.sleep(self.current_backoff)
        if self.gate.tracer.enabled:
            self.gate.tracer.emit("partition_request", channel=self.name, initial_credit=0, local=True)
        if self.view is not None:
            if self.is_released:  # released while the request waited: the view goes at once
                self.view.release_all_resources()
                self.view = None
            else:
                # Flink's requestSubpartitions calls notifyDataAvailable once the view is
                # there, data or not: the gate queues the channel and its first poll finds out
                self.notify_channel_non_empty()

    def increase_backoff(self) -> bool:
        """Exponential backoff: 0 -> initial -> doubled up to max; False once exhausted."""
        if self.current_backoff < 0:
            return False
        if self.current_backoff == 0:
            self.current_backoff = self.gate.config.request_backoff_initial
            return True
        max_backoff = self.max_backoff
        if self.current_backoff < max_backoff:
            self.current_backoff = min(self.current_backoff * 2, max_backoff)
            return True
        return False

    def get_next_buffer(self) -> BufferAndAvailability | None:
        self.check_error()
        view = self.view
        if view is None:
            return None
        nxt = view.get_next_buffer()
        while nxt is not None and nxt.buffer.is_buffer and nxt.buffer.size == 0:
            nxt.buffer.recycle()
            nxt = view.get_next_buffer()
            self.num_buffers_in += 1  # as Flink's loop counts the empty buffers it skips
        if nxt is None:
            if view.is_released:
                raise CancelTaskError(f"Consumed partition {view} has been released.")
            return None
        buffer = nxt.buffer
        if buffer.is_buffer:
            self.maybe_persist(buffer)
        else:
            self.persister.check_for_barrier(deserialize_event(bytes(buffer.memory())))
        self.num_bytes_in += buffer.size
        self.num_buffers_in += 1
        tracer = self.gate.tracer
        if tracer.enabled:
            fields = dict(channel=self.name, seq=nxt.sequence_number, backlog=nxt.buffers_in_backlog,
                          bytes=buffer.size, data_type=buffer.data_type.name)
            tracer.emit("buffer_sent", **fields, local=True)
            tracer.emit("buffer_received", **fields, local=True)
        return BufferAndAvailability(buffer, nxt.next_data_type, nxt.buffers_in_backlog, nxt.sequence_number)

    # BufferAvailabilityListener of the producer's view
    def notify_data_available(self) -> None:
        self.notify_channel_non_empty()

    def _check_not_released(self) -> None:
        if self.is_released:
            raise IllegalStateError("Channel released.")

    def resume_consumption(self) -> None:
        self._check_not_released()
        if self.view is None:
            raise RuntimeError(f"channel {self.name} resumed before it was requested")
        self.view.resume_consumption()

    def acknowledge_all_records_processed(self) -> None:
        self._check_not_released()
        if self.view is not None:
            self.view.acknowledge_all_data_processed()

    def release_all_resources(self) -> None:
        """Release the view and forget it (Flink's releaseAllResources): a released channel
        has nothing more to read and no queue to report."""
        if not self.is_released:
            self.is_released = True
            if self.view is not None:
                self.view.release_all_resources()
                self.view = None

    def announce_buffer_size(self, size: int) -> None:
        """Debloating: straight to the producer's subpartition through the view."""
        self._check_not_released()
        if self.view is not None:
            self.view.notify_new_buffer_size(size)
            if self.gate.tracer.enabled:
                self.gate.tracer.emit("buffer_size_announced", channel=self.name, size=size, local=True)

    @property
    def buffers_in_use_count(self) -> int:
        """The producer's queued buffers (Flink's `getBuffersInUseCount` of a local channel)."""
        return self.queue_length

    @property
    def queue_length(self) -> int:
        """`inputQueueLength` share: the producer's queue, read through the view (FLINK-12576)."""
        return self.view.number_of_queued_buffers if self.view is not None else 0

    @property
    def queue_size(self) -> int:
        """`inputQueueSize` share: 0. Flink's local channel reads only the buffer count
        through the view; its byte size is the base channel's 0, so the producer's queued
        bytes show as its `outputQueueSize` only."""
        return 0
