import numpy as np
import pytest

from graph import GeneratorSource, KeyDistribution
from taskmgr.workloads import GeneratorState, KeySampler, RateSchedule, subtask_rng

N = 100_000


def sample(distribution, n=N, seed=1):
    return KeySampler(distribution).sample(subtask_rng(seed, "Source", 0), n)


def test_uniform_keys_cover_the_range_evenly():
    keys = sample(KeyDistribution("uniform", num_keys=10))
    assert keys.dtype == np.int64
    counts = np.bincount(keys, minlength=10)
    assert len(counts) == 10
    assert np.all(np.abs(counts / N - 0.1) < 0.01)


def test_hot_key_share_within_tolerance():
    keys = sample(KeyDistribution("hot_key", num_keys=100, hot_key_fraction=0.3))
    assert abs(np.mean(keys == 0) - 0.3) < 0.01
    rest = keys[keys != 0]
    assert rest.min() >= 1 and rest.max() <= 99
    assert abs(np.mean(rest == 50) - 1 / 99) < 0.003


def test_zipf_is_skewed_and_bounded():
    s, num_keys = 1.2, 50
    keys = sample(KeyDistribution("zipf", num_keys=num_keys, zipf_exponent=s))
    assert keys.min() >= 0 and keys.max() < num_keys
    harmonic = sum(1 / k**s for k in range(1, num_keys + 1))
    shares = np.bincount(keys, minlength=num_keys) / N
    assert shares[0] == pytest.approx(1 / harmonic, abs=0.01)
    assert shares[1] == pytest.approx(2**-s / harmonic, abs=0.01)
    assert shares[0] > shares[1] > shares[9] > shares[49]


def test_keys_are_deterministic_per_seed_vertex_and_subtask():
    dist = KeyDistribution("zipf", num_keys=1000)
    a = KeySampler(dist).sample(subtask_rng(7, "Events", 1), 1000)
    b = KeySampler(dist).sample(subtask_rng(7, "Events", 1), 1000)
    assert np.array_equal(a, b)
    for other in (subtask_rng(8, "Events", 1), subtask_rng(7, "Events", 0), subtask_rng(7, "Orders", 1)):
        assert not np.array_equal(a, KeySampler(dist).sample(other, 1000))


def test_generator_batches_have_increasing_seqs_and_stop_at_count():
    source = GeneratorSource(rate=0, record_size=32, keys=KeyDistribution("uniform", num_keys=8), count=250)
    state = GeneratorState.for_subtask(source, seed=3, vertex="Source", subtask=1)
    batches = [state.next_batch(100, timestamp_ns=t) for t in (5, 6, 7)]
    assert [len(b) for b in batches] == [100, 100, 50]
    assert state.exhausted and len(state.next_batch(100, 8)) == 0
    seqs = np.concatenate([b.seqs for b in batches])
    assert np.array_equal(seqs, np.arange(250))
    assert batches[0].record_size == 32
    assert set(batches[1].timestamps) == {6}
    assert np.all((batches[0].keys >= 0) & (batches[0].keys < 8))


def test_unbounded_generator_never_exhausts():
    state = GeneratorState(KeySampler(KeyDistribution()), subtask_rng(0, "S", 0), 16)
    state.next_batch(10, 0)
    assert not state.exhausted and state.next_seq == 10


def test_rate_schedule_counts_due_records():
    schedule = RateSchedule(rate=3.0, start=10.0)
    assert schedule.records_due(9.0) == 0
    assert schedule.records_due(10.0) == 0
    assert schedule.records_due(10.0 + 1 / 3) == 1
    assert schedule.records_due(11.0) == 3


@pytest.mark.parametrize("rate", [3.0, 7.3, 1e6 / 3, 0.7])
def test_rate_schedule_never_drifts_or_spins(rate):
    """A source that sleeps until the next record is due emits exactly one each time."""
    schedule = RateSchedule(rate=rate, start=123.456)
    emitted = 0
    for _ in range(5_000):
        now = schedule.time_due(emitted + 1)
        assert schedule.records_due(now) == emitted + 1
        assert schedule.records_due(np.nextafter(now, 0)) == emitted
        emitted += 1
    assert now == pytest.approx(123.456 + 5_000 / rate)


def test_rate_schedule_needs_a_positive_rate():
    with pytest.raises(ValueError, match="rate"):
        RateSchedule(rate=0, start=0.0)


@pytest.mark.parametrize("kind", ["uniform", "zipf", "hot_key"])
def test_batches_draw_the_keys_one_draw_of_all_of_them_gives(kind):
    source = GeneratorSource(rate=2000, record_size=32, keys=KeyDistribution(kind, num_keys=5000))
    state = GeneratorState.for_subtask(source, 3, "Gen", 1)
    keys = np.concatenate([state.next_batch(n, 0).keys for n in (1, 2, 3, 1500, 7, 1, 2000)])
    expected = KeySampler(source.keys).sample(subtask_rng(3, "Gen", 1), len(keys))
    assert keys.tolist() == expected.tolist()
    # and draws of any sizes give the same keys: a record's key is not a matter of batching
    rng = subtask_rng(3, "Gen", 1)
    drawn = np.concatenate([KeySampler(source.keys).sample(rng, n) for n in (1, 2, 3, 1500, 7, 1, 2000)])
    assert drawn.tolist() == expected.tolist()
