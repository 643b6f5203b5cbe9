"""Channel selectors (spec 8.1)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shuffle.partitioner.channel_selectors import (
    BroadcastPartitioner,
    CustomPartitionerWrapper,
    ForwardPartitioner,
    GlobalPartitioner,
    KeyGroupStreamPartitioner,
    RebalancePartitioner,
    RescalePartitioner,
    ShufflePartitioner,
    create_channel_selector,
)
from shuffle.partitioner.key_groups import assign_key_to_parallel_operator
from shuffle.serialization.records import FixedWidthRecords


def batch_of(keys):
    return FixedWidthRecords.make(keys, np.arange(len(keys)), 0, 16)


def rng(seed=1):
    return np.random.default_rng(seed)


@pytest.mark.parametrize(
    ("name", "cls", "broadcast", "pointwise"),
    [
        ("forward", ForwardPartitioner, False, True),
        ("rebalance", RebalancePartitioner, False, False),
        ("rescale", RescalePartitioner, False, True),
        ("shuffle", ShufflePartitioner, False, False),
        ("broadcast", BroadcastPartitioner, True, False),
        ("global", GlobalPartitioner, False, False),
        ("hash", KeyGroupStreamPartitioner, False, False),
        ("custom", CustomPartitionerWrapper, False, False),
    ],
)
def test_factory_and_flags(name, cls, broadcast, pointwise):
    selector = create_channel_selector(
        name, key_selector=lambda r: r, max_parallelism=128, custom_partitioner=lambda k, n: 0, rng=rng()
    )
    assert type(selector) is cls
    assert selector.name == name.upper() == repr(selector)
    assert selector.is_broadcast is broadcast
    assert selector.is_pointwise is pointwise


def test_factory_errors():
    with pytest.raises(ValueError, match="unknown partitioner"):
        create_channel_selector("zigzag")
    with pytest.raises(ValueError, match="rng"):
        create_channel_selector("REBALANCE")
    with pytest.raises(ValueError, match="key_selector"):
        create_channel_selector("HASH", max_parallelism=128)
    with pytest.raises(ValueError, match="custom_partitioner"):
        create_channel_selector("CUSTOM", key_selector=lambda r: r)
    with pytest.raises(ValueError, match="Number of key-groups must be > 0!"):
        KeyGroupStreamPartitioner(lambda r: r, 0)


@pytest.mark.parametrize("cls", [ForwardPartitioner, GlobalPartitioner])
def test_constant_selectors(cls):
    selector = cls()
    selector.setup(5)
    assert [selector.select_channel(i) for i in range(4)] == [0, 0, 0, 0]
    assert selector.select_channels(batch_of([1, 2, 3])).tolist() == [0, 0, 0]


def test_rebalance_starts_after_a_random_channel_then_round_robins():
    selector = RebalancePartitioner(rng(7))
    selector.setup(4)
    start = int(rng(7).integers(4))
    expected = [(start + 1 + i) % 4 for i in range(9)]
    assert [selector.select_channel(None) for _ in range(9)] == expected
    other = RebalancePartitioner(rng(7))
    other.setup(4)
    assert [other.select_channel(None) for _ in range(9)] == expected  # same seed, same choices


def test_rescale_starts_at_zero():
    selector = RescalePartitioner()
    selector.setup(3)
    assert [selector.select_channel(None) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


@given(st.sampled_from(["REBALANCE", "RESCALE"]), st.integers(1, 9), st.lists(st.integers(0, 20), max_size=6))
def test_batches_continue_the_scalar_counter(name, n, batch_sizes):
    scalar = create_channel_selector(name, rng=rng(3))
    mixed = create_channel_selector(name, rng=rng(3))
    scalar.setup(n)
    mixed.setup(n)
    got = []
    for size in batch_sizes:
        got += mixed.select_channels(batch_of(np.arange(size))).tolist()
        got.append(mixed.select_channel(None))
    expected = [scalar.select_channel(None) for _ in range(len(got))]
    assert got == expected


def test_shuffle_is_uniform_and_deterministic():
    first, second = ShufflePartitioner(rng(11)), ShufflePartitioner(rng(11))
    first.setup(4)
    second.setup(4)
    picks = first.select_channels(batch_of(np.arange(8000)))
    assert picks.tolist() == second.select_channels(batch_of(np.arange(8000))).tolist()
    counts = np.bincount(picks, minlength=4)
    assert counts.min() > 1800 and counts.max() < 2200
    assert {first.select_channel(None) for _ in range(200)} == {0, 1, 2, 3}


def test_broadcast_cannot_select():
    selector = BroadcastPartitioner()
    selector.setup(3)
    with pytest.raises(NotImplementedError, match="Broadcast partitioner does not support select channels."):
        selector.select_channel("x")
    with pytest.raises(NotImplementedError):
        selector.select_channels(batch_of([1]))


def test_hash_follows_key_groups():
    selector = KeyGroupStreamPartitioner(lambda record: record[0], 128)
    selector.setup(4)
    # "flink" is in key group 98 at maxP 128, owned by operator 98 * 4 // 128 = 3
    assert selector.select_channel(("flink", 1)) == 3
    assert selector.select_channel(("a", 1)) == 81 * 4 // 128
    with pytest.raises(RuntimeError, match=r"Could not extract key from \(\)"):
        selector.select_channel(())


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50), st.integers(1, 64))
def test_hash_batch_equals_scalar(keys, n):
    selector = KeyGroupStreamPartitioner(lambda record: record, 256)
    selector.setup(n)
    expected = [assign_key_to_parallel_operator(k, 256, n) for k in keys]
    assert [selector.select_channel(k) for k in keys] == expected
    assert selector.select_channels(batch_of(keys)).tolist() == expected
    assert selector.select_channel_list(batch_of(keys)) == expected
    small_keys = [k % 3000 for k in keys]  # the tabulated range, then a key beyond it
    assert selector.select_channel_list(batch_of(small_keys)) == [
        assign_key_to_parallel_operator(k, 256, n) for k in small_keys]


class ModPartitioner:
    def partition(self, key, num_partitions):
        return key % num_partitions


@pytest.mark.parametrize("partitioner", [ModPartitioner(), lambda key, n: key % n])
def test_custom_partitioner(partitioner):
    selector = CustomPartitionerWrapper(partitioner, lambda record: record["k"])
    selector.setup(3)
    assert [selector.select_channel({"k": k}) for k in (4, 5, 9)] == [1, 2, 0]
    assert selector.select_channels(batch_of([4, 5, 9])).tolist() == [1, 2, 0]
    with pytest.raises(RuntimeError, match="Could not extract key from"):
        selector.select_channel({})


@pytest.mark.parametrize("channel", [-1, 3])
def test_a_custom_channel_out_of_range_fails(channel):
    selector = CustomPartitionerWrapper(lambda key, n: channel, lambda record: record)
    selector.setup(3)
    with pytest.raises(IndexError, match=f"Index {channel} out of bounds for length 3"):
        selector.select_channel(1)
    with pytest.raises(IndexError, match=f"Index {channel} out of bounds for length 3"):
        selector.select_channels(batch_of([1, 2]))


def test_a_custom_channel_that_is_no_integer_fails_at_once():
    selector = CustomPartitionerWrapper(lambda key, n: 1.0, lambda record: record)
    selector.setup(3)
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        selector.select_channel(1)


def parity_views(batch):
    return [{"k": k % 2} for k in batch.keys.tolist()]


@pytest.mark.parametrize("selector", [
    KeyGroupStreamPartitioner(lambda r: r["k"], 128, record_views=parity_views),
    CustomPartitionerWrapper(ModPartitioner(), lambda r: r["k"], record_views=parity_views),
])
def test_keyed_selectors_apply_their_key_selector_to_the_rows_record_views_give(selector):
    selector.setup(4)
    keys = [0, 1, 2, 3, 7]
    expected = [selector.select_channel({"k": k % 2}) for k in keys]
    assert selector.select_channels(batch_of(keys)).tolist() == expected
    assert selector.select_channel_list(batch_of(keys)) == expected
