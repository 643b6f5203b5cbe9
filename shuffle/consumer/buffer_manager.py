"""BufferManager: the free buffers of one RemoteInputChannel (spec 4.3).

Exclusive buffers (the channel's own) and floating buffers, both out of the gate's pool
(Flink 2.x: the gate's one LocalBufferPool holds all of its buffers). The channel aims to
hold `backlog + initial_credit` free buffers: what it newly obtains becomes credit;
floating buffers above that number go back to the gate as soon as exclusive ones return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shuffle import kernel
from shuffle.buffer.buffer import Buffer, MemorySegment
from shuffle.buffer.local_buffer_pool import LocalBufferPool

if TYPE_CHECKING:
    from shuffle.consumer.remote_input_channel import RemoteInputChannel


class BufferManager:
    __slots__ = ("channel", "pool", "exclusive", "floating", "num_required_buffers",
                 "is_waiting_for_floating_buffers", "num_exclusive_buffers", "_released", "_buffer_event")

    def __init__(self, channel: RemoteInputChannel) -> None:
        self.channel = channel
        #: The gate's pool, set when the channel is set up.
        self.pool: LocalBufferPool | None = None
        # lists, not deques: a few buffers each, and one pair per channel (an empty deque
        # costs ~700 bytes, a list 56). Free exclusive buffers are kept as their segments and
        # become Buffers when taken: an idle channel holds 2 segments, not 2 buffers with a
        # reference count and a bound recycler each (~250 bytes apiece).
        self.exclusive: list[MemorySegment] = []
        self.floating: list[Buffer] = []
        self.num_required_buffers = 0
        self.is_waiting_for_floating_buffers = False
        #: Flink's `numExclusiveBuffers`: the configured exclusive buffers of the channel.
        self.num_exclusive_buffers = channel.initial_credit
        self._released = False
        self._buffer_event: kernel.Event | None = None

    @property
    def available(self) -> int:
        return len(self.exclusive) + len(self.floating)

    def request_exclusive_buffers(self, pool: LocalBufferPool) -> None:
        """Take this channel's exclusive buffers out of the gate's pool, without waiting.

        As Flink 2.x's `BufferManager.requestExclusiveBuffers`: a segment the pool cannot give
        right now (another pool still holds it) is simply not taken, and the channel works on
        fewer exclusive buffers, floating ones making up the difference. (Flink also resizes
        the count to `(pool size - 1) // remote channels`; a pool never smaller than
        `remote channels * B + 1` leaves it at B, so that step is not modelled.)
        """
        self.pool = pool
        while len(self.exclusive) < self.num_exclusive_buffers and (segment := pool.request_memory_segment()) is not None:
            self.exclusive.append(segment)

    def request_buffer(self) -> Buffer | None:
        """A free buffer for an incoming payload: floating first, then exclusive."""
        self.num_required_buffers -= 1
        if self.floating:
            return self.floating.pop(0)
        if self.exclusive:
            return self._take_exclusive()
        return None

    def _take_exclusive(self) -> Buffer:
        return Buffer.of_segment(self.exclusive.pop(0), self._recycle_exclusive)

    def request_floating_buffers(self, k: int) -> int:
        """Aim to hold `k` free buffers; returns how many floating buffers were obtained."""
        if self._released:
            return 0
        self.num_required_buffers = k
        return self._try_request_floating()

    def _try_request_floating(self) -> int:
        pool = self.pool
        obtained = 0
        while self.available < self.num_required_buffers and not self.is_waiting_for_floating_buffers:
            buffer = pool.request_buffer()
            if buffer is not None:
                self.floating.append(buffer)
                obtained += 1
            elif pool.add_buffer_listener(self):
                self.is_waiting_for_floating_buffers = True
        return obtained

    def _recycle_exclusive(self, segment: MemorySegment) -> None:
        if self._released:
            self.pool.recycle(segment)
            return
        self.exclusive.append(segment)
        self._signal()
        if self.available > self.num_required_buffers and self.floating:
            self.floating.pop(0).recycle()
            return
        self.channel.notify_buffer_available(1)

    def notify_buffer_available(self, buffer: Buffer) -> bool:
        """BufferListener: the gate's pool offers a floating buffer."""
        self.is_waiting_for_floating_buffers = False
        waiting_without_credit = self._buffer_event is not None
        if self._released or (self.available >= self.num_required_buffers and not waiting_without_credit):
            return False
        self.floating.append(buffer)
        self._signal()
        self.channel.notify_buffer_available(1 + self._try_request_floating())
        return True

    def release_floating_buffers(self) -> None:
        """Give every floating buffer back (aligned barrier with zero exclusive buffers)."""
        self.num_required_buffers = 0
        while self.floating:
            self.floating.pop(0).recycle()

    def release_all_buffers(self) -> None:
        """Every free buffer back to the gate's pool."""
        if self._released:
            return
        self._released = True
        if self.pool is not None and self.is_waiting_for_floating_buffers:
            self.pool.remove_buffer_listener(self)
        while self.floating:
            self.floating.pop(0).recycle()
        while self.exclusive:
            self.pool.recycle(self.exclusive.pop())
        self._signal()  # a connection reader waiting for a buffer of this channel gives up

    # -- pre-credit mode (flow_control = "tcp") ------------------------------------------

    async def request_buffer_blocking(self) -> Buffer:
        """Without credit: take any free buffer, or wait for one while the connection stalls."""
        while True:
            if self._released:
                raise RuntimeError(f"channel {self.channel.name} released while waiting for a buffer")
            if self.floating:
                return self.floating.pop(0)
            if self.exclusive:
                return self._take_exclusive()
            buffer = self.pool.request_buffer()
            if buffer is not None:
                return buffer
            self._buffer_event = kernel.Event()
            if not self.is_waiting_for_floating_buffers and self.pool.add_buffer_listener(self):
                self.is_waiting_for_floating_buffers = True
            await self._buffer_event.wait()
            self._buffer_event = None

    def _signal(self) -> None:
        if self._buffer_event is not None:
            self._buffer_event.set()
