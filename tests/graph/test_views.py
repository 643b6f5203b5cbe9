"""Plan JSON, DOT and terminal renderings, and the murmur3 hash behind vertex ids."""

import json

from graph import StreamExecutionEnvironment, plan_json, render_plan, to_dot
from graph.hashing import murmur3_128


def program():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_sequence(1, 10).name("Seq").map(lambda x: x).key_by(lambda x: x % 2).reduce(
        lambda a, b: a + b).set_parallelism(3).print().set_parallelism(3)
    return env


def test_murmur3_matches_guava():
    assert murmur3_128(b"").hex() == "00000000000000000000000000000000"
    assert murmur3_128(b"The quick brown fox jumps over the lazy dog").hex() == "6c1b07bc7bbc4be347939ac4a93c437a"


def test_plan_json_holds_plan_and_job_graph():
    env = program()
    plan = plan_json(env)
    assert plan["stream_graph"] == json.loads(env.get_execution_plan())
    assert plan["job_graph"] == env.get_job_graph().to_dict()
    json.dumps(plan)


def test_render_plan_shows_the_three_graphs():
    env = program()
    text = render_plan(env)
    assert text == render_plan(env.get_job_graph())
    assert "StreamGraph (STREAMING, chaining on)" in text
    assert "(1) Keyed Reduce -> Sink: Print to Std. Out  [p=3, max=128" in text
    assert "gate 0 <- (0) HASH ALL_TO_ALL PIPELINED_BOUNDED [ds0]" in text
    assert "Keyed Reduce -> Sink: Print to Std. Out (3/3)" in text
    assert "gate 0 reads ds0#0[2], ds0#1[2]" in text
    assert "Source: Seq -> Map (1/2)\n      writes ds0#0: 3 subpartitions -> [1.0, 1.1, 1.2]" in text
    # a producer read by one consumer subtask: "1 subpartitions" was what plan printed
    one = StreamExecutionEnvironment.get_execution_environment()
    one.from_sequence(1, 10).name("Seq").rebalance().map(lambda x: x).set_parallelism(1)
    assert "writes ds0#0: 1 subpartition -> [1.0]" in render_plan(one)


def test_dot_of_each_graph():
    env = program()
    stream_dot = to_dot(env.get_stream_graph())
    job_dot = to_dot(env.get_job_graph())
    execution_dot = to_dot(env.get_execution_graph())
    assert stream_dot.startswith("digraph StreamGraph {") and 'n2 -> n4 [label="HASH"]' in stream_dot
    assert "v0 -> v1" in job_dot and "Source: Seq -> Map" in job_dot
    assert execution_dot.count(" -> v1_") == 6 and "subgraph cluster_v1" in execution_dot
