"""NetworkBufferPool: the TaskManager's fixed set of network memory segments (spec 1.2).

Local pools take segments from here without blocking; input channels take their
exclusive buffers as "unpooled" segments. Every pool's minimum and every unpooled
segment is *required*; what is left over is shared among the local pools by
redistribution (Flink 1.x proportional algorithm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from shuffle import kernel
from shuffle.buffer.buffer import MemorySegment
from shuffle.java_int import INT_MAX

if TYPE_CHECKING:
    from shuffle.buffer.local_buffer_pool import LocalBufferPool



#: Longest single wait of an unpooled request for a returned segment (Flink's `wait(2000)`).
UNPOOLED_WAIT = 2.0
#: Flink 2.x's key of the unpooled request timeout (the 1.x key is its deprecated alias).
REQUEST_TIMEOUT_KEY = "taskmanager.network.memory.buffers-request-timeout"


def _millis(seconds: float) -> int:
    """Whole milliseconds, as Java's `Duration.toMillis` (truncated; float noise aside)."""
    return round(seconds * 1_000_000) // 1000


class InsufficientBuffersError(IOError):
    """Not enough network memory for a pool's minimum or a channel's exclusive buffers."""


class NetworkBufferPool:
    """Owns `num_segments` segments of `segment_size` bytes."""

    def __init__(self, num_segments: int, segment_size: int,
                 exclusive_request_timeout: float = 30.0) -> None:
        if num_segments < 1:
            raise ValueError("a NetworkBufferPool needs at least one segment")
        if _millis(exclusive_request_timeout) <= 0:
            raise ValueError("The timeout for requesting exclusive buffers should be positive.")
        self.total_segments = num_segments
        self.segment_size = segment_size
        self.exclusive_request_timeout = exclusive_request_timeout
        # A free segment holds no bytes and no identity, so the free ones are a count: a
        # segment object is made when one is handed out and dropped when it comes back.
        self._num_available = num_segments
        self.num_total_required_buffers = 0
        self._pools: list[LocalBufferPool] = []
        self._pools_capacity = 0  # the sum of the pools' max - min: what they could take in all
        self._segment_waiters: list[Callable[[], None]] = []
        self._unpooled_event: kernel.Event | None = None

    # -- pooled segments (local pools) ------------------------------------------------

    def request_pooled_segment(self) -> MemorySegment | None:
        if not self._num_available:
            return None
        self._num_available -= 1
        return MemorySegment(self.segment_size)

    def recycle_pooled_segment(self, segment: MemorySegment) -> None:
        self._num_available += 1
        self._notify_segment_available()

    def when_segment_available(self, callback: Callable[[], None]) -> None:
        """Call `callback` (once) the next time a segment comes back."""
        self._segment_waiters.append(callback)

    def _notify_segment_available(self) -> None:
        if self._unpooled_event is not None:
            self._unpooled_event.set()
            self._unpooled_event = None
        if self._segment_waiters and self.num_available_segments:
            # Flink's local pools wait with `thenRun` on the global pool's availability
            # future; completing it runs every waiter, the last registered first (a
            # CompletableFuture's dependents are a stack): each takes a segment or, finding
            # none left, registers again. Waiting pools are served from both ends in turn.
            waiters, self._segment_waiters = self._segment_waiters, []
            for callback in reversed(waiters):
                callback()

    # -- unpooled segments (exclusive buffers of remote channels) -----------------------

    async def request_unpooled_segments(self, n: int) -> None:
        """Take `n` segments as required, waiting (bounded) while local pools give back
        excess. The caller holds them as a count (free segments hold nothing) and makes a
        `MemorySegment(segment_size)` when it uses one."""
        if n < 0:
            raise ValueError("Number of buffers to request must be non-negative.")
        if n == 0:
            return
        self._reserve(n)
        self.redistribute_buffers()
        if self._num_available >= n:
            # Nothing to wait for, so no deadline to keep: a timer per channel would only
            # sit in the kernel's heap, abandoned.
            self._num_available -= n
            return
        got = 0
        deadline = kernel.current_time() + self.exclusive_request_timeout
        try:
            # Flink's internalRequestMemorySegments: take a free segment or wait for a
            # returned one, at most UNPOOLED_WAIT; the deadline is checked only after such a
            # step, so the request fails at the first wake-up at or past it (up to 2 s late).
            while True:
                if self._num_available:
                    self._num_available -= 1
                    got += 1
                else:
                    self._unpooled_event = self._unpooled_event or kernel.Event()
                    with kernel.move_on_after(UNPOOLED_WAIT):
                        await self._unpooled_event.wait()
                if got >= n:
                    return
                if kernel.current_time() >= deadline:
                    raise InsufficientBuffersError(
                        f"Timeout triggered when requesting exclusive buffers: {self._config_description()},  "
                        f"or you may increase the timeout which is {_millis(self.exclusive_request_timeout)}ms "
                        f"by setting the key '{REQUEST_TIMEOUT_KEY}'.")
        except BaseException:
            # As Flink's requestUnpooledMemorySegments: whatever ends the wait (the timeout, or
            # the requesting task cancelled), the segments taken so far and the required count
            # go back.
            self._num_available += got
            self.num_total_required_buffers -= n
            self.redistribute_buffers()
            self._notify_segment_available()
            raise

    def recycle_unpooled_segments(self, n: int) -> None:
        """`n` segments taken with `request_unpooled_segments` come back."""
        self._num_available += n
        self.num_total_required_buffers -= n
        self.redistribute_buffers()
        self._notify_segment_available()

    # -- local pools --------------------------------------------------------------------

    def create_buffer_pool(self, min_buffers: int, max_buffers: int, num_subpartitions: int = 0,
                           max_buffers_per_channel: int = INT_MAX,
                           max_overdraft_buffers: int = 0) -> LocalBufferPool:
        """A LocalBufferPool with `min_buffers` required segments (fails if memory lacks)."""
        from shuffle.buffer.local_buffer_pool import LocalBufferPool

        # LocalBufferPool's checks, with its messages.
        if min_buffers < 1:
            raise ValueError(f"Required number of memory segments ({min_buffers}) should be larger than 0.")
        if max_buffers < min_buffers:
            raise ValueError(f"Maximum number of memory segments ({max_buffers}) should not be smaller than "
                             f"minimum ({min_buffers}).")
        self._reserve(min_buffers)
        pool = LocalBufferPool(self, min_buffers, max_buffers, num_subpartitions,
                               max_buffers_per_channel, max_overdraft_buffers)
        self._pools.append(pool)
        self._pools_capacity += max_buffers - min_buffers
        self.redistribute_buffers()
        return pool

    def destroy_buffer_pool(self, pool: LocalBufferPool) -> None:
        if pool in self._pools:
            self._pools.remove(pool)
            self._pools_capacity -= pool.max_buffers - pool.min_buffers
            self.num_total_required_buffers -= pool.min_buffers
            self.redistribute_buffers()

    def _reserve(self, n: int) -> None:
        if self.num_total_required_buffers + n > self.total_segments:
            available = self.total_segments - self.num_total_required_buffers
            raise InsufficientBuffersError(
                f"Insufficient number of network buffers: required {n}, but only {available} "
                f"available. {self._config_description()}.")
        self.num_total_required_buffers += n

    def _config_description(self) -> str:
        """Flink's `getConfigDescription`, which both of its memory errors quote."""
        return (f"The total number of network buffers is currently set to {self.total_segments} of "
                f"{self.segment_size} bytes each. You can increase this number by setting the configuration "
                "keys 'taskmanager.memory.network.fraction', 'taskmanager.memory.network.min', and "
                "'taskmanager.memory.network.max'")

    def redistribute_buffers(self) -> None:
        """Share the excess over all required segments among pools (Flink 1.x rule)."""
        pools = self._pools
        if not pools:
            return
        excess = self.total_segments - self.num_total_required_buffers
        if excess <= 0:
            for pool in pools:
                pool.set_num_buffers(pool.min_buffers)
            return
        if excess >= self._pools_capacity:
            # Each capacity is then the pool's max - min and all of it is distributed: the
            # proportional shares below come out as every pool's maximum.
            for pool in pools:
                pool.set_num_buffers(pool.max_buffers)
            return
        capacities = [min(excess, pool.max_buffers - pool.min_buffers) for pool in pools]
        total_capacity = sum(capacities)
        to_distribute = min(excess, total_capacity)
        distributed = 0
        cumulative = 0
        for pool, capacity in zip(pools, capacities):
            cumulative += capacity
            share = (to_distribute * cumulative // total_capacity - distributed) if total_capacity else 0
            distributed += share
            pool.set_num_buffers(pool.min_buffers + share)

    # -- metrics ------------------------------------------------------------------------

    @property
    def num_available_segments(self) -> int:
        return self._num_available
