"""The sim-mode clock and deterministic scheduling."""

import json

import trio

from shuffle.config import NetworkConfig
from shuffle.harness.credit_flow import CreditFlowHarness
from shuffle.sim_time import VirtualClock, deterministic_scheduling


def test_virtual_clock_jumps_to_deadlines_without_waiting():
    async def main():
        start = trio.current_time()
        await trio.sleep(3600)
        with trio.move_on_after(5):
            await trio.sleep_forever()
        return trio.current_time() - start

    assert trio.run(main, clock=VirtualClock()) == 3605


async def _scripted_run() -> list[dict]:
    async with CreditFlowHarness.open(NetworkConfig(buffer_size=512), channels=3) as h:
        for channel in range(3):
            h.auto_consume(channel, cost_per_buffer=0.0005 * channel)
        for i in range(40):
            await h.emit_values(i % 3, [(i, "v" * (i * 7 % 300))])
            if i % 5 == 0:
                h.flush()
        h.finish()
        await h.settle(1.0)
        return list(h.trace.events)


def _trace_bytes(seed: int) -> bytes:
    with deterministic_scheduling(seed):
        events = trio.run(_scripted_run, clock=VirtualClock())
    return "\n".join(json.dumps(e) for e in events).encode()


def test_same_seed_same_trace_bytes():
    first = _trace_bytes(7)
    assert b"credit_announced" in first and b"buffer_received" in first
    assert _trace_bytes(7) == first


def test_switch_is_restored_after_use():
    from trio._core import _run

    before = _run._ALLOW_DETERMINISTIC_SCHEDULING
    with deterministic_scheduling(1):
        assert _run._ALLOW_DETERMINISTIC_SCHEDULING
    assert _run._ALLOW_DETERMINISTIC_SCHEDULING == before
