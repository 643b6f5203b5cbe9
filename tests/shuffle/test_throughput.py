"""ThroughputCalculator, BufferSizeEMA and BufferDebloater against Flink 2.x's own test
vectors (ThroughputCalculatorTest, BufferSizeEMATest, BufferDebloaterTest; spec 6.3-6.4)."""

from __future__ import annotations

import pytest

from shuffle.throughput import BufferDebloater, BufferSizeEMA, ThroughputCalculator


class ManualClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_throughput_is_bytes_per_second_and_resets_after_each_calculation(clock: ManualClock) -> None:
    calc = ThroughputCalculator(clock)
    calc.incoming_data_size(666)
    clock.now += 100
    assert calc.calculate_throughput() == 6660
    assert calc.calculate_throughput() == 6660  # no time measured: the previous value
    clock.now += 1
    assert calc.calculate_throughput() == 0  # 1 ms measured, no bytes


def test_time_without_data_is_not_measured(clock: ManualClock) -> None:
    calc = ThroughputCalculator(clock)
    calc.incoming_data_size(7)
    clock.now += 1
    calc.pause_measurement()
    clock.now += 9  # idle: ignored
    calc.incoming_data_size(3)  # data resumes the measurement
    clock.now += 1
    assert calc.calculate_throughput() == 5 * 1000


def test_calculation_while_paused_counts_up_to_the_pause(clock: ManualClock) -> None:
    calc = ThroughputCalculator(clock)
    calc.incoming_data_size(10)
    clock.now += 1
    calc.pause_measurement()
    clock.now += 9
    assert calc.calculate_throughput() == 10 * 1000


def test_resume_starts_the_clock_again(clock: ManualClock) -> None:
    calc = ThroughputCalculator(clock)
    calc.pause_measurement()
    clock.now += 50
    calc.resume_measurement()
    calc.incoming_data_size(20)
    clock.now += 10
    assert calc.calculate_throughput() == 2000


def test_bytes_over_the_whole_measured_time(clock: ManualClock) -> None:
    # Flink: ThroughputCalculatorTest.testCorrectThroughputCalculation
    calc = ThroughputCalculator(clock)
    for size, then in ((6666, 1), (3333, 33), (1, 66)):
        calc.incoming_data_size(size)
        clock.now += then
    assert calc.calculate_throughput() == 10_000 * 1000 // 100


def test_resume_without_a_pause_keeps_the_running_measurement(clock: ManualClock) -> None:
    # Flink: ThroughputCalculatorTest.testMultiplyIdleEnd
    calc = ThroughputCalculator(clock)
    calc.incoming_data_size(10)
    for _ in range(3):
        clock.now += 3
        calc.resume_measurement()
    clock.now += 1
    assert calc.calculate_throughput() == 1000  # 10 bytes over all 10 ms


def test_a_calculation_while_paused_does_not_resume_the_measurement(clock: ManualClock) -> None:
    # Flink: ThroughputCalculatorTest.testNotRestartTimerOnCalculationDuringIdleTime
    calc = ThroughputCalculator(clock)
    calc.pause_measurement()
    calc.calculate_throughput()
    clock.now += 9  # still idle: ignored
    calc.incoming_data_size(10)
    clock.now += 1
    assert calc.calculate_throughput() == 10 * 1000


def calls(ema: BufferSizeEMA, *args: tuple[int, int]) -> list[int]:
    return [ema.calculate_buffer_size(total, buffers) for total, buffers in args]


def test_ema_moves_towards_the_desired_size_and_grows_at_most_by_doubling() -> None:
    ema = BufferSizeEMA(200, 10, 3)  # alpha = 0.5, starts at max
    assert calls(ema, (111, 13), *[(107, 7)] * 5, *[(107, 13)] * 3) == [104, 60, 38, 26, 21, 18, 13, 11, 10]
    assert calls(ema, *[(333, 1)] * 6) == [15, 23, 34, 51, 76, 114]


def test_ema_stays_within_min_and_max() -> None:
    assert calls(BufferSizeEMA(200, 10, 3), (0, 1), *[(1000, 1)] * 3) == [100, 150, 200, 200]
    assert calls(BufferSizeEMA(200, 10, 3), *[(0, 1)] * 6) == [100, 50, 25, 13, 10, 10]


def test_ema_with_a_tiny_alpha_does_not_get_stuck() -> None:
    ema = BufferSizeEMA(32 * 1024, 16, 10_000, starting_buffer_size=16)
    for _ in range(10_000):
        ema.calculate_buffer_size(20_000, 10)
    assert ema.calculate_buffer_size(10_000, 10) > 16


@pytest.mark.parametrize("total, buffers", [(-1, 1), (1, 0)])
def test_ema_rejects_negative_sizes_and_no_buffers(total: int, buffers: int) -> None:
    with pytest.raises(ValueError):
        BufferSizeEMA(100, 200, 2).calculate_buffer_size(total, buffers)


def debloater(target_ms: int, min_size: int, max_size: int, threshold: int = 25) -> BufferDebloater:
    return BufferDebloater(target_ms, max_size, min_size, threshold, number_of_samples=1)  # alpha = 1


@pytest.mark.parametrize("target, min_size, max_size, buffers, throughput, expected", [
    (1000, 50, 2400, 0, 1200, 1200),  # zero buffers in use count as one
    (1200, 50, 1100, 16, 3333, 250),  # 3333 x 1.2 = 3999 over 16 buffers
    (1200, 250, 1100, 16, 3333, 250),  # below min: min
    (1200, 50, 1100, 16, 0, 50),  # no throughput: min
    (7, 50, 1100, 16, 3333, 50),  # a target too short: min
])
def test_debloater_announces_the_size(target: int, min_size: int, max_size: int, buffers: int,
                                      throughput: int, expected: int) -> None:
    assert debloater(target, min_size, max_size).recalculate_buffer_size(throughput, buffers) == expected


@pytest.mark.parametrize("max_size", [248, 250])
def test_debloater_stays_quiet_when_the_size_does_not_change(max_size: int) -> None:
    assert debloater(1200, 50, max_size).recalculate_buffer_size(3333, 16) is None


def test_estimated_time_to_consume() -> None:
    d = debloater(1200, 50, 1100)
    d.recalculate_buffer_size(3333, 16)
    assert d.last_estimated_time_to_consume_ms == 250 * 16 * 1000 // 3333


def test_max_is_announced_even_below_the_threshold_and_only_once() -> None:
    d = debloater(1000, 50, 1100)
    assert d.recalculate_buffer_size(500, 1) == 500
    assert d.recalculate_buffer_size(1000, 1) == 1000
    assert d.recalculate_buffer_size(2000, 1) == 1100
    assert d.recalculate_buffer_size(2000, 1) is None
    assert d.last_buffer_size == 1100


def test_min_is_announced_even_below_the_threshold_and_only_once() -> None:
    d = debloater(1000, 50, 1100)
    assert d.recalculate_buffer_size(60, 1) == 60
    assert d.recalculate_buffer_size(60, 1) is None
    assert d.recalculate_buffer_size(40, 1) == 50
    assert d.recalculate_buffer_size(40, 1) is None


def test_skip_update_thresholds() -> None:
    max_size, min_size, current = 32768, 256, 16384
    d = debloater(1000, min_size, max_size, threshold=30)
    assert d.recalculate_buffer_size(current, 1) == current
    delta = int(current * 0.3)
    for size in (current, current - 1, current + 1, current - delta + 1, current + delta - 1):
        assert d.skip_update(size)
    for size in (current - delta, current + delta, min_size + 1, min_size, max_size - 1, max_size,
                 max_size + 1, min_size - 1):
        assert not d.skip_update(size)


def test_debloater_starts_from_the_starting_size() -> None:
    d = BufferDebloater(1000, 32768, 256, 25, 20, starting_buffer_size=1024)
    assert d.last_buffer_size == 1024
    # alpha = 2/21: from 1024 towards 256 the first step is 1024 - 0.095 x 768 = 951 (< 25 %: quiet)
    assert d.recalculate_buffer_size(256, 1) is None
    assert d.ema.last_buffer_size == pytest.approx(1024 - 2 / 21 * 768)
