"""The compiler beyond the golden files: chaining, naming, partitioners, unions,
connect, side outputs, slot sharing, ids."""

import json

import pytest

from graph import (
    CoProcessFunction,
    CollectSink,
    DiscardingSink,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
    UnsupportedOperationException,
)
from graph.hashing import murmur3_128
from graph.plan_json import stream_graph_detail


@pytest.fixture
def env():
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)


def names(env):
    return [vertex.name for vertex in env.get_job_graph().vertices]


def edges(env):
    return [(e["source_vertex"], e["target_vertex"], e["target_input_gate"], e["ship_strategy"],
             e["distribution_pattern"]) for e in env.get_job_graph().to_dict()["edges"]]


class Split(ProcessFunction):
    def process_element(self, value, ctx):
        yield value


def test_branches_inside_a_chain_are_named_with_parentheses_at_every_level(env):
    source = env.from_sequence(1, 10).name("Seq")
    mapped = source.map(lambda x: x)
    mapped.filter(lambda x: True).print()
    nested = mapped.flat_map(lambda x: [x])
    nested.map(lambda x: x).add_sink(DiscardingSink())
    nested.filter(lambda x: x).print()
    vertex = env.get_job_graph().vertices[0]
    assert vertex.name == ("Source: Seq -> Map -> (Filter -> Sink: Print to Std. Out, "
                           "Flat Map -> (Map -> Sink: Unnamed, Filter -> Sink: Print to Std. Out))")
    assert vertex.operator_pretty_name == (
        "Source: Seq\n+- Map\n   :- Filter\n   :  +- Sink: Print to Std. Out\n   +- Flat Map\n"
        "      :- Map\n      :  +- Sink: Unnamed\n      +- Filter\n         +- Sink: Print to Std. Out\n"
    )
    assert [(n.operator_name, vertex.chain_indices[n.id]) for n in vertex.operators] == [
        ("Source: Seq", 1), ("Map", 2), ("Filter", 3), ("Sink: Print to Std. Out", 4), ("Flat Map", 3),
        ("Map", 4), ("Sink: Unnamed", 5), ("Filter", 4), ("Sink: Print to Std. Out", 5)]


def test_side_outputs_chain_and_carry_their_tag(env):
    late = OutputTag("late")
    processed = env.from_sequence(1, 10).process(Split())
    processed.get_side_output(late).map(lambda x: x).sink_to(CollectSink("late"))
    processed.rebalance().print()
    graph = env.get_stream_graph()
    detail = stream_graph_detail(graph)
    # the side output (3), the sink transformation (5) and the partitioning (6) have no
    # node; translation numbers the side output's virtual node 8, the writer 9 and the
    # partitioning's virtual node 10, in the order the operators were added
    assert sorted(graph.nodes) == [1, 2, 4, 7, 9]
    tags = {(e["source"], e["target"]): e["output_tag"] for e in detail["edges"]}
    assert tags == {(1, 2): None, (2, 4): "late", (4, 9): None, (2, 7): None}
    job = env.get_job_graph()
    assert [v.name for v in job.vertices] == [
        "Source: Sequence Source -> Process -> Map -> Sink: Writer", "Sink: Print to Std. Out"]
    process = graph.node(2)
    assert [e.output_tag for e in job.vertices[0].operators[1].chained_outputs] == [late]
    assert process.operator_name == "Process"


def test_disable_operator_chaining_gives_one_vertex_per_operator(env):
    env.disable_operator_chaining()
    env.from_sequence(1, 10).map(lambda x: x).filter(lambda x: True).print()
    assert names(env) == ["Source: Sequence Source", "Map", "Filter", "Sink: Print to Std. Out"]
    assert {e[3] for e in edges(env)} == {"FORWARD"}
    assert stream_graph_detail(env.get_stream_graph())["chaining_enabled"] is False


def test_start_new_chain_breaks_before_the_operator_only(env):
    env.from_sequence(1, 10).map(lambda x: x).filter(lambda x: True).start_new_chain().map(lambda x: x).print()
    assert names(env) == ["Source: Sequence Source -> Map", "Filter -> Map -> Sink: Print to Std. Out"]
    assert env.get_stream_graph().node(3).chaining_strategy.value == "HEAD"


def test_rescale_and_global_and_broadcast_edges(env):
    source = env.from_sequence(1, 10).name("S")
    source.rescale().map(lambda x: x).set_parallelism(4).print().set_parallelism(4)
    source.global_().filter(lambda x: True).set_parallelism(1).print().set_parallelism(1)
    source.broadcast().flat_map(lambda x: [x]).print()
    job = env.get_job_graph().to_dict()
    strategies = {(e["ship_strategy"], e["distribution_pattern"], e["upstream_subtask_state_mapper"],
                   e["downstream_subtask_state_mapper"], e["is_broadcast"], e["is_forward"]) for e in job["edges"]}
    assert strategies == {
        ("RESCALE", "POINTWISE", "UNSUPPORTED", "UNSUPPORTED", False, False),
        ("GLOBAL", "ALL_TO_ALL", "ARBITRARY", "FIRST", False, False),
        ("BROADCAST", "ALL_TO_ALL", "UNSUPPORTED", "UNSUPPORTED", True, False),
    }
    assert job["vertices"][0]["name"] == "Source: S" and len(job["vertices"][0]["produced_data_sets"]) == 3


def test_union_of_three_gives_three_gates_and_never_chains(env):
    a = env.from_sequence(1, 10).name("A")
    b = env.from_sequence(1, 10).name("B")
    c = env.from_sequence(1, 10).name("C").set_parallelism(1)
    a.union(b, c).map(lambda x: x).print()
    plan = json.loads(env.get_execution_plan())
    assert plan["nodes"][3] == {
        "id": 5, "type": "Map", "pact": "Operator", "contents": "Map", "parallelism": 2,
        "predecessors": [{"id": 1, "ship_strategy": "FORWARD", "side": "second"},
                         {"id": 2, "ship_strategy": "FORWARD", "side": "second"},
                         {"id": 3, "ship_strategy": "REBALANCE", "side": "second"}]}
    assert names(env) == ["Source: A", "Source: B", "Source: C", "Map -> Sink: Print to Std. Out"]
    assert edges(env) == [(0, 3, 0, "FORWARD", "POINTWISE"), (1, 3, 1, "FORWARD", "POINTWISE"),
                          (2, 3, 2, "REBALANCE", "ALL_TO_ALL")]
    # a logical input that mixes pointwise and all-to-all edges cannot be rescaled unaligned
    detail = stream_graph_detail(env.get_stream_graph())
    assert {e["supports_unaligned_checkpoints"] for e in detail["edges"] if e["target"] == 5} == {False}


def test_self_union_gives_two_distinct_edges(env):
    source = env.from_sequence(1, 10)
    source.union(source).map(lambda x: x).print()
    graph = env.get_stream_graph()
    assert [e.unique_id for e in graph.node(1).out_edges] == [0, 1]
    assert [len(v.inputs) for v in env.get_job_graph().vertices] == [0, 2]


class Join(CoProcessFunction):
    def process_element1(self, value, ctx):
        yield value

    def process_element2(self, value, ctx):
        yield value


def test_connect_then_key_by_is_keyed_and_input_gates_follow_vertex_creation(env):
    first = env.from_sequence(1, 10).name("B")    # id 1: its chain is built first
    second = env.from_sequence(1, 10).name("A")   # id 2
    second.connect(first).key_by(lambda x: x, lambda x: x).process(Join()).print()
    graph = env.get_stream_graph()
    co_process = graph.node(5)
    assert co_process.operator_name == "Co-Process" and co_process.keyed
    assert [(e.source_id, e.type_number, e.partitioner.name) for e in co_process.in_edges] == [
        (2, 1, "HASH"), (1, 2, "HASH")]
    job = env.get_job_graph()
    # Flink connects in the order vertices were created: source 1's edge (input 2) is gate 0
    assert [(e.source_vertex.name, e.target_input_gate, e.type_number) for e in job.vertices[2].inputs] == [
        ("Source: B", 0, 2), ("Source: A", 1, 1)]
    assert job.vertices[2].name == "Co-Process -> Sink: Print to Std. Out"


def test_hash_edges_carry_the_consumers_key_group_count(env):
    env.from_sequence(1, 10).key_by(lambda x: x).reduce(lambda a, b: a).set_parallelism(200).print().set_parallelism(200)
    (edge,) = env.get_job_graph().edges
    assert edge.partitioner.name == "HASH" and edge.partitioner.max_parallelism == 512
    assert edge.target.max_parallelism == 512 and edge.target.configured_max_parallelism == -1


def test_configured_max_parallelism_is_shown_and_used(env):
    env.set_max_parallelism(64)
    env.from_sequence(1, 10).key_by(lambda x: x).sum(0).print()
    job = env.get_job_graph()
    assert [v["max_parallelism"] for v in job.to_dict()["vertices"]] == [64, 64]
    assert job.vertices[1].name == "Keyed Aggregation -> Sink: Print to Std. Out"
    assert job.edges[0].partitioner.max_parallelism == 64


def test_slot_sharing_group_is_inherited_and_union_of_different_groups_falls_back(env):
    a = env.from_sequence(1, 10).name("A").slot_sharing_group("x")
    b = env.from_sequence(1, 10).name("B").slot_sharing_group("y")
    a.map(lambda v: v).union(a.filter(lambda v: True)).map(lambda v: v).print()
    a.union(b).map(lambda v: v).print()
    graph = env.get_stream_graph()
    groups = {node.id: node.slot_sharing_group for node in graph.nodes.values()}
    assert groups == {1: "x", 2: "y", 3: "x", 4: "x", 6: "x", 7: "x", 9: "default", 10: "default"}
    job = env.get_job_graph().to_dict()
    assert [(v["name"], v["slot_sharing_group_name"], v["slot_sharing_group_index"]) for v in job["vertices"]] == [
        ("Source: A -> (Map, Filter)", "x", 0), ("Source: B", "y", 1),
        ("Map -> Sink: Print to Std. Out", "x", 0), ("Map -> Sink: Print to Std. Out", "default", 2)]


def test_uid_sets_the_vertex_id_and_ids_are_deterministic(env):
    env.from_sequence(1, 10).uid("source").map(lambda x: x).print()
    first = env.get_job_graph().vertices[0].id
    assert first == murmur3_128(b"source").hex() == env.get_job_graph().vertices[0].id
    other = StreamExecutionEnvironment.get_execution_environment()
    other.from_sequence(1, 10).uid("source").map(lambda x: x).print()
    assert other.get_job_graph().vertices[0].id == first
    duplicate = StreamExecutionEnvironment.get_execution_environment()
    duplicate.from_sequence(1, 10).uid("u").disable_chaining().map(lambda x: x).uid("u").print()
    with pytest.raises(ValueError, match="Hash collision on user-specified ID"):
        duplicate.get_job_graph()


def test_forward_needs_equal_parallelism_with_flinks_message(env):
    env.from_sequence(1, 10).forward().map(lambda x: x).set_parallelism(3).print()
    with pytest.raises(UnsupportedOperationException, match=r"Upstream operation: Source: Sequence Source-1 parallelism: 2"):
        env.get_job_graph()


def test_sinks_are_named_as_flink_names_them(env):
    stream = env.from_sequence(1, 10)
    stream.add_sink(CollectSink("out")).name("Results")
    stream.sink_to(DiscardingSink()).name("Drop")
    stream.print()
    graph = env.get_stream_graph()
    assert [(n.operator_name, n.id in graph.sink_ids) for n in graph.nodes.values()] == [
        ("Source: Sequence Source", False),
        ("Sink: Results", True), ("Drop: Writer", False), ("Sink: Print to Std. Out", True)]
