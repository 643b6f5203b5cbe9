"""A scripted credit-flow bench: one producer partition and one consumer gate per subpartition.

For regression tests of credit flow. The producer and the consumers run on simulated
TaskManagers (or the consumers share the producer's TaskManager: local channels); the test
drives them step by step and reads the state of both ends. In pytest, the `credit_flow`
fixture opens one; elsewhere, inside `shuffle.kernel.run(main, mode="sim")`:

    async with CreditFlowHarness.open(channels=2) as h:
        await h.emit_buffers(0, 3)          # three full buffers into subpartition 0
        await h.settle()                    # let the network run (virtual time)
        # two are visible (the third is still being written) and went out on the initial
        # credit; the first carried backlog 1, so the consumer asked for 1 + 2 buffers:
        # it had one exclusive buffer left and took two floating ones, one AddCredit(2)
        assert h.receiver(0).queued == 2 and h.credits_announced(0) == [2]
        assert h.sender(0).credit == 2 and h.receiver(0).required == 2
        h.consume(0)                        # the consumer task reads and recycles one buffer
        await h.settle()
        # the recycled exclusive buffer made 3 free buffers for 2 required: a floating one
        # went back to the gate's pool instead of becoming credit
        assert h.credits_announced(0) == [2] and h.receiver(0).floating_free == 0

Nothing consumes unless the test says so (`consume`), or a channel is set to consume
continuously (`auto_consume`), which `stall`/`resume` pause and restart.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, TypeVar

from shuffle import kernel
from shuffle.api.events import AbstractEvent
from shuffle.buffer.data_type import DataType
from shuffle.config import NetworkConfig
from shuffle.consumer.local_input_channel import LocalInputChannel
from shuffle.consumer.remote_input_channel import RemoteInputChannel
from shuffle.consumer.single_input_gate import SingleInputGate
from shuffle.environment import InputChannelDescriptor, NettyShuffleEnvironment
from shuffle.partition.result_partition import ResultPartition
from shuffle.serialization.event_serializer import data_type_for_event
from shuffle.serialization.record_serializer import RecordSerializer
from shuffle.serialization.records import GenericFormat
from shuffle.serialization.spanning_deserializer import SpanningRecordDeserializer
from shuffle.trace import NULL_TRACER, Tracer
from shuffle.transport.sim_link import SimNetwork

PARTITION_ID = "partition-0"


@dataclass(frozen=True)
class SenderState:
    """The producer's view of one channel: its subpartition and the reader that sends it."""

    # None where no credit applies: a local channel, flow_control="tcp", or no reader at the
    # producer (the channel was released or cancelled)
    credit: int | None
    # the backlog the next buffer would announce: finished data buffers queued (events not
    # counted; the buffer still being written only once flushed), 0 while blocked
    backlog: int
    queued: int  # buffers and events queued, the one being written included
    blocked: bool  # an aligned barrier went out: nothing more until resume_consumption
    pool_buffers: int  # buffers of the subpartition held from the partition's pool
    queue: tuple[DataType, ...]  # what is queued, head first (priority events lead)


@dataclass(frozen=True)
class ReceiverState:
    """The consumer's view of one channel (all 0 for a local channel, which has no buffers of
    its own): its received buffers and its BufferManager."""

    queued: int  # buffers and events received, not yet read by the task
    exclusive_free: int  # exclusive buffers free to receive into
    floating_free: int  # floating buffers the channel holds, free to receive into
    required: int  # free buffers it wants (numRequiredBuffers): the last backlog + initial credit
    unannounced_credit: int  # credit made, not yet sent in an AddCredit
    initial_credit: int  # the exclusive buffers, announced with the partition request
    queue: tuple[DataType, ...]  # what was received, head first (priority events lead)


@dataclass(frozen=True)
class Consumed:
    """One buffer or event the consumer task read (`consume`)."""

    data_type: DataType  # as it travelled: an unaligned barrier is PRIORITIZED_EVENT_BUFFER
    size: int  # bytes
    channel: int  # the harness channel it came from (with `one_gate`, not always the one asked)
    event: AbstractEvent | None = None  # the event, None for a data buffer


Method = TypeVar("Method", bound=Callable[..., Any])


def _by_channel(method: Method) -> Method:
    """A method whose first argument is a channel: a channel the harness does not have is an
    IndexError naming it and the channels there are (a negative one would take one from the end)."""
    name = list(inspect.signature(method).parameters)[1]

    @functools.wraps(method)
    def checked(self: CreditFlowHarness, *args: Any, **kwargs: Any) -> Any:
        channel = args[0] if args else kwargs.get(name)
        count = len(self.targets)
        if channel is not None and not (type(channel) is int and 0 <= channel < count):
            raise IndexError(f"no channel {channel!r}: the harness has {count} channel(s), 0 to {count - 1}")
        return method(self, *args, **kwargs)

    return checked  # type: ignore[return-value]


def _driving(method: Method) -> Method:
    """A method that drives the network: on a closed harness it is a RuntimeError saying so
    (its tasks are gone, so it would change nothing, or fail somewhere inside)."""
    @functools.wraps(method)
    def checked(self: CreditFlowHarness, *args: Any, **kwargs: Any) -> Any:
        if self.closed:
            raise RuntimeError(f"{method.__name__}() on a closed harness: drive a harness inside the test that "
                               "opened it (credit_flow), or inside its `async with CreditFlowHarness.open(...)`")
        return method(self, *args, **kwargs)

    return checked  # type: ignore[return-value]


def _check_count(method: str, name: str, value: float) -> None:
    """A count or time a test gives the harness: negative, it would do nothing and say nothing."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{method}: {name} must be a number >= 0, got {value!r}")


def _check_kernel(transport: str) -> None:
    """A transport on the wrong kernel fails deep inside it (the simulated link reads a
    virtual clock that is not there; real sockets need trio): say so before starting."""
    mode = kernel.current_mode()
    if transport in ("sim", "sim_frames") and mode != "sim":
        raise RuntimeError(f"transport={transport!r} runs on the sim kernel, not under trio: use the credit_flow "
                           "fixture, or open the harness inside shuffle.kernel.run(main, mode='sim')")
    if transport == "tcp" and mode != "realtime":
        raise RuntimeError("transport='tcp' uses real sockets and runs on the realtime kernel, not in virtual time "
                           "(the credit_flow fixture): open it inside shuffle.kernel.run(main, mode='realtime')")


def _side(side: str, producer: NettyShuffleEnvironment,
          consumer: NettyShuffleEnvironment) -> NettyShuffleEnvironment:
    """The TaskManager a `side` argument names ("producer" or "consumer")."""
    if side == "consumer":
        return consumer
    if side == "producer":
        return producer
    raise ValueError(f"side must be 'consumer' or 'producer', not {side!r}")


class CreditFlowHarness:
    def __init__(self, config: NetworkConfig, producer: NettyShuffleEnvironment,
                 consumer: NettyShuffleEnvironment, targets: list[tuple[ResultPartition, int]],
                 gates: list[SingleInputGate], tracer: Tracer, nursery: Any,
                 slots: list[tuple[int, int]] | None = None) -> None:
        self.config = config
        self.producer = producer
        self.consumer = consumer
        self.targets = targets  # channel -> (producing partition, subpartition)
        self.partitions = list(dict.fromkeys(p for p, _ in targets))
        self.gates = gates
        # channel -> (gate, index in that gate): one gate per channel, or one for all
        self._slots = slots if slots is not None else [(i, 0) for i in range(len(targets))]
        self._channel_at = {slot: channel for channel, slot in enumerate(self._slots)}
        self.trace = tracer
        self._nursery = nursery
        channels = len(targets)
        self._stalled = [False] * channels
        self._resumed = [kernel.Event() for _ in range(channels)]
        self.consumed: list[list[Consumed]] = [[] for _ in range(channels)]
        self._serializer = RecordSerializer(GenericFormat())
        self._deserializers = [SpanningRecordDeserializer(GenericFormat()) for _ in range(channels)]
        self.received: list[list[object]] = [[] for _ in range(channels)]
        self._decode = [False] * channels  # channels fed with `emit_values` carry real records
        self._consumer_scopes: list[kernel.CancelScope] = []
        self.closed = False

    @classmethod
    async def start(cls, nursery: Any, config: NetworkConfig | None = None, channels: int = 1,
                    local: bool = False, transport: str = "sim",
                    separate_producers: bool = False, trace: bool = True,
                    one_gate: bool = False) -> "CreditFlowHarness":
        """Build the setup with its tasks in `nursery`; partitions are requested before it returns.

        Channel i reads subpartition i of one partition, or with `separate_producers` the only
        subpartition of partition i (independent upstream tasks sharing the connection).
        Each channel has an input gate of its own, or with `one_gate` all channels are the
        channels of one gate (sharing its floating buffers; `consume` of any channel then
        polls that gate, and what it returns is filed under the channel it came from).
        `transport` is "sim" (simulated link, on the sim kernel), "sim_frames" (the same link
        carrying encoded frames instead of message objects, as TCP does) or "tcp" (loopback,
        on the realtime kernel).
        `trace=False` turns tracing off (benchmarks).
        """
        config = config or NetworkConfig()
        _check_kernel(transport)
        tracer = Tracer() if trace else NULL_TRACER
        if transport in ("sim", "sim_frames"):
            network, addresses = SimNetwork(config.link_bandwidth, config.link_latency, config.socket_window,
                                            carry_objects=transport == "sim"), ("producer", "consumer")
        elif transport == "tcp":
            from shuffle.transport.tcp import TcpTransport  # only the realtime variant needs sockets

            network, addresses = TcpTransport(), ("127.0.0.1:0", "127.0.0.1:0")
        else:
            raise ValueError(f"transport must be 'sim', 'sim_frames' or 'tcp', not {transport!r}")
        producer = NettyShuffleEnvironment(config, network, tracer.for_task_manager("producer"))
        producer_address = await producer.start(nursery, addresses[0])
        consumer = producer
        if not local:
            consumer = NettyShuffleEnvironment(config, network, tracer.for_task_manager("consumer"))
            await consumer.start(nursery, addresses[1])
        if separate_producers:
            targets = [(producer.create_result_partition(f"{PARTITION_ID}-{i}", 1, owner_name=f"producer-{i}"), 0)
                       for i in range(channels)]
        else:
            shared = producer.create_result_partition(PARTITION_ID, channels, owner_name="producer")
            targets = [(shared, i) for i in range(channels)]
        descriptors = [InputChannelDescriptor(partition.partition_id, subpartition, producer_address)
                       for partition, subpartition in targets]
        if one_gate:
            groups, slots = [descriptors], [(0, i) for i in range(channels)]
        else:
            groups, slots = [[d] for d in descriptors], [(i, 0) for i in range(channels)]
        gates = []
        for index, group in enumerate(groups):
            gate = consumer.create_input_gate(0, f"consumer-{index}", group)
            await gate.setup()
            await gate.request_partitions()
            gates.append(gate)
        harness = cls(config, producer, consumer, targets, gates, tracer, nursery, slots)
        await harness.settle()
        return harness

    @classmethod
    @asynccontextmanager
    async def open(cls, config: NetworkConfig | None = None, channels: int = 1, local: bool = False,
                   transport: str = "sim", separate_producers: bool = False,
                   trace: bool = True, one_gate: bool = False) -> AsyncIterator["CreditFlowHarness"]:
        """`start` in a nursery of its own, closed (and checked for leaks) on exit."""
        _check_kernel(transport)
        async with kernel.open_nursery() as nursery:
            harness = await cls.start(nursery, config, channels, local, transport, separate_producers, trace,
                                      one_gate)
            yield harness
            await harness.close()
            nursery.cancel_scope.cancel()

    # -- driving the producer --------------------------------------------------------------

    @_by_channel
    @_driving
    async def emit(self, channel: int, nbytes: int, record_size: int = 0) -> None:
        """Write `nbytes` of record data for a channel, as records of `record_size` bytes
        (0: one record of `nbytes`). A record spanning buffers is never cut below its rest: a
        buffer it continues into keeps that much room whatever size the consumer announced."""
        _check_count("emit", "nbytes", nbytes)
        partition, subpartition = self.targets[channel]
        await partition.emit_record(bytes(nbytes), subpartition, record_size)

    @_by_channel
    @_driving
    async def emit_buffers(self, channel: int, n: int) -> None:
        """Fill `n` whole buffers; they become visible as the next buffer starts (or on flush)."""
        _check_count("emit_buffers", "n", n)
        partition, subpartition = self.targets[channel]
        size = self.config.buffer_size
        for _ in range(n):
            await partition.emit_record(bytes(size), subpartition)

    @_by_channel
    def producer_available(self, channel: int) -> bool:
        """Whether the channel's producer may emit without blocking (its pool is available)."""
        return self.targets[channel][0].is_available()

    @_by_channel
    @_driving
    async def emit_values(self, channel: int, values: list[object]) -> None:
        """Serialize msgpack records for a channel; the consumer side collects them in `received`."""
        self._decode[channel] = True
        partition, subpartition = self.targets[channel]
        for value in values:
            await partition.emit_record(self._serializer.serialize(value, 0), subpartition)

    @_by_channel
    @_driving
    def flush(self, channel: int | None = None) -> None:
        """Flush one channel's subpartition, or everything."""
        if channel is None:
            for partition in self.partitions:
                partition.flush_all()
        else:
            partition, subpartition = self.targets[channel]
            partition.flush(subpartition)

    @_driving
    def broadcast_event(self, event: object, is_priority: bool = False) -> None:
        """Queue an event (`shuffle.api.events`) in every subpartition, as a task broadcasts
        one: at the tail, or with `is_priority` ahead of the queued data (how Flink sends an
        unaligned barrier; an unaligned barrier sent without it is a plain event in line)."""
        for partition in self.partitions:
            partition.broadcast_event(event, is_priority)

    @_driving
    def finish(self) -> None:
        """The producer finishes: its open buffers, then EndOfPartition, queued everywhere."""
        for partition in self.partitions:
            partition.finish()

    # -- driving the consumers -------------------------------------------------------------

    @_by_channel
    @_driving
    def consume(self, channel: int, n: int = 1) -> list[Consumed]:
        """Read up to `n` buffers or events of a channel's gate now, as the consumer task polls
        it, recycling each buffer (creates credit). Each is also appended to `consumed[c]` of
        the channel c it came from: with `one_gate` the gate decides which channel is read
        next (round robin over channels with data), not `channel`."""
        _check_count("consume", "n", n)
        return self._consume(channel, n)

    def _consume(self, channel: int, n: int | None) -> list[Consumed]:
        """`consume` of a channel known to exist; `n` None reads everything there is now."""
        out = []
        gate_index = self._slots[channel][0]
        gate = self.gates[gate_index]
        for _ in itertools.count() if n is None else range(n):
            result = gate.poll_next()
            if result is None:
                break
            source = self._channel_at[gate_index, result.channel_info.channel_index]
            if result.buffer is not None:
                item = Consumed(result.buffer.data_type, result.size, source)
                if self._decode[source]:
                    deserializer = self._deserializers[source]
                    deserializer.add_buffer(result.buffer.memory())
                    self.received[source].extend(value for value, _ in deserializer.read())
                result.buffer.recycle()
            else:
                item = Consumed(data_type_for_event(result.event, result.has_priority), result.size, source,
                                result.event)
            self.consumed[source].append(item)
            out.append(item)
        return out

    @_by_channel
    @_driving
    def auto_consume(self, channel: int, cost_per_buffer: float = 0.0) -> None:
        """Consume the channel continuously (each buffer taking `cost_per_buffer` seconds)."""
        self._nursery.start_soon(self._consume_loop, channel, cost_per_buffer)

    async def _consume_loop(self, channel: int, cost: float) -> None:
        gate = self.gate(channel)
        with kernel.CancelScope() as scope:
            self._consumer_scopes.append(scope)
            while not gate.is_finished:
                while self._stalled[channel]:
                    await self._resumed[channel].wait()
                if cost:
                    if self._consume(channel, 1):
                        await kernel.sleep(cost)
                        continue
                else:
                    # Free consumption takes everything there is in one wakeup, as a busy
                    # task does (not one scheduler pass per buffer).
                    self._consume(channel, None)
                await gate.wait_available()

    @_by_channel
    @_driving
    def stall(self, channel: int) -> None:
        """Pause an auto-consuming channel (a slow or stuck consumer task)."""
        self._stalled[channel] = True
        self._resumed[channel] = kernel.Event()

    @_by_channel
    @_driving
    def resume(self, channel: int) -> None:
        """Restart a stalled auto-consuming channel (not Flink's resumeConsumption: that is
        `resume_consumption`)."""
        if not self._stalled[channel]:
            raise ValueError(f"channel {channel} is not stalled: resume() restarts what stall() paused; "
                             f"a channel blocked by an aligned barrier needs resume_consumption({channel})")
        self._stalled[channel] = False
        self._resumed[channel].set()

    @_by_channel
    @_driving
    def resume_consumption(self, channel: int) -> None:
        """The consumer task resumes a channel blocked since it sent an aligned barrier
        (Flink's resumeConsumption: a ResumeConsumption message unblocks the subpartition).
        A subpartition no barrier blocked refuses it, as Flink's does ("Should be blocked by
        checkpoint."): over a connection that is fatal, and the channels then fail."""
        self.gate(channel).resume_consumption(self.channel(channel).channel_info)

    @_by_channel
    @_driving
    def announce_buffer_size(self, channel: int, size: int) -> None:
        """The consumer announces a buffer size for the channel (NewBufferSize, as debloating
        does): the producer cuts its next buffers for it to that size."""
        if type(size) is not int or size <= 0:  # Flink's NewBufferSize refuses it on the Netty thread, later
            raise ValueError(f"announce_buffer_size: the size must be a positive number of bytes, got {size!r}")
        self.channel(channel).announce_buffer_size(size)

    @_by_channel
    @_driving
    def release(self, channel: int) -> None:
        """The consumer releases a channel (Flink's releaseAllResources, as for a cancelled
        task): what it received is dropped, its exclusive buffers go back to the consumer's
        NetworkBufferPool (`network_buffers_free`), its floating ones to the gate's pool, and
        the producer drops its reader (CancelPartitionRequest)."""
        self.channel(channel).release_all_resources()

    @_driving
    def set_writable(self, writable: bool, side: str = "consumer") -> None:
        """Make one end's connection unwritable (or writable again), as Flink's tests set a
        channel's writability: "consumer" holds back what the consumer sends (partition
        requests, AddCredit), "producer" what the producer sends (buffers, events).
        Simulated link only."""
        env = _side(side, self.producer, self.consumer)
        if env is self.consumer:
            streams = [client.stream for client in env.connection_manager.clients()]
        else:
            streams = [handler.stream for handler in env.connection_manager.server_handlers()]
        if not streams:
            raise ValueError("set_writable: no connection to make unwritable (the harness's channels are local)")
        for stream in streams:
            stream.set_writable(writable)

    @_driving
    async def settle(self, seconds: float = 0.05) -> None:
        """Let the simulated network and tasks run for `seconds` of virtual time, then check
        the stack's invariants (`InvariantViolation` if one broke)."""
        _check_count("settle", "seconds", seconds)
        await kernel.sleep(seconds)
        self.check_invariants()

    def check_invariants(self) -> None:
        """Backlog equals queued data buffers, priority counts fit their queues, credit >= 0
        (both ends of every channel)."""
        for partition in self.partitions:
            for subpartition in partition.subpartitions:
                subpartition.check_invariants()
        for gate in self.gates:
            gate.check_invariants()
        for handler in self.producer.connection_manager.server_handlers():
            for reader in handler.queue.all_readers.values():
                reader.check_invariants()

    # -- state -----------------------------------------------------------------------------

    @_by_channel
    def channel(self, index: int) -> RemoteInputChannel | LocalInputChannel:
        """The consumer's input channel (the stack's object; `receiver` is the test's view)."""
        gate_index, channel_index = self._slots[index]
        return self.gates[gate_index].channels[channel_index]

    @_by_channel
    def gate(self, channel: int) -> SingleInputGate:
        """The input gate a channel belongs to."""
        return self.gates[self._slots[channel][0]]

    @_by_channel
    def sender(self, index: int) -> SenderState:
        """The producer's side of a channel now (see `SenderState`)."""
        partition, subpartition = self.targets[index]
        sub = partition.subpartitions[subpartition]
        channel = self.channel(index)
        credit = None
        if isinstance(channel, RemoteInputChannel) and self.config.credit_based:
            reader = self.producer.connection_manager.find_reader(channel.receiver_id)
            credit = reader.num_credits_available if reader is not None else None
        return SenderState(credit, sub.get_buffers_in_backlog(), sub.number_of_queued_buffers,
                           sub.is_blocked, partition.buffer_pool.subpartition_buffer_count(subpartition),
                           tuple(sub.queued_data_types()))

    @_by_channel
    def receiver(self, index: int) -> ReceiverState:
        """The consumer's side of a channel now (see `ReceiverState`)."""
        channel = self.channel(index)
        if not isinstance(channel, RemoteInputChannel):
            return ReceiverState(0, 0, 0, 0, 0, 0, ())
        bm = channel.buffer_manager
        return ReceiverState(len(channel.received), bm.num_free_exclusive, len(bm.floating),
                             bm.num_required_buffers, channel.unannounced_credit, channel.initial_credit,
                             tuple(buffer.data_type for buffer, _ in channel.received))

    @_by_channel
    def credits_announced(self, index: int) -> list[int]:
        """The credit of every AddCredit the channel sent, in order."""
        name = self.channel(index).name
        return [e["credit"] for e in self.trace.of("credit_announced") if e["channel"] == name]

    @_by_channel
    def buffers_sent(self, index: int) -> list[dict]:
        """Every buffer and event the producer sent the channel, in order, as traced:
        `{"t", "event": "buffer_sent", "tm", "channel", "seq", "backlog", "bytes",
        "data_type"}` (`data_type` a `DataType` name; `backlog` the one announced with it)."""
        name = self.channel(index).name
        return [e for e in self.trace.of("buffer_sent") if e["channel"] == name]

    @property
    def floating_pool_free(self) -> list[int]:
        """The free floating buffers of each gate's pool (one gate per channel, or one)."""
        return [g.buffer_pool.num_available for g in self.gates]

    def network_buffers_free(self, side: str = "consumer") -> int:
        """Free segments of one TaskManager's NetworkBufferPool (the global pool): exclusive
        buffers come from it, gates and partitions take their pools' buffers from it."""
        return _side(side, self.producer, self.consumer).network_pool.num_available_segments

    async def close(self) -> None:
        """Release everything; raises if a network buffer did not come back. Closing again does nothing."""
        if self.closed:
            return
        self.closed = True
        for scope in self._consumer_scopes:
            scope.cancel()
        for gate in self.gates:
            gate.close()
        for partition in self.partitions:
            partition.release()
            partition.close()
        await self.producer.close()
        if self.consumer is not self.producer:
            await self.consumer.close()
        for env in {self.producer, self.consumer}:
            pool = env.network_pool
            if pool.num_available_segments != pool.total_segments:
                raise AssertionError(f"network buffers leaked: {pool.total_segments - pool.num_available_segments}"
                                     f" of {pool.total_segments} not returned")
