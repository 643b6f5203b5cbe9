"""The kernel interface: the sim kernel keeps trio's semantics (checked against the realtime
kernel on the same code), runs in virtual time, and is deterministic."""

import json
import math
import types
from typing import Any

import pytest

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.harness.credit_flow import CreditFlowHarness

BOTH = pytest.mark.parametrize("mode", ["sim", "realtime"])
TICK = 0.01  # short enough for the realtime kernel


def test_virtual_time_jumps_to_deadlines_without_waiting():
    async def main():
        start = kernel.current_time()
        await kernel.sleep(3600)
        with kernel.move_on_after(5):
            await kernel.sleep_forever()
        return kernel.current_time() - start

    assert kernel.run(main, mode="sim") == 3605


def test_tasks_waking_at_the_same_instant_run_in_scheduling_order():
    async def main():
        order = []

        async def sleeper(name, seconds):
            await kernel.sleep(seconds)
            order.append(name)

        async with kernel.open_nursery() as nursery:
            for name in "cab":
                nursery.start_soon(sleeper, name, 1.0)
            nursery.start_soon(sleeper, "early", 0.5)
        return order

    assert kernel.run(main, mode="sim") == ["early", "c", "a", "b"]


@BOTH
def test_a_failing_task_cancels_its_siblings_and_surfaces_the_root_cause(mode):
    async def main():
        cancelled = []

        async def sibling():
            try:
                await kernel.sleep_forever()
            finally:
                cancelled.append(kernel.current_time())

        async def failing():
            await kernel.sleep(TICK)
            raise ValueError("user function failed")

        with pytest.raises(ValueError, match="user function failed") as info:
            async with kernel.open_nursery() as nursery:
                nursery.start_soon(sibling)
                nursery.start_soon(sibling)
                nursery.start_soon(failing)
        return len(cancelled), type(info.value)

    assert kernel.run(main, mode=mode) == (2, ValueError)


@BOTH
def test_the_first_error_wins_and_the_others_are_noted(mode):
    async def main():
        async def fail(seconds, text):
            await kernel.sleep(seconds)
            raise RuntimeError(text)

        async def fail_while_cancelled(text):
            try:
                await kernel.sleep_forever()
            finally:
                raise KeyError(text)

        with pytest.raises(RuntimeError, match="first") as info:
            async with kernel.open_nursery() as nursery:
                nursery.start_soon(fail_while_cancelled, "second")
                nursery.start_soon(fail, TICK, "first")
        return getattr(info.value, "__notes__", [])

    assert kernel.run(main, mode=mode) == ["(and 1 more errors in the same nursery)"]


@BOTH
def test_cancel_scopes_nest_and_the_cancelled_one_absorbs(mode):
    async def main():
        log = []
        with kernel.CancelScope() as outer:
            with kernel.move_on_after(TICK) as inner:
                await kernel.sleep_forever()
            log.append(("inner", inner.cancelled_caught))
            outer.cancel()
            try:
                await kernel.sleep(10)
            finally:
                log.append("outer cancelled at the next blocking call")
        log.append(("outer", outer.cancelled_caught))
        with kernel.CancelScope() as scope:
            scope.cancel()
            with kernel.CancelScope(shield=True):
                await kernel.sleep(TICK)  # shielded: sleeps
            log.append("shield held")
        with pytest.raises(kernel.TooSlowError):
            with kernel.fail_after(TICK):
                await kernel.sleep_forever()
        return log

    assert kernel.run(main, mode=mode) == [("inner", True), "outer cancelled at the next blocking call",
                                           ("outer", True), "shield held"]


@BOTH
def test_nursery_start_waits_for_started_and_cancelling_the_nursery_ends_everything(mode):
    async def main():
        async def server(*, task_status=kernel.TASK_STATUS_IGNORED):
            await kernel.sleep(TICK)
            task_status.started("address")
            await kernel.sleep_forever()

        async with kernel.open_nursery() as nursery:
            address = await nursery.start(server)
            nursery.cancel_scope.cancel()
        return address, nursery.cancel_scope.cancelled_caught

    assert kernel.run(main, mode=mode) == ("address", True)


@BOTH
def test_events_locks_and_queues(mode):
    async def main():
        log = []
        event, lock, queue = kernel.Event(), kernel.Lock(), kernel.Queue()

        async def holder(name):
            async with lock:
                log.append(f"{name} in")
                await kernel.sleep(TICK)
                log.append(f"{name} out")

        async def consumer():
            async for item in queue:
                log.append(item)

        async with kernel.open_nursery() as nursery:
            nursery.start_soon(holder, "a")
            nursery.start_soon(holder, "b")
            nursery.start_soon(consumer)
            nursery.start_soon(event.wait)
            queue.put_nowait(1)
            queue.put_nowait(2)
            event.set()
            await kernel.sleep(3 * TICK)
            queue.close()
        return log

    log = kernel.run(main, mode=mode)
    first, second = sorted("ab", key=lambda name: log.index(f"{name} in"))
    assert [entry for entry in log if isinstance(entry, str)] == [f"{first} in", f"{first} out",
                                                                  f"{second} in", f"{second} out"]
    assert [entry for entry in log if isinstance(entry, int)] == [1, 2]


@BOTH
def test_call_at_calls_at_its_time_and_at_once_for_a_time_past(mode):
    async def main():
        calls = []
        start = kernel.current_time()
        kernel.call_at(start + 2 * TICK, lambda: calls.append(("later", kernel.current_time() - start)))
        kernel.call_at(start - 1, lambda: calls.append(("past", kernel.current_time() - start)))
        await kernel.sleep(TICK)
        if mode == "sim":  # (real sleeps may overshoot)
            assert [name for name, _ in calls] == ["past"]
        await kernel.sleep(3 * TICK)
        return calls

    calls = kernel.run(main, mode=mode)
    assert [name for name, _ in calls] == ["past", "later"]
    assert calls[1][1] >= 2 * TICK
    if mode == "sim":
        assert calls == [("past", 0), ("later", 2 * TICK)]


def test_a_run_where_every_task_waits_forever_is_an_error_naming_the_waiters():
    async def waits_for_nothing():
        await kernel.Event().wait()

    async def main():
        async with kernel.open_nursery() as nursery:
            nursery.start_soon(waits_for_nothing, name="consumer-0")
            await kernel.sleep(2)

    with pytest.raises(kernel.SimulationStuckError, match=r"(?s)t=2\.0+ s.*\n  consumer-0: .*waits_for_nothing \(test_kernel.py"):
        kernel.run(main, mode="sim")


def test_awaiting_another_event_loops_primitive_in_sim_mode_is_a_clear_error():
    @types.coroutine
    def foreign_trap():
        yield "a request for another event loop"

    async def main():
        await foreign_trap()

    with pytest.raises(RuntimeError, match="sim kernel cannot run"):
        kernel.run(main, mode="sim")


def test_run_soon_steps_run_in_fifo_order_with_woken_tasks_and_an_escaping_error_ends_the_run():
    from shuffle.kernel import sim

    async def main():
        order = []
        event = kernel.Event()

        async def waiter():
            await event.wait()
            order.append("task")

        async with kernel.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await kernel.sleep(0)  # the waiter runs first and waits
            sim.run_soon(lambda: order.append("step 1"))
            event.set()
            sim.run_soon(lambda: order.append("step 2"))
        return order

    assert kernel.run(main, mode="sim") == ["step 1", "task", "step 2"]

    async def failing():
        def boom():
            raise ValueError("the step failed")

        sim.run_soon(boom)
        await kernel.sleep(1)

    with pytest.raises(ValueError, match="the step failed"):
        kernel.run(failing, mode="sim")
    assert kernel.run(main, mode="sim") == ["step 1", "task", "step 2"]  # the next run is clean


def test_the_realtime_kernel_is_back_after_a_sim_run():
    async def mode():
        return kernel.current_mode()

    assert kernel.run(mode, mode="sim") == "sim"
    assert kernel.current_mode() == "realtime"
    assert kernel.run(mode, mode="realtime") == "realtime"


def test_a_sim_run_collects_young_garbage_less_often_and_restores_the_setting():
    import gc

    from shuffle.kernel.sim import YOUNG_GC_THRESHOLD

    async def threshold():
        return gc.get_threshold()[0]

    before = gc.get_threshold()
    assert before[0] < YOUNG_GC_THRESHOLD  # CPython's default, 700
    assert kernel.run(threshold, mode="sim") == YOUNG_GC_THRESHOLD
    assert gc.get_threshold() == before

    async def failing():
        raise ValueError("boom")

    with pytest.raises(ValueError):
        kernel.run(failing, mode="sim")
    assert gc.get_threshold() == before


def test_deadlines_left_before_they_come_do_not_pile_up_in_the_heap():
    from shuffle.kernel import sim

    async def main():
        woke = []

        async def sleeper(seconds):
            with kernel.move_on_after(seconds / 2):  # a live deadline, reached
                await kernel.sleep(seconds)
            woke.append((seconds, kernel.current_time()))

        async with kernel.open_nursery() as nursery:
            for seconds in (4.0, 2.0, 6.0):
                nursery.start_soon(sleeper, seconds)
            await kernel.checkpoint()
            for _ in range(3 * sim.COMPACT_AT):  # as connection handshakes do, per connection
                with kernel.fail_after(30):
                    pass
            heap_size = len(sim._K.heap)
        return heap_size, woke

    heap_size, woke = kernel.run(main, mode="sim")
    assert heap_size < sim.COMPACT_AT  # 3,072 abandoned deadlines were dropped
    assert woke == [(2.0, 1.0), (4.0, 2.0), (6.0, 3.0)]  # the live ones still fire, in order


def test_a_sleep_counts_from_when_it_is_awaited():
    async def main():
        pending = kernel.sleep(5)
        await kernel.sleep(3)
        await pending
        return kernel.current_time()

    assert kernel.run(main, mode="sim") == 8


def test_a_lock_waiter_cancelled_before_its_turn_leaves_the_queue():
    async def main():
        lock = kernel.Lock()
        order = []

        async def take(name):
            async with lock:
                order.append(name)
                await kernel.sleep(1)

        async with kernel.open_nursery() as nursery:
            nursery.start_soon(take, "first")
            await kernel.checkpoint()
            for _ in range(100):
                with kernel.move_on_after(0.001):
                    await take("cancelled")
            waiting = len(lock._waiters)
            nursery.start_soon(take, "second")
        return waiting, order, lock._locked

    assert kernel.run(main, mode="sim") == (0, ["first", "second"], False)


def test_waits_that_lose_a_wait_any_leave_nothing_on_their_event():
    """A task waiting on two inputs with `wait_any`, one of them idle: every wakeup by the
    busy one cancels the wait on the idle one, which must not leave an entry behind on the
    idle input's event each time (one per wakeup, for as long as that input stays idle)."""
    async def main():
        idle = kernel.Event()
        for _ in range(1000):
            busy = kernel.Event()
            kernel.call_at(kernel.current_time() + 0.001, busy.set)
            await kernel.wait_any([busy.wait, idle.wait])
        waiting = len(idle._waiters)
        async with kernel.open_nursery() as nursery:  # a live wait still wakes
            nursery.start_soon(idle.wait)
            await kernel.checkpoint()
            idle.set()
        return waiting

    assert kernel.run(main, mode="sim") == 0


def test_compacting_the_heap_changes_nothing_in_a_run(monkeypatch):
    from shuffle.kernel import sim

    compactions = []
    compact = sim.SimKernel.compact
    monkeypatch.setattr(sim.SimKernel, "compact", lambda self: compactions.append(1) or compact(self))
    monkeypatch.setattr(sim, "COMPACT_AT", 1)  # compact whenever stale deadlines are most of the heap
    compacted = _trace_bytes(abandon_deadlines=True)
    assert compactions
    monkeypatch.setattr(sim, "COMPACT_AT", 10**9)
    assert _trace_bytes(abandon_deadlines=True) == compacted


async def _scripted_run(transport: str, abandon_deadlines: bool = False,
                        config: NetworkConfig = NetworkConfig(buffer_size=512)) -> list[dict]:
    async with CreditFlowHarness.open(config, channels=3, transport=transport) as h:
        for channel in range(3):
            h.auto_consume(channel, cost_per_buffer=0.0005 * channel)
        for i in range(40):
            # Optionally each emit under a 30 s deadline it leaves long before (stale heap entries).
            with kernel.fail_after(30 if abandon_deadlines else math.inf):
                await h.emit_values(i % 3, [(i, "v" * (i * 7 % 300))])
            if i % 5 == 0:
                h.flush()
        h.finish()
        await h.settle(1.0)
        return list(h.trace.events)


def _trace_bytes(transport: str = "sim", abandon_deadlines: bool = False, **config: Any) -> bytes:
    events = kernel.run(_scripted_run, transport, abandon_deadlines, NetworkConfig(buffer_size=512, **config),
                        mode="sim")
    return "\n".join(json.dumps(e) for e in events).encode()


def test_same_run_same_trace_bytes():
    first = _trace_bytes()
    assert b"credit_announced" in first and b"buffer_received" in first
    assert _trace_bytes() == first



def test_message_objects_on_the_sim_link_behave_as_encoded_frames():
    """Sim mode sends message objects; the same exchange as our encoded frames on the same
    link gives the same events at the same times where the frames' sizes do not count (a
    link of unbounded bandwidth; ours are msgpack, the objects count Flink's, below), and
    different times where they do."""
    unbounded = _trace_bytes("sim", link_bandwidth=math.inf)
    assert b"buffer_received" in unbounded
    assert unbounded == _trace_bytes("sim_frames", link_bandwidth=math.inf)
    assert _trace_bytes("sim") != _trace_bytes("sim_frames")


def test_the_sim_link_carries_flinks_frame_sizes():
    """A message object occupies the link for the bytes of Flink 2.3's frame of it: a
    BufferResponse 9 + 38 header bytes beside its payload, an AddCredit 9 + 20."""
    async def main() -> list[dict]:
        config = NetworkConfig(buffer_size=1000, link_bandwidth=1e6, link_latency=0.0)  # 1 us per byte
        async with CreditFlowHarness.open(config, channels=1) as h:
            await h.emit_values(0, [(0, "v" * 900)])
            h.flush()
            await h.settle(0.1)
            return list(h.trace.events)

    at = {e["event"]: e for e in kernel.run(main, mode="sim")}
    payload = at["buffer_sent"]["bytes"]
    assert payload > 900
    assert at["buffer_received"]["t"] - at["buffer_sent"]["t"] == pytest.approx((payload + 47) * 1e-6)
    assert at["credit_received"]["t"] - at["credit_announced"]["t"] == pytest.approx(29e-6)
