"""Compiled DataStream programs run end to end with the right results (sim mode)."""

from __future__ import annotations

from collections import Counter

from graph import (
    CollectSink,
    CoMapFunction,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from taskmgr.cluster import execute
from taskmgr.operators import VerifyingSink


def run(env: StreamExecutionEnvironment, **kwargs):
    kwargs.setdefault("duration", 30)
    result = execute(env, **kwargs).raise_for_status()
    assert result.invariant_violations() == []
    return result


def test_map_filter_key_by_reduce() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    (env.from_sequence(1, 100)
        .map(lambda x: (x % 3, x))
        .filter(lambda kv: kv[1] % 2 == 0)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(CollectSink("sums")))
    result = run(env, task_managers=2)
    final = {}
    for key, total in result.collected["sums"]:
        final[key] = max(final.get(key, 0), total)
    expected = Counter()
    for x in range(2, 101, 2):
        expected[x % 3] += x
    assert final == dict(expected)
    assert len(result.collected["sums"]) == 50


def test_a_function_after_a_network_hop_sees_synthetic_records() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    sink = CollectSink("seen")
    (env.from_generator(rate=100, record_size=64).map(lambda r: r).name("Identity")
        .rebalance().map(lambda r: (type(r).__name__, r.key, r.seq)).set_parallelism(2).name("Look").sink_to(sink))
    seen = [value for values in run(env, duration=2, task_managers=2).collected.values() for value in values]
    assert len(seen) > 100
    assert {name for name, _, _ in seen} == {"SyntheticRecord"}  # not plain tuples
    assert len({seq for _, _, seq in seen}) == len(seen)


def test_union_of_two_sources() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    first = env.from_collection([1, 2, 3])
    second = env.from_sequence(10, 12).set_parallelism(2)
    first.union(second).map(lambda x: x * 10).sink_to(CollectSink("out"))
    result = run(env, task_managers=2, slots_per_task_manager=2)
    assert sorted(result.collected["out"]) == [10, 20, 30, 100, 110, 120]


class Tag(CoMapFunction):
    def map1(self, value):
        return ("left", value)

    def map2(self, value):
        return ("right", value)


def test_connect_co_map() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2]).connect(env.from_collection(["a"])).map(Tag()).sink_to(CollectSink("out"))
    result = run(env)
    assert sorted(result.collected["out"]) == [("left", 1), ("left", 2), ("right", "a")]


def test_broadcast_reaches_every_subtask() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2]).broadcast().map(lambda x: x).set_parallelism(3).sink_to(CollectSink("out"))
    result = run(env, task_managers=3)
    assert sorted(result.collected["out"]) == [1, 1, 1, 2, 2, 2]


ODD = OutputTag("odd")


class SplitOdd(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            yield ODD, value
        else:
            yield value


def test_side_outputs() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    main = env.from_sequence(1, 6).process(SplitOdd())
    main.sink_to(CollectSink("even"))
    main.get_side_output(ODD).map(lambda x: -x).sink_to(CollectSink("odd"))
    result = run(env)
    assert sorted(result.collected["even"]) == [2, 4, 6]
    assert sorted(result.collected["odd"]) == [-5, -3, -1]


def test_iteration_feeds_back_until_done() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    iteration = env.from_collection([5, 3]).iterate(max_wait_time="1s")
    minus_one = iteration.map(lambda x: x - 1)
    iteration.close_with(minus_one.filter(lambda x: x > 0))
    minus_one.filter(lambda x: x <= 0).sink_to(CollectSink("done"))
    minus_one.sink_to(CollectSink("all"))
    result = run(env)
    assert result.collected["done"] == [0, 0]
    assert sorted(result.collected["all"]) == [0, 0, 1, 1, 2, 2, 3, 4]


def test_verifying_sink_sees_every_generator_record_once_in_order() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(count=20_000, record_size=24).set_parallelism(3)
        .key_by(lambda r: r.key).map(cost="1us").set_parallelism(2)
        .rebalance().sink_to(VerifyingSink("check")).set_parallelism(2))
    result = run(env, task_managers=2, slots_per_task_manager=2)
    report = result.verifications["check"]
    assert report == {"received": 60_000, "out_of_order": 0, "duplicates": 0, "missing": 0, "ok": True}
    assert result.records_emitted == result.records_received == 60_000
    assert result.duration < 30  # bounded sources end the job


def test_verifying_sink_checks_order_only_where_flink_keeps_it() -> None:
    """Flink keeps the order of each channel, not of a source subtask's records across
    paths: after a second all-to-all exchange a task merges one source subtask's records
    from several channels, so the next hop can carry them out of their order. The verifying
    sink then reports no order (None) and still checks loss and duplicates."""
    def job(exchanges: int) -> dict:
        env = StreamExecutionEnvironment.get_execution_environment()
        stream = env.from_generator(count=500, record_size=40000).name("Gen").set_parallelism(2)
        for i in range(exchanges - 1):
            stream = stream.key_by(lambda r: r.key).map().name(f"S{i}").set_parallelism(3 - i)
        stream.rebalance().sink_to(VerifyingSink("check")).name("Check")
        return run(env, task_managers=3).verifications["check"]

    assert job(2) == {"received": 1000, "out_of_order": 0, "duplicates": 0, "missing": 0, "ok": True}
    assert job(3) == {"received": 1000, "out_of_order": None, "duplicates": 0, "missing": 0, "ok": True}
