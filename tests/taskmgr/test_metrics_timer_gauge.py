import pytest

from shuffle import kernel
from taskmgr.metrics.task_io_metrics import COUNTERS, TaskIOMetricGroup
from taskmgr.metrics.timer_gauge import TimerGauge


async def test_timer_gauge_accumulates_in_virtual_time(sim_kernel):
    gauge = TimerGauge()
    gauge.mark_start()
    await kernel.sleep(2)
    gauge.mark_end()
    await kernel.sleep(5)  # not measuring: not counted
    gauge.mark_start()
    gauge.mark_start()  # no-op while measuring
    await kernel.sleep(1)
    gauge.mark_end()
    gauge.mark_end()  # no-op while not measuring
    assert gauge.accumulated() == 3.0
    assert gauge.max_single() == 2.0


async def test_running_interval_counts_up_to_now(sim_kernel):
    gauge = TimerGauge()
    gauge.mark_start()
    await kernel.sleep(4)
    assert gauge.is_measuring
    assert gauge.accumulated() == 4.0


async def test_max_single_is_the_longest_interval_of_the_last_update_interval(sim_kernel):
    """As Flink's getMaxSingleMeasurement: per 5 s update interval, the longest interval
    that ended in it or ran through its end, measured from its start; it can go down."""
    gauge = TimerGauge()
    gauge.mark_start()
    await kernel.sleep(1)
    gauge.mark_end()  # 0-1
    await kernel.sleep(1)
    gauge.mark_start()
    await kernel.sleep(2)
    assert gauge.max_single() == 0.0  # no update interval complete yet
    await kernel.sleep(5)  # running 2-9: 3 s long at the end of [0, 5)
    assert gauge.max_single() == 3.0
    gauge.mark_end()
    await kernel.sleep(1)  # at 10: it ended in [5, 10), 7 s long
    assert gauge.max_single() == 7.0
    gauge.mark_start()
    await kernel.sleep(0.5)
    gauge.mark_end()
    await kernel.sleep(5)  # [10, 15): 0.5 s, down from 4
    assert gauge.max_single() == 0.5
    await kernel.sleep(20)  # nothing measured since
    assert gauge.max_single() == 0.0
    gauge.mark_start()
    await kernel.sleep(12)  # from 35.5: 9.5 s long at the end of [40, 45)
    assert gauge.max_single() == 9.5
    assert gauge.accumulated() == 1.0 + 7.0 + 0.5 + 12.0


def test_injected_clock():
    now = [10.0]
    gauge = TimerGauge(clock=lambda: now[0])
    gauge.mark_start()
    now[0] = 10.25
    gauge.mark_end()
    assert gauge.accumulated() == 0.25


async def test_task_io_metrics_busy_is_elapsed_minus_idle_and_backpressure(sim_kernel):
    group = TaskIOMetricGroup()
    group.mark_task_start()
    group.idle.mark_start()
    await kernel.sleep(1)
    group.idle.mark_end()
    await kernel.sleep(2)  # busy
    group.soft_backpressure.mark_start()
    await kernel.sleep(3)
    group.soft_backpressure.mark_end()
    group.hard_backpressure.mark_start()
    await kernel.sleep(0.5)
    group.hard_backpressure.mark_end()
    times = group.accumulated_times()
    assert times == (2.0, 1.0, 3.5, 3.0, 0.5)
    group.num_records_out += 7
    snap = group.snapshot()
    assert snap["accumulateBusyTimeMs"] == 2000.0
    assert snap["accumulateBackPressuredTimeMs"] == 3500.0
    assert snap["maxSoftBackPressureTimeMs"] == 2000.0  # 3-6: 2 s long at the update at 5
    assert snap["numRecordsOut"] == 7.0
    assert COUNTERS <= snap.keys()
    assert "maxHardBackPressureTimeMs" not in COUNTERS


def test_a_measurement_across_updates_is_counted_from_its_start():
    """TimerGaugeTest testUpdateBeforeMarkingEnd and testUpdateWithoutMarkingEnd: a measurement
    running at an update counts there up to it, and at the next update as a whole."""
    now = [0.0]
    ended, running = TimerGauge(clock=lambda: now[0]), TimerGauge(clock=lambda: now[0])
    now[0] = 4.99
    ended.mark_start()
    running.mark_start()
    now[0] = 5.0
    assert ended.max_single() == pytest.approx(0.01) and running.max_single() == pytest.approx(0.01)
    now[0] = 5.01
    ended.mark_end()
    now[0] = 10.0
    assert ended.max_single() == pytest.approx(0.02)  # ended in [5, 10), from its start
    assert running.max_single() == pytest.approx(5.01)  # spans two updates
    assert ended.accumulated() == pytest.approx(0.02) and running.accumulated() == pytest.approx(5.01)
