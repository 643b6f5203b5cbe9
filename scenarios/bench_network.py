"""Throughput figures of the network stack alone, for `shufflesim bench`.

Each function runs its own kernel run (sim, or realtime for TCP) through the credit-flow harness and returns figure
dicts `{"figure", "value", ...}` with the raw numbers beside the headline value.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import trio

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.environment import InputChannelDescriptor, NettyShuffleEnvironment
from shuffle.harness.credit_flow import CreditFlowHarness
from shuffle.transport.tcp import TcpTransport

BUFFER = 32 * 1024


async def _pump(h: CreditFlowHarness, buffers: int) -> int:
    """Emit `buffers` full buffers into channel 0 as fast as credit allows; wait until consumed.
    Returns how many buffers the consumer took."""
    partition, subpartition = h.targets[0]
    payload = memoryview(bytes(h.config.buffer_size))
    h.auto_consume(0)
    for _ in range(buffers):
        if not partition.is_available():
            await partition.wait_available()
        await partition.emit_record(payload, subpartition)
    h.flush()
    while len(h.consumed[0]) < buffers:
        await kernel.sleep(0.001)
    return len(h.consumed[0])


def sim_buffer_hops(buffers: int = 20000) -> list[dict[str, Any]]:
    """Full 32 KiB buffers through one remote channel in sim mode, with credit, per wall second."""
    async def main() -> tuple[int, float, float]:
        async with CreditFlowHarness.open(NetworkConfig(buffer_size=BUFFER), trace=False) as h:
            start = time.perf_counter()
            consumed = await _pump(h, buffers)
            wall = time.perf_counter() - start
            return consumed, wall, kernel.current_time()

    consumed, wall, virtual = kernel.run(main, mode="sim")
    return [{"figure": "sim_buffer_hops_per_s", "value": round(consumed / wall), "target": 100000,
             "buffers": consumed, "wall_s": round(wall, 3), "virtual_s": round(virtual, 4)}]


PARTITION = "bench-partition"


#: Longest the consuming child may take (~0.5 s for the default 10,000 buffers).
CHILD_TIMEOUT = 120.0


async def _child(*args: str) -> dict[str, float]:
    """Run the consuming side in a child process (the other TaskManager) and read its result."""
    with trio.fail_after(CHILD_TIMEOUT):
        result = await trio.run_process([sys.executable, "-m", "scenarios.bench_network", *args],
                                        capture_stdout=True)
    return json.loads(result.stdout)


async def _produce_stack(buffers: int) -> dict[str, float]:
    """This process is the producing TaskManager; the consuming one runs in a child process."""
    config = NetworkConfig(buffer_size=BUFFER)
    env = NettyShuffleEnvironment(config, TcpTransport())
    outcome: dict[str, float] = {}

    async def consumer(address: str) -> None:
        outcome.update(await _child("consume-stack", address, str(buffers)))

    async with trio.open_nursery() as nursery:
        address = await env.start(nursery, "127.0.0.1:0")
        partition = env.create_result_partition(PARTITION, 1, owner_name="bench-producer")
        nursery.start_soon(consumer, address)
        payload = memoryview(bytes(BUFFER))
        for _ in range(buffers):
            if not partition.is_available():
                await partition.wait_available()
            await partition.emit_record(payload, 0)
        partition.finish()
        while not outcome:
            await trio.sleep(0.01)
        await env.close()
        nursery.cancel_scope.cancel()
    return outcome


async def _consume_stack(address: str, buffers: int) -> dict[str, float]:
    """Child: a TaskManager reading the producer's partition through a remote input channel."""
    env = NettyShuffleEnvironment(NetworkConfig(buffer_size=BUFFER), TcpTransport())
    received = 0
    async with trio.open_nursery() as nursery:
        await env.start(nursery, "127.0.0.1:0")
        gate = env.create_input_gate(0, "bench-consumer", [InputChannelDescriptor(PARTITION, 0, address)])
        await gate.setup()
        await gate.request_partitions()
        start = time.perf_counter()
        while (item := await gate.get_next()) is not None:
            if item.buffer is not None:
                received += item.size
                item.buffer.recycle()
        elapsed = time.perf_counter() - start
        gate.close()
        await env.close()
        nursery.cancel_scope.cancel()
    return {"bytes": received, "seconds": elapsed}


async def _produce_raw(total: int) -> dict[str, float]:
    """Raw trio sockets, the same way round: this process sends, a child process reads."""
    outcome: dict[str, float] = {}

    async def send(stream: trio.abc.Stream) -> None:
        chunk = bytes(BUFFER)
        for _ in range(total // BUFFER):
            await stream.send_all(chunk)
        await stream.aclose()

    async def consumer(address: str) -> None:
        outcome.update(await _child("consume-raw", address, str(total)))

    async with trio.open_nursery() as nursery:
        address = await nursery.start(TcpTransport().serve, "127.0.0.1:0", send)
        nursery.start_soon(consumer, address)
        while not outcome:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    return outcome


async def _consume_raw(address: str, total: int) -> dict[str, float]:
    stream = await TcpTransport().connect(address)
    received = 0
    start = time.perf_counter()
    while received < total:
        data = await stream.receive_some(64 * 1024)
        if not data:
            break
        received += len(data)
    elapsed = time.perf_counter() - start
    await stream.aclose()
    return {"bytes": received, "seconds": elapsed}


def tcp_payload_ratio(buffers: int = 10000, pairs: int = 3) -> list[dict[str, Any]]:
    """Payload throughput between two TaskManager processes over loopback, against raw sockets.

    Both figures are taken the same way: this process produces, a child process consumes
    (so each side has a core of its own, as two TaskManagers do). The two are measured
    alternately, `pairs` times, each side first in every other pair; the value is the
    median pair's ratio (of an even count, the upper middle one), so that one stretch of a
    busy machine moves neither side alone (a side takes ~0.5 s).
    """
    if pairs < 1:
        raise ValueError(f"pairs must be at least 1, not {pairs}")
    measured = []
    for pair in range(pairs):
        if pair % 2 == 0:
            raw = trio.run(_produce_raw, buffers * BUFFER)
            stack = trio.run(_produce_stack, buffers)
        else:
            stack = trio.run(_produce_stack, buffers)
            raw = trio.run(_produce_raw, buffers * BUFFER)
        if stack["bytes"] != buffers * BUFFER:
            raise RuntimeError(f"the consumer received {stack['bytes']} bytes, expected {buffers * BUFFER}")
        raw_rate, stack_rate = raw["bytes"] / raw["seconds"], stack["bytes"] / stack["seconds"]
        measured.append((stack_rate / raw_rate, stack_rate, raw_rate))
    ratio, stack_rate, raw_rate = sorted(measured)[len(measured) // 2]
    return [{"figure": "tcp_payload_ratio", "value": round(ratio, 3), "target": 0.5,
             "payload_mb_per_s": round(stack_rate / 1e6, 1), "raw_socket_mb_per_s": round(raw_rate / 1e6, 1),
             "ratios": [round(pair[0], 3) for pair in measured], "buffers": buffers}]


_CHILD_COMMANDS = {"consume-stack": _consume_stack, "consume-raw": _consume_raw}

if __name__ == "__main__":
    command, address, amount = sys.argv[1:4]
    print(json.dumps(trio.run(_CHILD_COMMANDS[command], address, int(amount))))
