"""PipelinedSubpartitionView: the single reader of a subpartition (local channel or Netty reader)."""

from __future__ import annotations

from typing import Protocol

from shuffle.partition.pipelined_subpartition import BufferAndBacklog, PipelinedSubpartition


class BufferAvailabilityListener(Protocol):
    def notify_data_available(self) -> None: ...

    def notify_priority_event(self, sequence_number: int) -> None: ...


class PipelinedSubpartitionView:
    """Reads one subpartition on behalf of `listener`."""

    __slots__ = ("subpartition", "listener", "_released")

    def __init__(self, subpartition: PipelinedSubpartition, listener: BufferAvailabilityListener) -> None:
        if subpartition.read_view is not None:
            raise RuntimeError(f"Subpartition {subpartition.index} of {subpartition.parent_name} is "
                               "being (or already has been) consumed, but pipelined subpartitions "
                               "can only be consumed once.")
        self.subpartition = subpartition
        self.listener = listener
        self._released = False
        subpartition.read_view = self

    def get_next_buffer(self) -> BufferAndBacklog | None:
        return self.subpartition.poll_buffer()

    def get_availability_and_backlog(self, credit_available: bool) -> tuple[bool, int]:
        return self.subpartition.get_availability_and_backlog(credit_available)

    def notify_data_available(self) -> None:
        self.listener.notify_data_available()

    def notify_priority_event(self, sequence_number: int) -> None:
        self.listener.notify_priority_event(sequence_number)

    def resume_consumption(self) -> None:
        self.subpartition.resume_consumption()

    def acknowledge_all_data_processed(self) -> None:
        self.subpartition.parent.on_all_data_processed(self.subpartition.index)

    def notify_new_buffer_size(self, size: int) -> None:
        self.subpartition.set_desired_buffer_size(size)

    @property
    def number_of_queued_buffers(self) -> int:
        return self.subpartition.number_of_queued_buffers

    @property
    def is_released(self) -> bool:
        """Released by its reader, or its subpartition was released (as Flink's view asks its parent)."""
        return self._released or self.subpartition.is_released

    @property
    def failure_cause(self) -> BaseException | None:
        """Why the partition was released, if its producer failed (Flink's view asks its parent)."""
        return self.subpartition.parent.failure_cause

    def release_all_resources(self) -> None:
        """The consumer is gone. The view holds nothing: the subpartition keeps what is queued
        until its partition is released (release-by-upstream: `on_consumed_subpartition`)."""
        if not self._released:
            self._released = True
            self.subpartition.parent.on_consumed_subpartition(self.subpartition.index)

    def __str__(self) -> str:
        """Flink's `PipelinedSubpartitionView.toString` (errors quote it)."""
        subpartition = self.subpartition
        return f"PipelinedSubpartitionView(index: {subpartition.index}) of ResultPartition {subpartition.parent_name}"
