import random

import pytest

from shuffle import kernel
from taskmgr.metrics.sampler import MetricSampler, derive_rates


class FakeSource:
    """Counters advance by hand; one gauge."""

    counters = frozenset(
        {"numRecordsOut", "accumulateIdleTimeMs", "accumulateBackPressuredTimeMs", "accumulateBusyTimeMs"}
    )
    per_period = False

    def __init__(self):
        self.values = {
            "numRecordsOut": 0.0,
            "accumulateIdleTimeMs": 0.0,
            "accumulateBackPressuredTimeMs": 0.0,
            "accumulateBusyTimeMs": 0.0,
            "outPoolUsage": 0.0,
        }

    def snapshot(self):
        return dict(self.values)


def rows_at(table, t, metric):
    data = table.to_arrow().to_pylist()
    return [r["value"] for r in data if r["t"] == t and r["metric"] == metric]


async def test_rates_from_deltas_each_period(sim_kernel):
    source = FakeSource()
    sampler = MetricSampler(period=2.0)
    sampler.register("Map", 1, "tm-0", source)
    async with kernel.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        await kernel.sleep(1)
        source.values.update(numRecordsOut=500, accumulateIdleTimeMs=400, accumulateBackPressuredTimeMs=1000)
        source.values["outPoolUsage"] = 0.75
        await kernel.sleep(2)  # sample at t=2
        source.values.update(numRecordsOut=700, accumulateBackPressuredTimeMs=3000)
        await kernel.sleep(2)  # sample at t=4
        nursery.cancel_scope.cancel()

    table = sampler.table
    assert rows_at(table, 2.0, "numRecordsOutPerSecond") == [250.0]
    assert rows_at(table, 2.0, "idleTimeMsPerSecond") == [200.0]
    assert rows_at(table, 2.0, "backPressuredTimeMsPerSecond") == [500.0]
    assert rows_at(table, 2.0, "busyTimeMsPerSecond") == [300.0]
    assert rows_at(table, 2.0, "outPoolUsage") == [0.75]
    assert rows_at(table, 2.0, "numRecordsOut") == [500.0]  # the counter itself is kept
    assert rows_at(table, 4.0, "numRecordsOutPerSecond") == [100.0]
    assert rows_at(table, 4.0, "idleTimeMsPerSecond") == [0.0]
    assert rows_at(table, 4.0, "busyTimeMsPerSecond") == [0.0]
    assert rows_at(table, 4.0, "accumulateBusyTimeMsPerSecond") == []
    row = table.to_arrow().to_pylist()[0]
    assert (row["vertex"], row["subtask"], row["task_manager"]) == ("Map", 1, "tm-0")


def test_derive_rates_clamps_times_and_busy():
    counters = {"accumulateIdleTimeMs", "accumulateSoftBackPressuredTimeMs", "accumulateHardBackPressuredTimeMs", "accumulateBackPressuredTimeMs"}
    before = dict.fromkeys(counters, 0.0)
    after = {
        "accumulateIdleTimeMs": 700.0,
        "accumulateSoftBackPressuredTimeMs": 500.0,
        "accumulateHardBackPressuredTimeMs": 100.0,
        "accumulateBackPressuredTimeMs": 600.0,
    }
    rates = derive_rates(counters, before, after, 1.0)
    assert rates["softBackPressuredTimeMsPerSecond"] == 500.0
    assert rates["hardBackPressuredTimeMsPerSecond"] == 100.0
    assert rates["busyTimeMsPerSecond"] == 0.0  # idle + bp > 1000: busy is 0, not negative
    assert derive_rates(counters, before, {**after, "accumulateIdleTimeMs": 5000.0}, 1.0)[
        "idleTimeMsPerSecond"
    ] == 1000.0


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="period"):
        MetricSampler(period=0)


class ClockSource:
    """A counter and a gauge that both read the kernel's clock (seconds since the start)."""

    counters = frozenset({"numRecordsOut"})
    per_period = False

    def __init__(self, t0: float) -> None:
        self.t0 = t0

    def snapshot(self):
        now = kernel.current_time() - self.t0
        return {"numRecordsOut": now, "readAt": now}


def _clock_samples(rng):
    async def main():
        sampler = MetricSampler(period=1.0, rng=rng)
        sampler.register("Map", 0, "tm-0", ClockSource(sampler.t0))
        async with kernel.open_nursery() as nursery:
            nursery.start_soon(sampler.run, sampler.t0 + 5.5)
            await kernel.sleep(6)
        sampler.sample()  # the caller's sample at the end, as the TaskManager takes it
        rows = sampler.table.to_arrow().to_pylist()
        return ([(r["t"], r["value"]) for r in rows if r["metric"] == "readAt"],
                [(r["t"], r["value"]) for r in rows if r["metric"] == "numRecordsOut"])
    return kernel.run(main, mode="sim")


def _last_instant(seed: int) -> float:
    """When the period cut short at 5.5 s reads its gauges: at its instant (the generator's
    6th draw) if that comes before the end, else with the last sample, at 6 s."""
    draws = random.Random(seed)
    instant = 5.0 + [draws.random() for _ in range(6)][-1]
    return instant if instant < 5.5 else 6.0


def test_a_period_cut_short_reads_its_gauges_at_its_instant_or_at_the_last_sample():
    assert _last_instant(3) < 5.5 and _last_instant(2) == 6.0  # both cases
    for seed in (3, 2):
        gauges, _ = _clock_samples(random.Random(seed))
        assert gauges[5][1] == pytest.approx(_last_instant(seed))


def test_gauges_are_read_at_a_random_instant_of_their_period_counters_at_its_end():
    gauges, counters = _clock_samples(random.Random(3))
    assert [t for t, _ in counters] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [value for _, value in counters] == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    # row k's gauges were read inside period k, not at its end, at instants that differ
    for t, read_at in gauges[:5]:
        assert t - 1.0 <= read_at < t
    assert len({round(read_at % 1.0, 6) for _, read_at in gauges[:5]}) == 5
    assert gauges[5][1] == pytest.approx(_last_instant(3))
    again, _ = _clock_samples(random.Random(3))
    assert again == gauges  # the same generator, the same instants


def test_without_a_generator_gauges_are_read_with_the_counters():
    gauges, _ = _clock_samples(None)
    assert gauges == [(t, pytest.approx(t)) for t in (1.0, 2.0, 3.0, 4.0, 5.0)] + [(6.0, pytest.approx(6.0))]


def test_a_sinks_latency_of_a_period_is_read_whole_at_its_end():
    """Latency percentiles sum up a period and reading them starts the next: a gauge reading
    in mid-period would split it (and report only the records before the instant). Each
    period's histogram is kept under the time of its sample (a run that ends early takes
    its latency from them)."""
    from taskmgr.metrics.latency import LatencyHistogram, LatencyMetrics

    periods = []

    async def main():
        sampler = MetricSampler(period=1.0, rng=random.Random(1))
        latency = LatencyMetrics(LatencyHistogram(), periods, lambda: kernel.current_time() - sampler.t0)
        sampler.register("Sink", 0, "tm-0", latency)
        async with kernel.open_nursery() as nursery:
            nursery.start_soon(sampler.run)
            for half in range(8):  # 1 ms in each first half second, 500 ms in each second half
                latency.record([1_000_000 if half % 2 == 0 else 500_000_000], in_steady_state=False)
                await kernel.sleep(0.5)
            nursery.cancel_scope.cancel()
        rows = sampler.table.to_arrow().to_pylist()
        return [(r["t"], r["value"]) for r in rows if r["metric"] == "latencyMaxMs"]

    maxima = kernel.run(main, mode="sim")
    assert [t for t, _ in maxima] == [1.0, 2.0, 3.0, 4.0]
    assert all(value == pytest.approx(500, rel=0.01) for _, value in maxima)
    # kept from half the time of the snapshot before the last (3 s) on: a run that ends now
    # or later takes its latency from its second half, which starts at 2 s at the earliest
    assert [(t, message["max"]) for t, message in periods] == [(t, 500_000_000) for t in (2.0, 3.0, 4.0)]


def test_time_rates_carry_no_float_noise():
    # an idle sink: its idle total, float seconds summed over a run, falls a hair short of
    # the period; its busy time is 0, not 2.3e-13 ms/s (the report printed that)
    counters = {"accumulateIdleTimeMs", "accumulateBackPressuredTimeMs"}
    before = {"accumulateIdleTimeMs": 4000.0000000000005, "accumulateBackPressuredTimeMs": 0.0}
    after = {"accumulateIdleTimeMs": 4999.9999999999995, "accumulateBackPressuredTimeMs": 0.0}
    rates = derive_rates(counters, before, after, 1.0)
    assert rates["idleTimeMsPerSecond"] == 1000.0
    assert rates["busyTimeMsPerSecond"] == 0.0
    # a nanosecond per second still shows
    after["accumulateBackPressuredTimeMs"] = 0.000001
    assert derive_rates(counters, before, after, 1.0)["backPressuredTimeMsPerSecond"] == 0.000001
