"""BufferManager: the free buffers of one RemoteInputChannel (spec 4.3).

Exclusive buffers (the channel's own, from the NetworkBufferPool) and floating buffers
(borrowed from the gate's pool). The channel aims to hold `backlog + initial_credit`
free buffers: what it newly obtains becomes credit; floating buffers above that number
go back to the gate as soon as exclusive ones return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shuffle import kernel
from shuffle.buffer.buffer import Buffer, MemorySegment
from shuffle.buffer.local_buffer_pool import LocalBufferPool
from shuffle.buffer.network_buffer_pool import NetworkBufferPool

if TYPE_CHECKING:
    from shuffle.consumer.remote_input_channel import RemoteInputChannel


class BufferManager:
    # The pools are the channel's gate's, read through it (as Flink's BufferManager asks
    # `inputChannel.inputGate`): one channel's manager holds only its own state.
    __slots__ = ("channel", "num_free_exclusive", "floating", "num_required_buffers",
                 "is_waiting_for_floating_buffers", "_released", "_buffer_event")

    def __init__(self, channel: RemoteInputChannel) -> None:
        self.channel = channel
        # Free exclusive buffers are a count: a free segment holds nothing, so one becomes
        # a segment and a Buffer only when taken (an idle channel holds two numbers, not two
        # segments, buffers, reference counts and bound recyclers). Floating buffers are the
        # gate pool's, lent as Buffers: a list, not a deque (a few at most, and an empty
        # deque costs ~700 bytes, a list 56), made with the first one (an idle channel,
        # which never borrowed, holds the empty tuple).
        self.num_free_exclusive = 0
        self.floating: list[Buffer] | tuple[()] = ()
        self.num_required_buffers = 0
        self.is_waiting_for_floating_buffers = False
        self._released = False
        self._buffer_event: kernel.Event | None = None

    @property
    def available(self) -> int:
        """Free buffers: exclusive and floating (read inline where it is asked per buffer)."""
        return self.num_free_exclusive + len(self.floating)

    async def request_exclusive_buffers(self, n: int) -> None:
        await self.channel.gate.network_pool.request_unpooled_segments(n)
        self.num_free_exclusive += n

    def request_buffer(self) -> Buffer | None:
        """A free buffer for an incoming payload: floating first, then exclusive."""
        self.num_required_buffers -= 1
        if self.floating:
            return self.floating.pop(0)
        if self.num_free_exclusive:
            return self._take_exclusive()
        return None

    def _take_exclusive(self) -> Buffer:
        self.num_free_exclusive -= 1
        return Buffer.of_segment(MemorySegment(self.channel.gate.network_pool.segment_size), self._recycle_exclusive)

    def request_floating_buffers(self, k: int) -> int:
        """Aim to hold `k` free buffers; returns how many floating buffers were obtained."""
        if self._released:
            return 0
        self.num_required_buffers = k
        if self.num_free_exclusive + len(self.floating) >= k:  # as mostly: it holds enough
            return 0
        return self._try_request_floating()

    def _try_request_floating(self) -> int:
        pool = self.channel.gate.buffer_pool
        obtained = 0
        while (not self.is_waiting_for_floating_buffers
               and self.num_free_exclusive + len(self.floating) < self.num_required_buffers):
            buffer = pool.request_buffer()
            if buffer is not None:
                self._add_floating(buffer)
                obtained += 1
            elif pool.add_buffer_listener(self):
                self.is_waiting_for_floating_buffers = True
        return obtained

    def _add_floating(self, buffer: Buffer) -> None:
        if self.floating:
            self.floating.append(buffer)
        else:
            self.floating = [buffer]

    def _recycle_exclusive(self, _segment: MemorySegment) -> None:
        if self._released:
            self.channel.gate.network_pool.recycle_unpooled_segments(1)
            return
        self.num_free_exclusive += 1
        if self._buffer_event is not None:  # `_signal`, per buffer
            self._buffer_event.set()
        if self.num_free_exclusive + len(self.floating) > self.num_required_buffers and self.floating:
            self.floating.pop(0).recycle()
            return
        self.channel.notify_buffer_available(1)

    def notify_buffer_available(self, buffer: Buffer) -> bool:
        """BufferListener: the gate's pool offers a floating buffer."""
        self.is_waiting_for_floating_buffers = False
        waiting_without_credit = self._buffer_event is not None
        if self._released or (self.num_free_exclusive + len(self.floating) >= self.num_required_buffers
                              and not waiting_without_credit):
            return False
        self._add_floating(buffer)
        if waiting_without_credit:
            self._signal()
        self.channel.notify_buffer_available(1 + self._try_request_floating())
        return True

    def release_floating_buffers(self) -> None:
        """Give every floating buffer back (aligned barrier with zero exclusive buffers)."""
        self.num_required_buffers = 0
        while self.floating:
            self.floating.pop(0).recycle()

    def release_all_buffers(self) -> None:
        """Exclusive segments back to the NetworkBufferPool, floating ones to the gate."""
        if self._released:
            return
        self._released = True
        if self.is_waiting_for_floating_buffers:
            self.channel.gate.buffer_pool.remove_buffer_listener(self)
        free_exclusive, self.num_free_exclusive = self.num_free_exclusive, 0
        while self.floating:
            self.floating.pop(0).recycle()
        if free_exclusive:
            self.channel.gate.network_pool.recycle_unpooled_segments(free_exclusive)
        self._signal()  # a connection reader waiting for a buffer of this channel gives up

    # -- pre-credit mode (flow_control = "tcp") ------------------------------------------

    async def request_buffer_blocking(self) -> Buffer:
        """Without credit: take any free buffer, or wait for one while the connection stalls."""
        while True:
            if self._released:
                raise RuntimeError(f"channel {self.channel.name} released while waiting for a buffer")
            if self.floating:
                return self.floating.pop(0)
            if self.num_free_exclusive:
                return self._take_exclusive()
            pool = self.channel.gate.buffer_pool
            buffer = pool.request_buffer()
            if buffer is not None:
                return buffer
            self._buffer_event = kernel.Event()
            if not self.is_waiting_for_floating_buffers and pool.add_buffer_listener(self):
                self.is_waiting_for_floating_buffers = True
            await self._buffer_event.wait()
            self._buffer_event = None

    def _signal(self) -> None:
        if self._buffer_event is not None:
            self._buffer_event.set()
