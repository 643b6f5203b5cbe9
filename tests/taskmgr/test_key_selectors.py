"""A keyed exchange of synthetic (fixed-width) records routes by what the program's key
selector returns, as Flink's KeyGroupStreamPartitioner applies the key selector to every
record; only a selector of the `key` field takes the vectorized key-column path."""

import operator

import pytest

from graph import DiscardingSink, KeyDistribution, StreamExecutionEnvironment
from graph.api.functions import KeySelector
from shuffle.partitioner.key_groups import assign_key_to_parallel_operator
from taskmgr.cluster import execute
from taskmgr.operators.records import reads_key_field


def key_field(record):
    """The key."""
    return record.key


class ModFive(KeySelector):
    def get_key(self, value):
        return value.key % 5


class KeyField(KeySelector):
    def get_key(self, value):
        return value.key


@pytest.mark.parametrize(("selector", "vectorized"), [
    (lambda r: r.key, True), (key_field, True), (operator.attrgetter("key"), True),
    (lambda r: r.key % 2, False), (lambda r: r.seq, False), (lambda r: 0, False),
    (operator.attrgetter("seq"), False), (ModFive().get_key, False), (lambda r, s=1: r.key, False),
    (KeyField().get_key, True),
])
def test_only_a_selector_of_the_key_field_reads_the_key_column(selector, vectorized):
    assert reads_key_field(selector) is vectorized


def records_per_subtask(key_selector):
    env = StreamExecutionEnvironment.get_execution_environment()
    events = env.from_generator(rate=1000, record_size=32, keys=KeyDistribution("uniform", num_keys=1000))
    events.key_by(key_selector).map().name("Keyed").set_parallelism(4).sink_to(DiscardingSink())
    result = execute(env, duration=2.0, task_managers=1, slots_per_task_manager=4, seed=1).raise_for_status()
    return [subtask["metrics"]["numRecordsIn"] for subtask in result.vertex_summary("Keyed")["subtasks"]]


@pytest.mark.parametrize("key_selector", [lambda r: 7, ModFive()])
def test_synthetic_records_go_where_their_selected_key_belongs(key_selector):
    owners = {assign_key_to_parallel_operator(k, 128, 4) for k in ((7,) if callable(key_selector) else range(5))}
    counts = records_per_subtask(key_selector)
    assert {i for i, n in enumerate(counts) if n > 0} == owners


def test_a_key_field_selector_spreads_synthetic_records_by_their_keys():
    assert all(n > 0 for n in records_per_subtask(lambda r: r.key))


def test_partition_custom_applies_a_key_selector_object_to_synthetic_records():
    env = StreamExecutionEnvironment.get_execution_environment()
    events = env.from_generator(rate=1000, record_size=32, keys=KeyDistribution("uniform", num_keys=1000))
    events.partition_custom(lambda key, n: key % n, ModFive()).map().name("Parted").set_parallelism(4) \
        .sink_to(DiscardingSink())
    result = execute(env, duration=2.0, task_managers=1, slots_per_task_manager=4, seed=1).raise_for_status()
    counts = [subtask["metrics"]["numRecordsIn"] for subtask in result.vertex_summary("Parted")["subtasks"]]
    assert all(n > 0 for n in counts)  # keys 0..4 mod 4: every subtask, key 0 and 4 on the first
    assert counts[0] > max(counts[1:])


def test_a_custom_partitioner_returning_a_channel_out_of_range_fails_the_job():
    env = StreamExecutionEnvironment.get_execution_environment()
    events = env.from_generator(rate=1000, record_size=32)
    events.partition_custom(lambda key, n: -1, lambda r: r.key).map().set_parallelism(3).sink_to(DiscardingSink())
    result = execute(env, duration=1.0, task_managers=1, slots_per_task_manager=3)
    assert result.status.name == "FAILED"
    assert "Index -1 out of bounds for length 3" in repr(result.error)
