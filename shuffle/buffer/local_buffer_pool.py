"""LocalBufferPool: the buffers of one ResultPartition or one input gate (spec 1.3).

Sized between `min_buffers` and `max_buffers` by the NetworkBufferPool's redistribution.
For partitions it keeps a per-subpartition count: a subpartition that holds
`max_buffers_per_channel` makes the pool *unavailable* (soft limit, FLINK-27522), and up to
`max_overdraft_buffers` may be borrowed beyond the pool size by a record that spans
buffers. For gates it lends floating buffers and queues `BufferListener`s (FIFO) while
it has none.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol

from shuffle import kernel
from shuffle.availability import AvailabilityHelper
from shuffle.buffer.buffer import Buffer, MemorySegment, Recycler
from shuffle.buffer.buffer_builder import BufferBuilder
from shuffle.errors import CancelTaskError

if TYPE_CHECKING:
    from shuffle.buffer.network_buffer_pool import NetworkBufferPool

UNKNOWN_CHANNEL = -1


class BufferListener(Protocol):
    def notify_buffer_available(self, buffer: Buffer) -> bool:
        """Offer a buffer; return True if it was taken."""


class _SubpartitionRecycler:
    """Gives a segment back to its pool, counted against one subpartition. A slotted
    object: ~60 bytes per subpartition, where a keyword partial cost ~450."""

    __slots__ = ("pool", "channel")

    def __init__(self, pool: LocalBufferPool, channel: int) -> None:
        self.pool = pool
        self.channel = channel

    def __call__(self, segment: MemorySegment) -> None:
        self.pool.recycle(segment, self.channel)


class LocalBufferPool:
    """A bounded view onto the NetworkBufferPool (see module doc)."""

    def __init__(self, network_pool: NetworkBufferPool, min_buffers: int, max_buffers: int,
                 num_subpartitions: int = 0, max_buffers_per_channel: int = 2**31 - 1,
                 max_overdraft_buffers: int = 0) -> None:
        self.network_pool = network_pool
        self.min_buffers = min_buffers
        self.max_buffers = max_buffers
        self.current_pool_size = min_buffers
        self.num_requested = 0
        self._available: deque[MemorySegment] = deque()
        self._listeners: deque[BufferListener] = deque()
        self._subpartition_counts = [0] * num_subpartitions
        self.max_buffers_per_channel = max_buffers_per_channel
        self.unavailable_subpartitions = 0
        self.max_overdraft_buffers = max_overdraft_buffers
        self.is_destroyed = False
        self.availability = AvailabilityHelper()
        self._segment_event: kernel.Event | None = None
        self._waiting_on_global = False
        #: Per subpartition, made when it first takes a buffer (most of a wide partition's
        #: subpartitions stay idle for long).
        self._recyclers: list[_SubpartitionRecycler | None] = [None] * num_subpartitions
        #: Floating and untargeted buffers go back through `recycle` itself (its channel is
        #: `UNKNOWN_CHANNEL` by default): no recycler object's call in between.
        self._untargeted_recycler: Recycler = self.recycle
        self._update_availability()

    # -- requesting -----------------------------------------------------------------------

    def _request_segment(self, target: int) -> MemorySegment | None:
        if self.is_destroyed:
            raise CancelTaskError("Buffer pool has already been destroyed.")
        segment = None
        if self._available:
            segment = self._available.popleft()
        elif self.num_requested < self.current_pool_size + self.max_overdraft_buffers:
            # Below the pool size this is a plain request, at or above it an overdraft.
            segment = self.network_pool.request_pooled_segment()
            if segment is not None:
                self.num_requested += 1
        if segment is None:
            return None
        if target >= 0:
            self._subpartition_counts[target] += 1
            if self._subpartition_counts[target] == self.max_buffers_per_channel:
                self.unavailable_subpartitions += 1
        self._update_availability()
        return segment

    def request_buffer_builder(self, target: int = UNKNOWN_CHANNEL) -> BufferBuilder | None:
        """Non-blocking: a builder over a free segment, or None."""
        segment = self._request_segment(target)
        if segment is None:
            return None
        if target < 0:
            return BufferBuilder(segment, self._untargeted_recycler)
        recycler = self._recyclers[target]
        if recycler is None:
            recycler = self._recyclers[target] = _SubpartitionRecycler(self, target)
        return BufferBuilder(segment, recycler)

    async def request_buffer_builder_blocking(self, target: int = UNKNOWN_CHANNEL) -> BufferBuilder:
        """Wait until a segment can be had (the task is then hard back-pressured)."""
        while True:
            builder = self.request_buffer_builder(target)
            if builder is not None:
                return builder
            if self._segment_event is None:
                self._segment_event = kernel.Event()
            await self._segment_event.wait()

    def request_buffer(self) -> Buffer | None:
        """Non-blocking: a floating buffer that returns to this pool when recycled."""
        segment = self._request_segment(UNKNOWN_CHANNEL)
        if segment is None:
            return None
        return Buffer.of_segment(segment, self._untargeted_recycler)

    def add_buffer_listener(self, listener: BufferListener) -> bool:
        """Queue `listener` for the next recycled segment; False if one is free right now."""
        if self._available or self.is_destroyed:
            return False
        self._listeners.append(listener)
        return True

    def remove_buffer_listener(self, listener: BufferListener) -> None:
        try:
            self._listeners.remove(listener)
        except ValueError:
            pass

    def reserve_segments(self, k: int) -> None:
        """Fetch up to `k` segments up front (gates do k = 1 first, FLINK-24035)."""
        while self.num_requested < min(k, self.current_pool_size):
            segment = self.network_pool.request_pooled_segment()
            if segment is None:
                break
            self.num_requested += 1
            self._available.append(segment)
        self._update_availability()

    # -- recycling ------------------------------------------------------------------------

    def recycle(self, segment: MemorySegment, channel: int = UNKNOWN_CHANNEL) -> None:
        if channel >= 0:
            if self._subpartition_counts[channel] == self.max_buffers_per_channel:
                self.unavailable_subpartitions -= 1
            self._subpartition_counts[channel] -= 1
        if self.is_destroyed or self.num_requested > self.current_pool_size:
            self.num_requested -= 1
            self.network_pool.recycle_pooled_segment(segment)
        elif not self._listeners or not self._offer_to_listeners(segment):
            self._available.append(segment)
        self._update_availability()
        if self._segment_event is not None:
            self._signal_segment()

    def _offer_to_listeners(self, segment: MemorySegment) -> bool:
        """Lend `segment` to the first queued listener that takes it; False if none did."""
        while self._listeners:
            listener = self._listeners.popleft()
            if listener.notify_buffer_available(Buffer.of_segment(segment, self._untargeted_recycler)):
                return True
        return False

    def _signal_segment(self) -> None:
        if self._segment_event is not None:
            self._segment_event.set()
            self._segment_event = None

    # -- sizing and availability ----------------------------------------------------------

    def set_num_buffers(self, n: int) -> None:
        """Resize the pool to `n` (at most max; below min is an error, as Flink's
        checkArgument), giving back free segments above it.

        Redistribution mostly keeps sizes (it calls this for every pool of a TaskManager
        whenever a channel takes its exclusive buffers): then, if no blocked requester is to
        be woken and no segment is to be fetched below the pool size (one is free, or the
        size is taken), checking availability and signalling would change nothing and are
        skipped. Every change of the free segments or subpartition counts updates
        availability itself, and no free segment is kept above the pool size."""
        if n < self.min_buffers:
            raise ValueError(f"Buffer pool needs at least {self.min_buffers} buffers, but tried to set to {n}")
        if (n == self.current_pool_size and self._segment_event is None
                and (self._available or self.num_requested >= self.current_pool_size)):
            return
        self.current_pool_size = min(n, self.max_buffers)
        while self.num_requested > self.current_pool_size and self._available:
            self.num_requested -= 1
            self.network_pool.recycle_pooled_segment(self._available.pop())
        self._update_availability()
        self._signal_segment()

    def _update_availability(self) -> None:
        if self.is_destroyed:
            # As Flink's lazyDestroy: waiters wake (and fail on their next request).
            self.availability.set_available()
            return
        if not self._available and self.num_requested < self.current_pool_size:
            segment = self.network_pool.request_pooled_segment()
            if segment is not None:
                # kept free, as Flink's checkAvailability does: only a recycled segment is
                # offered to waiting listeners
                self.num_requested += 1
                self._available.append(segment)
            elif not self._waiting_on_global:
                self._waiting_on_global = True
                self.network_pool.when_segment_available(self._on_global_segment)
        if self._available and self.unavailable_subpartitions == 0:
            self.availability.set_available()
        else:
            self.availability.set_unavailable()

    def _on_global_segment(self) -> None:
        self._waiting_on_global = False
        if not self.is_destroyed:
            self._update_availability()
            self._signal_segment()

    def is_available(self) -> bool:
        return self.availability.is_available

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once the pool is available (the helper's wait itself, not a
        coroutine around it: one frame less to enter and resume per wait)."""
        return self.availability.wait()

    @property
    def num_buffers(self) -> int:
        """The current pool size (`getNumBuffers`)."""
        return self.current_pool_size

    @property
    def num_available(self) -> int:
        return len(self._available)

    def num_obtainable(self) -> int:
        """Segments requests can still take before the pool runs dry (no overdraft): the
        free ones, and those below the pool size that the global pool has."""
        below = max(0, self.current_pool_size - self.num_requested)
        return len(self._available) + min(below, self.network_pool.num_available_segments)

    def best_effort_get_num_of_used_buffers(self) -> int:
        return max(0, self.num_requested - len(self._available))

    def subpartition_buffer_count(self, target: int) -> int:
        return self._subpartition_counts[target]

    def subpartition_buffer_counts(self) -> Sequence[int]:
        """How many buffers each subpartition holds (against `max_buffers_per_channel`)."""
        return self._subpartition_counts

    def destroy(self) -> None:
        """Give free segments back; outstanding ones go back as they are recycled."""
        if self.is_destroyed:
            return
        self.is_destroyed = True
        self._listeners.clear()
        while self._available:
            self.num_requested -= 1
            self.network_pool.recycle_pooled_segment(self._available.pop())
        self.network_pool.destroy_buffer_pool(self)
        self._update_availability()
        self._signal_segment()
