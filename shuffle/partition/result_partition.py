"""ResultPartition: what one producing subtask writes for one data set (spec 2.3).

Writes serialized records into per-subpartition BufferBuilders taken from its
LocalBufferPool (min N+1, max N*B+F for bounded types, 5 overdraft for pipelined), a
shared builder for broadcast records, and events into every subpartition. Requesting a
builder first tries without blocking; when the pool is exhausted the writer blocks, and
that time is hard back-pressure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Protocol

from shuffle import kernel
from shuffle.buffer.buffer_builder import BufferBuilder, BufferConsumer
from shuffle.buffer.local_buffer_pool import LocalBufferPool
from shuffle.buffer.network_buffer_pool import NetworkBufferPool
from shuffle.channel_state import ChannelStateWriter
from shuffle.java_int import INT_MAX
from shuffle.config import NetworkConfig
from shuffle.errors import check
from shuffle.partition.pipelined_subpartition import PipelinedSubpartition
from shuffle.partition.result_partition_type import ResultPartitionType
from shuffle.partition.target_groups import TargetGroups
from shuffle.serialization.event_serializer import data_type_for_event, event_buffer_bytes


class Timer(Protocol):
    """What the task's metrics offer for hard back-pressure (Flink's TimerGauge)."""

    def mark_start(self) -> None: ...

    def mark_end(self) -> None: ...


def partition_pool_size(num_subpartitions: int, partition_type: ResultPartitionType,
                        config: NetworkConfig) -> tuple[int, int]:
    """(min, max) buffers of a partition's pool (NettyShuffleUtils, spec 1.4)."""
    min_buffers = num_subpartitions + 1
    if partition_type.is_bounded:
        max_buffers = (num_subpartitions * max(1, config.exclusive_buffers_per_channel)
                       + config.floating_buffers_per_gate)
    else:
        max_buffers = INT_MAX
    return min_buffers, max(min_buffers, max_buffers)


class ResultPartition:
    """A pipelined, buffer-writing result partition."""

    def __init__(self, partition_id: str, num_subpartitions: int,
                 partition_type: ResultPartitionType, config: NetworkConfig,
                 owner_name: str = "") -> None:
        if num_subpartitions < 1:
            raise ValueError("a result partition needs at least one subpartition")
        self.partition_id = partition_id
        self.partition_type = partition_type
        self.config = config
        self.owner_name = owner_name
        #: Where the subpartitions put the in-flight data unaligned barriers overtake (the task's).
        self.channel_state_writer: ChannelStateWriter | None = None
        self.subpartitions = [PipelinedSubpartition(i, self) for i in range(num_subpartitions)]
        self.buffer_pool: LocalBufferPool | None = None
        self._unicast: list[BufferBuilder | None] = [None] * num_subpartitions
        self._broadcast: BufferBuilder | None = None
        self.hard_back_pressure_timer: Timer | None = None
        self.num_bytes_out = 0
        self.num_buffers_out = 0
        self.is_finished = False
        self.is_released = False
        #: Why the partition was released, if its producer failed (Flink's `getFailureCause`):
        #: the server sends it to each remote consumer that reads on (ProducerFailedError).
        self.failure_cause: BaseException | None = None
        self._consumed: set[int] = set()
        #: Flink's numberOfUsers: each subpartition's reader and the producer itself (until
        #: it closes the partition); released when none is left.
        self._users = num_subpartitions + 1
        self._producer_closed = False
        self._all_data_processed_acks: set[int] = set()
        self.all_data_processed = kernel.Event()
        self.on_release: Callable[[ResultPartition], None] | None = None  # set by the ResultPartitionManager

    @property
    def num_subpartitions(self) -> int:
        return len(self.subpartitions)

    def setup(self, network_pool: NetworkBufferPool) -> None:
        """Create the partition's buffer pool (fails if network memory lacks its minimum)."""
        min_buffers, max_buffers = partition_pool_size(self.num_subpartitions, self.partition_type, self.config)
        overdraft = self.config.max_overdraft_buffers_per_gate if self.partition_type.is_pipelined else 0
        self.buffer_pool = network_pool.create_buffer_pool(
            min_buffers, max_buffers, self.num_subpartitions,
            self.config.max_buffers_per_channel, overdraft)

    # -- records -------------------------------------------------------------------------

    async def emit_record(self, data: memoryview | bytes, target: int, record_size: int = 0) -> None:
        """Append serialized records (each `record_size` bytes; 0 = one record) to a subpartition."""
        if self.is_finished:
            raise self._finished_error()
        if self._broadcast is not None:
            self._finish_broadcast_builder()
        n = len(data)
        record_size = record_size or n
        builder = self._unicast[target]
        if builder is None:
            builder = await self._new_unicast_builder(target, 0, record_size)
        pos = builder.append(data, 0)
        while pos < n:
            self._finish_unicast_builder(target)
            partial = (record_size - pos % record_size) % record_size
            builder = await self._new_unicast_builder(target, partial, partial or record_size)
            pos += builder.append(data, pos)
        if builder.is_full():
            self._finish_unicast_builder(target)

    def room_bytes(self) -> int:
        """Bytes that can be written before any buffer of this partition fills: the least room
        of the open builders, and of a new buffer where none is open."""
        builder = self._broadcast
        if builder is not None:
            return builder.capacity - builder.position
        room = min(min([sub.desired_buffer_size for sub in self.subpartitions]), self.config.buffer_size)
        for builder in self._unicast:
            if builder is not None and builder.capacity - builder.position < room:
                room = builder.capacity - builder.position
        return room

    async def broadcast_record(self, data: memoryview | bytes, record_size: int = 0) -> None:
        """Append records to one shared builder read by every subpartition."""
        if self.is_finished:
            raise self._finished_error()
        for target in range(self.num_subpartitions):
            self._finish_unicast_builder(target)
        n = len(data)
        record_size = record_size or n
        builder = self._broadcast
        if builder is None:
            builder = await self._new_broadcast_builder(0, record_size)
        pos = builder.append(data, 0)
        while pos < n:
            self._finish_broadcast_builder()
            partial = (record_size - pos % record_size) % record_size
            builder = await self._new_broadcast_builder(partial, partial or record_size)
            pos += builder.append(data, pos)
        if builder.is_full():
            self._finish_broadcast_builder()

    async def add_recovered_state(self, target: int, chunks: Sequence[bytes]) -> None:
        """Write a restored checkpoint's in-flight data of subpartition `target` back, one
        buffer per persisted buffer, ahead of any record (Flink's recovered output state)."""
        for chunk in chunks:
            builder = await self._new_unicast_builder(target, 0, len(chunk))
            written = builder.append(memoryview(chunk), 0)
            check(written == len(chunk), f"{self.partition_id}: recovered buffer of {len(chunk)} B "
                                         f"does not fit a {builder.capacity} B segment")
            self._finish_unicast_builder(target)
        if chunks:
            self.flush(target)

    def records_before_unavailable(self, record_size: int, broadcast: bool, limit: int) -> int:
        """How many of the next `limit` records (`record_size` wire bytes each) Flink's
        per-record loop writes before its availability check stops it: up to and including
        the record that takes the pool's last obtainable segment, or the one that brings a
        subpartition to its buffer quota; at least one.

        A batch of records is one write here; capping it so keeps a back-pressured writer
        out of overdraft buffers that Flink's writer, checking after every record, would not
        touch (with debloated buffers a batch spans many). Exact for one subpartition and
        for broadcast (one builder takes every record). Over n subpartitions it takes the
        records as spread evenly (the last n segments taken may hold almost nothing), or all
        going to the subpartition nearest its quota, whichever stops first; with the channel
        of each record known, `records_before_unavailable_to` is exact.
        """
        pool = self.buffer_pool
        if pool is None or not pool.is_available():
            return min(limit, 1)
        obtainable = pool.num_obtainable()
        counts = pool.subpartition_buffer_counts()
        if broadcast or self.num_subpartitions == 1:
            # broadcast builders count against subpartition 0's quota, as Flink requests them
            if broadcast:
                builder, desired = self._broadcast, min(sub.desired_buffer_size for sub in self.subpartitions)
            else:
                builder, desired = self._unicast[0], self.subpartitions[0].desired_buffer_size
            held = counts[0]
            takes = self._segment_takes(builder, desired, limit, record_size,
                                        self._takes_that_matter(held, obtainable))
            return self._first_stop([(j, held + taken) for taken, j in enumerate(takes, 1)], obtainable, limit)
        size = self._smallest_new_buffer(record_size)
        n = self.num_subpartitions
        quota = pool.max_buffers_per_channel - max(counts)
        if obtainable <= 0 or quota <= 0:
            return min(limit, 1)
        least = min(max(0, obtainable - n), quota - 1) * size  # bytes, whatever the open builders hold
        if least // record_size + 1 >= limit:
            return limit
        left = [builder.writable_bytes if builder is not None else 0 for builder in self._unicast]
        # spread over the subpartitions, every open builder fills before the last n requests;
        # with fewer segments than subpartitions, the pool runs dry after that share of them
        spread = (obtainable - n) * size + sum(left) if obtainable >= n else sum(left) * obtainable // n
        # all to one subpartition: it reaches its quota of buffers
        limit_per_channel = pool.max_buffers_per_channel - 1
        concentrated = min(room + (limit_per_channel - count) * size for room, count in zip(left, counts))
        return min(limit, min(spread, concentrated) // record_size + 1)

    def records_before_unavailable_to(self, groups: TargetGroups, record_size: int) -> int:
        """`records_before_unavailable`, exact, for records of `record_size` wire bytes going
        to the subpartitions `groups.targets` in order: up to and including the record that
        takes the pool's last obtainable segment or brings a subpartition to its quota.

        Only the records that take a segment can stop the loop, and a batch has few: they are
        found per subpartition (`_segment_takes`; none where the open builder holds all of
        that subpartition's records), then taken in batch order.
        """
        n = len(groups)
        pool = self.buffer_pool
        if pool is None or not pool.is_available() or n <= 1:
            return min(n, 1)
        obtainable = pool.num_obtainable()
        counts = pool.subpartition_buffer_counts()
        one_channel = len(groups.channels) == 1
        starts = None
        takes = []  # (batch position, the subpartition's segment count once it is taken)
        for channel in groups.channels:
            records, builder = groups.counts[channel], self._unicast[channel]
            if builder is not None and builder.writable_bytes >= records * record_size:
                continue
            held = counts[channel]
            segment_takes = self._segment_takes(builder, self.subpartitions[channel].desired_buffer_size, records,
                                                record_size, self._takes_that_matter(held, obtainable))
            if one_channel:
                takes.extend((j, held + taken) for taken, j in enumerate(segment_takes, 1))
                continue
            if starts is None:
                order, starts = groups.order, groups.starts()
            start = starts[channel]
            takes.extend((int(order[start + j]), held + taken) for taken, j in enumerate(segment_takes, 1))
        takes.sort()
        return self._first_stop(takes, obtainable, n)

    def _segment_takes(self, builder: BufferBuilder | None, desired: int, records: int, record_size: int,
                       most: int) -> Iterator[int]:
        """Of the next `records` records (`record_size` bytes each) one builder stream takes,
        the index of each that takes a new segment, up to `most` of them; `builder` is the
        stream's open builder, if any.

        A new builder holds a segment, trimmed when the consumers announced less (`desired`,
        debloating), but never below the rest of the record it starts with, nor below a
        whole record it starts with (`_new_unicast_builder`, `_new_broadcast_builder`). The
        record at the byte where a segment starts takes it.
        """
        size = self.buffer_pool.network_pool.segment_size
        trimmed = 0 < desired < size
        end = records * record_size
        at = 0 if builder is None else builder.writable_bytes  # where the next segment starts
        for _ in range(most):
            if at >= end:
                return
            yield at // record_size
            if not trimmed:
                at += size
                continue
            into = at % record_size
            starts_with = record_size - into if into else record_size
            at += min(size, max(desired, starts_with))

    def _takes_that_matter(self, held: int, obtainable: int) -> int:
        """New segments of one subpartition that can matter to where the loop stops: up to its
        quota and up to what the pool can give (at least the one that stops it)."""
        return max(1, min(self.buffer_pool.max_buffers_per_channel - held, obtainable))

    def _first_stop(self, takes: list[tuple[int, int]], obtainable: int, records: int) -> int:
        """Where the loop stops, given the records that take segments in batch order (position,
        the subpartition's segment count after): the record taking the pool's last obtainable
        segment or reaching a quota; all `records` if none does."""
        quota = self.buffer_pool.max_buffers_per_channel
        for total, (position, held) in enumerate(takes, 1):
            if total >= obtainable or held >= quota:
                return position + 1
        return records

    def _smallest_new_buffer(self, record_size: int) -> int:
        """The least a new unicast builder of any subpartition holds: a segment, cut to what
        its consumer announced when debloating (never below a record it starts with)."""
        size = self.buffer_pool.network_pool.segment_size
        if not self.config.debloat:
            return size
        return min(min(size, max(sub.desired_buffer_size, record_size)) for sub in self.subpartitions)

    def _finished_error(self) -> RuntimeError:
        """What writing a record into a finished partition raises (checked inline by the
        writers: one call less per record batch)."""
        return RuntimeError(f"Partition {self.partition_id} already finished.")

    async def _request_builder(self, target: int) -> BufferBuilder:
        pool = self.buffer_pool
        if pool is None:
            raise RuntimeError(f"result partition {self.partition_id} was not set up")
        builder = pool.request_buffer_builder(target)
        if builder is None:
            timer = self.hard_back_pressure_timer
            if timer is not None:
                timer.mark_start()
            try:
                builder = await pool.request_buffer_builder_blocking(target)
            finally:
                if timer is not None:
                    timer.mark_end()
        return builder

    async def _new_unicast_builder(self, target: int, partial_record_length: int,
                                   record_bytes: int) -> BufferBuilder:
        """A builder for `target` that starts with `record_bytes` of one record (the rest of a
        record in progress, `partial_record_length`, or a whole new one)."""
        builder = await self._request_builder(target)
        desired = self.subpartitions[target].add(builder.create_buffer_consumer_from(0), partial_record_length)
        if 0 < desired < builder.capacity:
            # Flink's resizeBuffer: never below the record bytes the new buffer starts with
            # (the debloater itself announces no less than 256 B).
            builder.trim(max(record_bytes, desired))
        self._unicast[target] = builder
        return builder

    async def _new_broadcast_builder(self, partial_record_length: int, record_bytes: int) -> BufferBuilder:
        """The shared builder, starting with `record_bytes` of one record (as
        `_new_unicast_builder`), trimmed to the smallest size a consumer asked for."""
        # Flink requests the shared builder for subpartition 0: broadcast buffers count
        # against that subpartition's quota (10), which stops the writer before the pool
        # (2 per subpartition + 8) runs dry.
        builder = await self._request_builder(0)
        desired = INT_MAX
        for sub in self.subpartitions:
            size = sub.add(builder.create_buffer_consumer_from(0), partial_record_length)
            if size != -1 and size < desired:  # as Flink: a finished or released one has no say
                desired = size
        if 0 < desired < builder.capacity:
            builder.trim(max(record_bytes, desired))
        self._broadcast = builder
        return builder

    def _finish_unicast_builder(self, target: int) -> None:
        builder = self._unicast[target]
        if builder is not None:
            self.num_bytes_out += builder.finish()
            self.num_buffers_out += 1
            builder.close()
            self._unicast[target] = None

    def _finish_broadcast_builder(self) -> None:
        builder = self._broadcast
        if builder is not None:
            self.num_bytes_out += builder.finish() * self.num_subpartitions
            self.num_buffers_out += self.num_subpartitions
            builder.close()
            self._broadcast = None

    def _finish_all_builders(self) -> None:
        self._finish_broadcast_builder()
        for target in range(self.num_subpartitions):
            self._finish_unicast_builder(target)

    # -- events, flushing, lifecycle -----------------------------------------------------

    def broadcast_event(self, event: object, is_priority: bool = False) -> None:
        """Finish open buffers, then queue the event in every subpartition (no credit needed)."""
        self._finish_all_builders()
        payload = event_buffer_bytes(event)
        data_type = data_type_for_event(event, is_priority)
        for sub in self.subpartitions:
            sub.add(BufferConsumer.for_event(payload, data_type))

    def set_channel_state_writer(self, writer: ChannelStateWriter) -> None:
        """Where unaligned barriers put the in-flight data they overtake."""
        self.channel_state_writer = writer

    def aligned_barrier_timeout(self, checkpoint_id: int) -> None:
        """Turn a still-queued timeoutable barrier of `checkpoint_id` into an unaligned one."""
        for sub in self.subpartitions:
            sub.aligned_barrier_timeout(checkpoint_id)

    def flush(self, target: int) -> None:
        self.subpartitions[target].flush()

    def flush_all(self) -> None:
        for sub in self.subpartitions:
            sub.flush()

    def finish(self) -> None:
        """End of data: EndOfPartition goes last into every subpartition."""
        self._finish_all_builders()
        for sub in self.subpartitions:
            sub.finish()
        self.is_finished = True

    def is_available(self) -> bool:
        return self.buffer_pool is not None and self.buffer_pool.is_available()

    def wait_available(self) -> Awaitable[None]:
        """Await it: returns once the pool is available (the pool's wait itself)."""
        if self.buffer_pool is None:
            raise RuntimeError(f"result partition {self.partition_id} was not set up")
        return self.buffer_pool.wait_available()

    def on_consumed_subpartition(self, index: int) -> None:
        """A reader released subpartition `index`: one user less (a repeated call counts once)."""
        if self.is_released or index in self._consumed:
            return
        self._consumed.add(index)
        self._one_user_less()

    def _one_user_less(self) -> None:
        """Release once every reader and the producer are done with it (release-by-upstream,
        Flink's `decrementNumberOfUsers`): queued data stays for a reader that is gone until then."""
        self._users -= 1
        if self._users == 0:
            self.release()

    def on_all_data_processed(self, index: int) -> None:
        self._all_data_processed_acks.add(index)
        if len(self._all_data_processed_acks) == self.num_subpartitions:
            self.all_data_processed.set()

    def close(self) -> None:
        """The producer is done with the partition (its task ended, finished or not): the open
        builders are let go and the pool is destroyed, its queued buffers going back to network
        memory as readers recycle them (Flink's `close`, then `lazyDestroy`); one user less."""
        self._close_builders()
        if self.buffer_pool is not None:
            self.buffer_pool.destroy()
        if not self._producer_closed:
            self._producer_closed = True
            if not self.is_released:
                self._one_user_less()

    def release(self, cause: BaseException | None = None) -> None:
        """Recycle everything queued; the pool stays until the producer closes the partition
        (as in Flink: a record written after a release goes to a buffer that is dropped).
        `cause`: the producer failed with it (Flink's `release(Throwable)`, through the
        task's `fail`); readers are not told, they find it as they next read."""
        if self.is_released:
            return
        self.is_released = True
        self.failure_cause = cause
        self._close_builders()
        for sub in self.subpartitions:
            sub.release()
        if self.on_release is not None:
            self.on_release(self)

    def _close_builders(self) -> None:
        for builder in self._unicast:
            if builder is not None:
                builder.close()
        self._unicast = [None] * self.num_subpartitions
        if self._broadcast is not None:
            self._broadcast.close()
            self._broadcast = None

    # -- metrics -------------------------------------------------------------------------

    @property
    def output_queue_length(self) -> int:
        return sum([sub.number_of_queued_buffers for sub in self.subpartitions])

    @property
    def output_queue_size(self) -> int:
        """`outputQueueSize`: queued bytes over the subpartitions."""
        return sum([sub.queued_bytes for sub in self.subpartitions])

    def out_pool_usage(self) -> tuple[int, int]:
        """(used, size) of the pool, for `outPoolUsage`."""
        pool = self.buffer_pool
        if pool is None:
            return 0, 0
        return pool.best_effort_get_num_of_used_buffers(), pool.num_buffers
