"""The programs of the golden cases (shared/reference/flink-golden/cases, beside the repository), written
with shufflesim's Python API. Each takes a fresh environment and builds the program."""

from __future__ import annotations

from graph import (
    CoMapFunction,
    DiscardingSink,
    Partitioner,
    ReduceFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)


def seq(env: StreamExecutionEnvironment, name: str):
    return env.from_sequence(1, 1000).name(name)


def to_pair(x):
    return (x % 3, x)


def add_pairs(a, b):
    return (a[0], a[1] + b[1])


class SumReduce(ReduceFunction):
    def reduce(self, a, b):
        return add_pairs(a, b)


class MyCoMap(CoMapFunction):
    def map1(self, value):
        return value

    def map2(self, value):
        return value


class ModPartitioner(Partitioner):
    def partition(self, key, num_partitions):
        return key % num_partitions


def batch_mode_explicit_parallelism(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    (env.from_sequence(1, 1000).name("Seq").set_parallelism(2)
        .map(to_pair).set_parallelism(2)
        .key_by(lambda t: t[0])
        .reduce(add_pairs).set_parallelism(2)
        .map(lambda t: t[1]).set_parallelism(2)
        .rebalance().map(lambda x: x + 1).set_parallelism(2)
        .print().set_parallelism(2))


def batch_mode_key_by_reduce(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(2)
    seq(env, "Seq").map(to_pair).key_by(lambda t: t[0]).reduce(add_pairs).print()


def broadcast(env):
    env.set_parallelism(2)
    (seq(env, "Seq").map(lambda x: x + 1)
        .broadcast().filter(lambda x: x > 10).set_parallelism(3)
        .print().set_parallelism(3))


def connect_keyed_co_map(env):
    env.set_parallelism(2)
    a = seq(env, "SeqA")
    b = seq(env, "SeqB")
    a.key_by(lambda x: x % 4).connect(b.key_by(lambda x: x % 4)).map(MyCoMap()).print()


def disable_chaining_one_operator(env):
    env.set_parallelism(2)
    (seq(env, "Seq").map(lambda x: x + 1)
        .filter(lambda x: x > 10).disable_chaining()
        .map(lambda x: x * 2)
        .print())


def forward_explicit_same_parallelism(env):
    env.set_parallelism(2)
    seq(env, "Seq").map(lambda x: x + 1).forward().filter(lambda x: x > 10).print()


def forward_parallelism_mismatch(env):
    env.set_parallelism(2)
    (seq(env, "Seq").map(lambda x: x + 1)
        .forward().filter(lambda x: x > 10).set_parallelism(4)
        .print().set_parallelism(4))


def key_by_count_window(env):
    env.set_parallelism(2)
    seq(env, "Seq").map(to_pair).key_by(lambda t: t[0]).count_window(10).reduce(SumReduce()).print()


def key_by_reduce(env):
    env.set_parallelism(2)
    seq(env, "Seq").map(to_pair).key_by(lambda t: t[0]).reduce(add_pairs).print()


def key_by_reduce_parallelism_change(env):
    env.set_parallelism(2)
    (seq(env, "Seq").map(to_pair).key_by(lambda t: t[0])
        .reduce(add_pairs).set_parallelism(3)
        .print().set_parallelism(3))


def partition_custom(env):
    env.set_parallelism(2)
    (seq(env, "Seq").partition_custom(ModPartitioner(), lambda x: x)
        .map(lambda x: x + 1).set_parallelism(3)
        .print().set_parallelism(3))


def rebalance_same_parallelism(env):
    env.set_parallelism(2)
    seq(env, "Seq").map(lambda x: x + 1).rebalance().filter(lambda x: x > 10).print()


def rebalance_vs_forward(env):
    env.set_parallelism(4)
    (env.from_collection([1, 2, 3, 4, 5])
        .map(lambda x: x + 1).set_parallelism(4)
        .filter(lambda x: x > 1)
        .print())


def shuffle(env):
    env.set_parallelism(2)
    seq(env, "Seq").map(lambda x: x + 1).shuffle().filter(lambda x: x > 10).print()


def sink_v2_discarding(env):
    env.set_parallelism(2)
    seq(env, "Seq").map(lambda x: x + 1).sink_to(DiscardingSink())


def slot_sharing_group(env):
    env.set_parallelism(2)
    (seq(env, "Seq").map(lambda x: x + 1)
        .filter(lambda x: x > 10).slot_sharing_group("ssg-a")
        .map(lambda x: x * 2).slot_sharing_group("ssg-a")
        .print().slot_sharing_group("default"))


def union_same_parallelism(env):
    env.set_parallelism(2)
    a = seq(env, "SeqA").map(lambda x: x + 1)
    b = seq(env, "SeqB").map(lambda x: x - 1)
    a.union(b).filter(lambda x: x > 0).print()


def union_two_sources(env):
    env.set_parallelism(2)
    a = seq(env, "SeqA")
    b = env.from_sequence(1, 1000).name("SeqB").set_parallelism(1)
    a.union(b).map(lambda x: x * 2).print()


PROGRAMS = {name: program for name, program in globals().items()
            if callable(program) and getattr(program, "__module__", None) == __name__
            and name not in ("seq", "to_pair", "add_pairs") and not isinstance(program, type)}
