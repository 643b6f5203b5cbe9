"""Throughput figures of the network stack alone, for `shufflesim bench`.

Each function runs its own trio loop through the credit-flow harness and returns figure
dicts `{"figure", "value", ...}` with the raw numbers beside the headline value.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from shuffle.config import NetworkConfig
from shuffle.harness.credit_flow import CreditFlowHarness
from shuffle.sim_time import VirtualClock
from shuffle.transport.tcp import TcpTransport

BUFFER = 32 * 1024


async def _pump(h: CreditFlowHarness, buffers: int) -> None:
    """Emit `buffers` full buffers into channel 0 as fast as credit allows; wait until consumed."""
    partition, subpartition = h.targets[0]
    payload = memoryview(bytes(h.config.buffer_size))
    h.auto_consume(0)
    for _ in range(buffers):
        if not partition.is_available():
            await partition.wait_available()
        await partition.emit_record(payload, subpartition)
    h.flush()
    while len(h.consumed[0]) < buffers:
        await trio.sleep(0.001 if trio.current_time() < 1e9 else 0)


def sim_buffer_hops(buffers: int = 20000) -> list[dict[str, Any]]:
    """Full 32 KiB buffers through one remote channel in sim mode, with credit, per wall second."""
    async def main() -> float:
        async with CreditFlowHarness.open(NetworkConfig(buffer_size=BUFFER), trace=False) as h:
            start = time.perf_counter()
            await _pump(h, buffers)
            wall = time.perf_counter() - start
            return wall, trio.current_time()

    wall, virtual = trio.run(main, clock=VirtualClock())
    return [{"figure": "sim_buffer_hops_per_s", "value": round(buffers / wall), "target": 50000,
             "buffers": buffers, "wall_s": round(wall, 3), "virtual_s": round(virtual, 4)}]


async def _raw_socket_bytes_per_s(total: int) -> float:
    """Raw trio loopback TCP throughput (one sender task, one reader task, 32 KiB writes)."""
    received = 0
    done = trio.Event()

    async def reader(stream: trio.abc.Stream) -> None:
        nonlocal received
        while received < total:
            data = await stream.receive_some(256 * 1024)
            if not data:
                break
            received += len(data)
        done.set()

    transport = TcpTransport()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(transport.serve, "127.0.0.1:0", reader)
        stream = await transport.connect(address)
        chunk = bytes(BUFFER)
        start = time.perf_counter()
        sent = 0
        while sent < total:
            await stream.send_all(chunk)
            sent += len(chunk)
        await done.wait()
        elapsed = time.perf_counter() - start
        await stream.aclose()
        nursery.cancel_scope.cancel()
    return total / elapsed


def tcp_payload_ratio(buffers: int = 6000) -> list[dict[str, Any]]:
    """Payload throughput of the stack between two TaskManagers over loopback, against raw sockets.

    Both sides run in this process (one trio loop), for the stack and for the raw baseline alike.
    """
    async def main() -> tuple[float, float]:
        raw = await _raw_socket_bytes_per_s(buffers * BUFFER)
        async with CreditFlowHarness.open(NetworkConfig(buffer_size=BUFFER), transport="tcp", trace=False) as h:
            start = time.perf_counter()
            await _pump(h, buffers)
            stack = buffers * BUFFER / (time.perf_counter() - start)
        return raw, stack

    raw, stack = trio.run(main)
    return [{"figure": "tcp_payload_ratio", "value": round(stack / raw, 3), "target": 0.5,
             "payload_mb_per_s": round(stack / 1e6, 1), "raw_socket_mb_per_s": round(raw / 1e6, 1),
             "buffers": buffers}]
