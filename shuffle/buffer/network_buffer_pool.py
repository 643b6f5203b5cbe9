"""NetworkBufferPool: the TaskManager's fixed set of network memory segments (spec 1.2).

Local pools (one per result partition, one per input gate) take segments from here
without blocking. Every pool's minimum is *required*; what is left over is shared among
the local pools by redistribution (Flink 2.x: in proportion to each pool's expected size).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Callable

import numpy as np

from shuffle.buffer.buffer import MemorySegment
from shuffle.java_int import INT_MAX

if TYPE_CHECKING:
    from shuffle.buffer.local_buffer_pool import LocalBufferPool



class InsufficientBuffersError(IOError):
    """Not enough network memory for a pool's minimum, or exclusive buffers not obtained in time."""


class NetworkBufferPool:
    """Owns `num_segments` segments of `segment_size` bytes."""

    def __init__(self, num_segments: int, segment_size: int) -> None:
        if num_segments < 1:
            raise ValueError("a NetworkBufferPool needs at least one segment")
        self.total_segments = num_segments
        self.segment_size = segment_size
        # Segments never handed out yet are made on first use: a large pool starts cheaply.
        self._available: deque[MemorySegment] = deque()
        self._num_fresh = num_segments
        self.num_total_required_buffers = 0
        self._pools: list[LocalBufferPool] = []
        self._pools_capacity = 0  # the sum of the pools' max - min: what they could take in all
        self._segment_waiters: list[Callable[[], None]] = []
        self._destroyed = False

    # -- pooled segments (local pools) ------------------------------------------------

    def request_pooled_segment(self) -> MemorySegment | None:
        if self._available:
            return self._available.popleft()
        return self._fresh_segment()

    def _fresh_segment(self) -> MemorySegment | None:
        if not self._num_fresh:
            return None
        index = self.total_segments - self._num_fresh
        self._num_fresh -= 1
        return MemorySegment(index, self.segment_size)

    def recycle_pooled_segment(self, segment: MemorySegment) -> None:
        self._available.append(segment)
        self._notify_segment_available()

    def when_segment_available(self, callback: Callable[[], None]) -> None:
        """Call `callback` (once) the next time a segment comes back."""
        self._segment_waiters.append(callback)

    def _notify_segment_available(self) -> None:
        while self._segment_waiters and self.num_available_segments:
            self._segment_waiters.pop(0)()

    # -- local pools --------------------------------------------------------------------

    def create_buffer_pool(self, min_buffers: int, max_buffers: int, num_subpartitions: int = 0,
                           max_buffers_per_channel: int = INT_MAX,
                           max_overdraft_buffers: int = 0) -> LocalBufferPool:
        """A LocalBufferPool with `min_buffers` required segments (fails if memory lacks)."""
        from shuffle.buffer.local_buffer_pool import LocalBufferPool

        if min_buffers < 1 or max_buffers < min_buffers:
            raise ValueError(f"invalid pool size: min {min_buffers}, max {max_buffers}")
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
                f"available. The total number of network buffers is currently set to "
                f"{self.total_segments} of {self.segment_size} bytes each. You can increase "
                "this number by setting the configuration keys "
                "'taskmanager.memory.network.fraction', 'taskmanager.memory.network.min', "
                "and 'taskmanager.memory.network.max'.")
        self.num_total_required_buffers += n

    def redistribute_buffers(self) -> None:
        """Size the resizable pools (min < max) as Flink 2.x's `redistributeBuffers`: the
        segments not required by anyone plus the pools' minimums are shared in proportion to
        each pool's expected number of segments (its minimum: N+1 for a pipelined partition,
        N*B+1 for a gate), clamped to [min, max]; what clamping leaves over (or takes
        beyond) is given to (taken from) the pools that can still grow (shrink), a ceiling
        share each in turn, until none is left or no pool can take it. Flink goes through
        its pools in a HashSet's order, so which pool gets a rounding's odd segment is
        arbitrary there; here it is creation order."""
        pools = [pool for pool in self._pools if pool.min_buffers < pool.max_buffers]
        if not pools:
            return
        excess = self.total_segments - self.num_total_required_buffers
        if excess <= 0:
            for pool in pools:
                pool.set_num_buffers(pool.min_buffers)
            return
        if excess >= self._pools_capacity:
            # Enough for every pool's maximum (what the shares below come to).
            for pool in pools:
                pool.set_num_buffers(pool.max_buffers)
            return
        total_weight = sum(pool.min_buffers for pool in pools)
        to_distribute = excess + total_weight
        sizes = [max(pool.min_buffers, min(pool.max_buffers, pool.min_buffers * to_distribute // total_weight))
                 for pool in pools]
        delta = to_distribute - sum(sizes)
        while delta:
            remaining = _spread(delta, pools, sizes)
            if remaining == delta:
                break
            delta = remaining
        for pool, size in zip(pools, sizes):
            pool.set_num_buffers(size)

    # -- metrics ------------------------------------------------------------------------

    @property
    def num_available_segments(self) -> int:
        return len(self._available) + self._num_fresh


def _spread(delta: int, pools: list[LocalBufferPool], sizes: list[int]) -> int:
    """Give `delta` segments (take them back if negative) to the pools that can still grow
    (shrink), in turn, a ceiling share of their weight each (Java float arithmetic, as
    Flink's); returns what is left."""
    sign = 1 if delta > 0 else -1
    bounds = [pool.max_buffers if sign > 0 else pool.min_buffers for pool in pools]
    movable = [i for i, (size, bound) in enumerate(zip(sizes, bounds)) if size != bound]
    if not movable:
        return delta
    wanted = abs(delta)
    piece = np.float32(wanted) / np.float32(sum(pools[i].min_buffers for i in movable))
    moved = 0
    for i in movable:
        step = min(wanted - moved, math.ceil(piece * np.float32(pools[i].min_buffers)))
        new_size = min(bounds[i], sizes[i] + step) if sign > 0 else max(bounds[i], sizes[i] - step)
        moved += abs(new_size - sizes[i])
        sizes[i] = new_size
        if moved == wanted:
            break
    return sign * (wanted - moved)
