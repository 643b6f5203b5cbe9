"""A paced generator that sleeps through the pacing steps nothing sees (no flush, no full
buffer, no metrics sample, no mailbox action in between) shows what per-step pacing shows.

The reference is the same job and seed with a wakeup per step (a hundredth of the buffer
timeout). What may differ: the last partial step before the end of the run.
"""

from __future__ import annotations

import json
from functools import partial
from types import SimpleNamespace

import pytest

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import Tracer
from taskmgr.cluster import execute
from taskmgr.operators.sources import (DEFAULT_SOURCE_COST, RATE_QUANTUM, REALTIME_WAKE_MARGIN,
                                       GeneratorSourceOperator)
from taskmgr.workloads import RateSchedule

CASES = {
    "r1000_t100": dict(rate=1000, timeout=0.1),
    "r100k_t100": dict(rate=100_000, timeout=0.1),
    "r20k_t5": dict(rate=20_000, timeout=0.005),
    "keyed4_r2000_t100_ckpt": dict(rate=2000, timeout=0.1, keyed=True, parallelism=4, checkpoint=0.25),
    "r3000_none": dict(rate=3000, timeout=-1),
}
#: Percentiles may move by one histogram bucket (~1.6 %); means by less.
PERCENTILE_TOLERANCE = 0.02
MEAN_TOLERANCE = 0.005


def paced(rate: int, timeout: float, keyed: bool = False, parallelism: int = 1,
          checkpoint: float | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_buffer_timeout(timeout)
    if checkpoint:
        env.enable_checkpointing(checkpoint)
    stream = env.from_generator(rate=rate, record_size=16).name("Src")
    stream = stream.key_by(lambda r: r.key) if keyed else stream.rebalance()
    stream.map(cost="0ms").name("Map").slot_sharing_group("other").sink_to(DiscardingSink())
    return env


def run(case: str, tracer: Tracer | None = None):
    kw = CASES[case]
    parallelism = kw.get("parallelism", 1)
    extra = {"tracer": tracer} if tracer is not None else {}
    return execute(paced(**kw), duration=3, task_managers=2 if parallelism == 1 else 4,
                   slots_per_task_manager=1 if parallelism == 1 else 2, **extra).raise_for_status()


@pytest.mark.parametrize("case", list(CASES))
def test_latency_and_throughput_match_per_step_pacing(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(case)
    with monkeypatch.context() as per_step:
        per_step.setattr(GeneratorSourceOperator, "_steps_unseen", lambda self, count: 1)
        reference = run(case)
    summary, expected = result.latency_summary(), reference.latency_summary()
    assert summary["mean"] == pytest.approx(expected["mean"], rel=MEAN_TOLERANCE)
    for q in ("p50", "p90", "p99", "max"):
        assert summary[q] == pytest.approx(expected[q], rel=PERCENTILE_TOLERANCE), q
    assert abs(result.records_emitted - reference.records_emitted) <= last_step_records(case)
    assert result.records_received == result.records_emitted


def last_step_records(case: str) -> int:
    """The records of one pacing step of every source subtask: the last step before the
    end of the run may go out in one run and not the other (the source sleeping through
    it, or woken for it by a mail, when the run stops)."""
    kw = CASES[case]
    step = RATE_QUANTUM if kw["timeout"] < 0 else min(RATE_QUANTUM, kw["timeout"] / 100)
    return max(1, int(kw["rate"] * step)) * kw.get("parallelism", 1)


def test_a_flush_sees_every_record_due_before_it() -> None:
    """Steps slept through are written when the last of them is due, each record after the
    source's cost: a flush due within that write's time must not miss them (Flink wrote them
    one by one as they came due). The output flusher's period (timeout plus the sleep's
    overshoot) drifts against the 1 ms steps; with this seed a flush falls a few us after a step,
    which once left a step's 100 records for the next flush (latency max ~199 ms)."""
    result = execute(paced(1000, 0.1), duration=4, task_managers=2, seed=18).raise_for_status()
    assert result.latency_summary()["max"] < 100.5


def test_a_source_sleeps_through_the_steps_between_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000 records/s in 100 ms flushes: ~10 emissions a second instead of one per 1 ms step."""
    emissions = []
    hand_out = GeneratorSourceOperator._hand_out

    def counting(self, batch, n):
        emissions.append(n)
        return hand_out(self, batch, n)

    monkeypatch.setattr(GeneratorSourceOperator, "_hand_out", counting)
    result = run("keyed4_r2000_t100_ckpt")
    per_source_second = len(emissions) / 4 / 3
    # flushes (10/s), metric samples, checkpoints (4/s) and the mails that wake it (a periodic
    # watermark every 200 ms, the mailbox latency measurement every second); per-step: ~1,000
    assert per_source_second < 50
    assert sum(emissions) == result.records_emitted


def test_same_seed_same_trace_bytes() -> None:
    traces = []
    for _ in range(2):
        tracer = Tracer()
        run("keyed4_r2000_t100_ckpt", tracer)
        traces.append("\n".join(json.dumps(event) for event in tracer.events).encode())
    assert b"buffer_sent" in traces[0]
    assert traces[0] == traces[1]


def test_a_bounded_source_ends_when_per_step_pacing_ended_it() -> None:
    """488 records at 1,000/s with checkpoints every 250 ms: the source finishes (EndOfData,
    the final checkpoint) at the step after its last record, 0.549955 s with per-step pacing
    (its final checkpoint triggered at 0.541504 s, the scheduler having started once every
    task ran)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(0.25)
    (env.from_generator(rate=1000, count=488, record_size=16).name("Src").rebalance()
        .map(cost="0ms").name("Map").slot_sharing_group("other").sink_to(DiscardingSink()))
    result = execute(env, duration=3, task_managers=2).raise_for_status()
    assert result.vertex_end_times["Source: Src"] == pytest.approx(0.549955, abs=2e-5)
    assert result.records_emitted == result.records_received == 488


def _steps_slept_before_a_flush(mode: str) -> tuple[int, float]:
    """A 1,000 records/s source (1 ms steps) whose writer flushes 100 ms from now: how many
    steps it sleeps through, and how long before the flush the last of them is due."""
    async def main() -> tuple[int, float]:
        now = kernel.current_time()
        schedule = RateSchedule(1000, now)
        flush_at = now + 0.1
        writer = SimpleNamespace(partition=SimpleNamespace(room_bytes=lambda: 1 << 20), next_flush_at=flush_at)
        source = SimpleNamespace(
            writers=[writer], wire_size=29, max_burst=1000, quantum=1, schedule=schedule,
            state=SimpleNamespace(remaining=None), cost_per_record=lambda: DEFAULT_SOURCE_COST,
            ctx=SimpleNamespace(services=SimpleNamespace(sampler=SimpleNamespace(next_reading_at=lambda t: now + 1.0))))
        source._steps_before = partial(GeneratorSourceOperator._steps_before, source)
        steps = GeneratorSourceOperator._steps_unseen(source, 0)
        return steps, flush_at - schedule.time_due(steps)

    return kernel.run(main, mode=mode)


def test_a_realtime_source_wakes_for_a_flush_ahead_of_it() -> None:
    """trio wakes timers due in the same millisecond in one batch, in a random order: a
    source that slept until the step just before the flush missed it about half the time,
    and its 100 records waited for the next flush (buffer-timeout-latency in realtime: p50
    104 ms, max 197 ms, where sim mode gives 48 and 100). In realtime it wakes at least
    REALTIME_WAKE_MARGIN before the flush; in sim mode, at the last step before it."""
    steps, ahead = _steps_slept_before_a_flush("realtime")
    assert ahead >= REALTIME_WAKE_MARGIN and steps >= 90
    steps, ahead = _steps_slept_before_a_flush("sim")
    assert steps == 99 and ahead == pytest.approx(0.001)
