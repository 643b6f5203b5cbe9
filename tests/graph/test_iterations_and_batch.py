"""Iterations (feedback edges, co-located head and tail, Flink's checks) and BATCH mode
(blocking exchanges, sorted keyed inputs, region slot sharing, dynamic parallelism)."""

import pytest

from graph import (
    IllegalStateException,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    UnsupportedOperationException,
)
from graph.stream_graph import IterationBroker


@pytest.fixture
def env():
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)


def iteration_program(env):
    iteration = env.from_sequence(1, 10).name("Seq").iterate(max_wait_time="5s")
    body = iteration.map(lambda x: x - 1)
    iteration.close_with(body.filter(lambda x: x > 0))
    body.filter(lambda x: x <= 0).print()
    return iteration


def test_iteration_head_and_tail_with_feedback_edge(env):
    iteration_program(env)
    graph = env.get_stream_graph()
    head, tail = graph.node(-1), graph.node(-2)
    assert (head.operator_name, tail.operator_name) == ("IterationSource-2", "IterationSink-2")
    assert (head.kind, tail.kind) == ("iteration_head", "iteration_tail")
    assert head.source == tail.sink == IterationBroker("broker-2", 5.0)
    assert head.co_location_group == tail.co_location_group == "IterationCoLocationGroup-2"
    assert tail.max_parallelism == tail.parallelism == 2  # as Flink sets it
    body = graph.node(3)
    assert [(e.source_id, e.partitioner.name) for e in body.in_edges] == [(1, "FORWARD"), (-1, "FORWARD")]
    assert [(e.source_id, e.target_id) for e in tail.in_edges] == [(4, -2)]
    assert -1 in graph.source_ids and -2 in graph.sink_ids


def test_iteration_vertices_are_co_located_and_never_chained(env):
    iteration_program(env)
    job = env.get_job_graph()
    assert [v.name for v in job.vertices] == [
        "IterationSource-2", "Source: Seq", "Map -> (Filter, Filter -> Sink: Print to Std. Out)",
        "IterationSink-2"]
    head, _, body, tail = job.vertices
    assert head.co_location_group is tail.co_location_group
    assert head.co_location_group.vertices == [tail, head] or head.co_location_group.vertices == [head, tail]
    assert head.slot_sharing_group is tail.slot_sharing_group is body.slot_sharing_group
    assert (head.invokable, tail.invokable) == ("StreamIterationHead", "StreamIterationTail")
    assert [e.source_vertex for e in body.inputs] == [head, job.vertices[1]]
    assert job.to_dict()["vertices"][0]["co_location_group"] == "IterationCoLocationGroup-2"
    # the feedback reaches the tail; the head feeds the body: a cycle only through the broker
    execution = env.get_execution_graph()
    assert [len(t.input_gates) for t in execution.execution_vertices(tail)] == [1, 1]


def test_closing_with_a_foreign_stream_is_rejected(env):
    iteration = env.from_sequence(1, 10).iterate()
    iteration.map(lambda x: x).print()
    foreign = env.from_sequence(1, 10).map(lambda x: x)
    with pytest.raises(UnsupportedOperationException) as raised:
        iteration.close_with(foreign)
    assert str(raised.value) == ("Cannot close an iteration with a feedback DataStream that does not "
                                 "originate from said iteration.")


def test_feedback_parallelism_must_match(env):
    iteration = env.from_sequence(1, 10).iterate()
    feedback = iteration.map(lambda x: x).set_parallelism(3)
    with pytest.raises(UnsupportedOperationException, match="Parallelism of original stream: 2; "
                                                            "parallelism of feedback stream: 3"):
        iteration.close_with(feedback)


def test_iteration_without_feedback_is_rejected(env):
    env.from_sequence(1, 10).iterate().map(lambda x: x).print()
    with pytest.raises(IllegalStateException, match="does not have any feedback edges"):
        env.get_stream_graph()


def test_iterations_are_rejected_in_batch_and_with_checkpointing(env):
    iteration_program(env)
    env.enable_checkpointing("1s")
    with pytest.raises(UnsupportedOperationException, match="not supported by default for iterative jobs"):
        env.get_job_graph()
    env.enable_checkpointing("1s", force=True)
    assert env.get_job_graph().checkpointing.enabled
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    with pytest.raises(UnsupportedOperationException, match="'execution.runtime-mode'=STREAMING"):
        env.get_stream_graph()


def test_batch_edges_are_blocking_and_regions_get_their_own_slot_sharing_group(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.from_sequence(1, 10).map(lambda x: (x % 2, x)).key_by(lambda t: t[0]).process(
        lambda v, ctx: [v]).rebalance().filter(lambda x: True).print()
    job = env.get_job_graph()
    assert job.job_name == "Flink Batch Job" and job.job_type == "BATCH"
    assert {e.result_partition_type for e in job.edges} == {"BLOCKING"}
    groups = [v.slot_sharing_group for v in job.vertices]
    assert [g.name for g in groups] == ["default"] * 3 and len(set(map(id, groups))) == 3
    keyed = env.get_stream_graph().node(4)
    assert keyed.operator_name == "KeyedProcess"
    assert keyed.chaining_strategy.value == "HEAD" and keyed.input_requirements == {0: "SORTED"}
    # dynamic parallelism: -1 in the JobGraph, the stream node's parallelism when run
    assert [v["parallelism"] for v in job.to_dict()["vertices"]] == [-1, -1, -1]
    assert [len(env.get_execution_graph().execution_vertices(v)) for v in job.vertices] == [2, 2, 2]


def test_batch_forward_that_does_not_chain_becomes_rescale(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.from_sequence(1, 10).map(lambda x: x).disable_chaining().print()
    assert [(e.ship_strategy, e.distribution_pattern, e.source.is_forward) for e in env.get_job_graph().edges] == [
        ("RESCALE", "POINTWISE", False)] * 2
    # the StreamGraph (and the plan) still show Flink's ForwardForUnspecifiedPartitioner
    assert env.get_stream_graph().node(2).in_edges[0].partitioner.class_name == "ForwardForUnspecifiedPartitioner"


def test_batch_explicit_forward_groups_share_a_configured_parallelism():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(3)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.from_sequence(1, 10).set_parallelism(3).forward().map(lambda x: x).disable_chaining().print()
    vertices = env.get_job_graph().to_dict()["vertices"]
    # source and map are one forward group (explicit forward), the sink is reached by RESCALE
    assert [(v["name"], v["parallelism"], v["parallelism_configured"], v["dynamic_parallelism"])
            for v in vertices] == [("Source: Sequence Source", 3, True, False), ("Map", 3, True, False),
                                   ("Sink: Print to Std. Out", -1, False, True)]


def test_batch_forward_groups_share_the_smallest_configured_max_parallelism():
    # setVertexParallelismsForDynamicGraphIfNecessary / JobVertexForwardGroup
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(4)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    source = env.from_sequence(1, 10).set_max_parallelism(16)
    keyed = source.forward().map(lambda x: x).set_max_parallelism(8).disable_chaining().key_by(lambda x: x)
    keyed.reduce(lambda a, b: a).forward().filter(lambda x: True).set_max_parallelism(32).disable_chaining().print()
    job = env.get_job_graph()
    assert [(v["name"], v["max_parallelism"]) for v in job.to_dict()["vertices"]] == [
        ("Source: Sequence Source", 8), ("Map", 8), ("Keyed Reduce", 32), ("Filter", 32),
        ("Sink: Print to Std. Out", -1)]  # the sink is reached by RESCALE: in no group
    assert [n.max_parallelism for v in job.vertices for n in v.operators] == [8, 8, 32, 32, -1]
    # the HASH exchange into the group counts the group's key groups (128 by default)
    assert job.vertices[2].inputs[0].partitioner.max_parallelism == 32
    decided = StreamExecutionEnvironment.get_execution_environment().set_parallelism(4)
    decided.set_runtime_mode(RuntimeExecutionMode.BATCH)
    (decided.from_sequence(1, 10).set_parallelism(4).forward().map(lambda x: x).set_max_parallelism(2)
        .disable_chaining().print())
    with pytest.raises(IllegalStateException, match="whose maximum parallelism is smaller than the group's"):
        decided.get_job_graph()


def test_batch_two_input_keyed_inputs_are_sorted(env):
    from graph import CoMapFunction

    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    a, b = env.from_sequence(1, 10), env.from_sequence(1, 10)
    a.connect(b).key_by(lambda x: x, lambda x: x).map(type("M", (CoMapFunction,), {})()).print()
    node = env.get_stream_graph().node(5)
    assert node.input_requirements == {0: "SORTED", 1: "SORTED"} and node.chaining_strategy.value == "HEAD"


def test_batch_reuses_a_blocking_data_set_for_equal_consumers(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    source = env.from_sequence(1, 10).name("S")
    rebalanced = source.rebalance()
    rebalanced.map(lambda x: x).print()
    rebalanced.filter(lambda x: True).print()
    job = env.get_job_graph()
    (data_set,) = job.vertices[0].produced_data_sets
    assert [e.target.name for e in data_set.consumers] == ["Map -> Sink: Print to Std. Out",
                                                          "Filter -> Sink: Print to Std. Out"]
    producers = env.get_execution_graph().execution_vertices(job.vertices[0])
    assert len(producers) == 2
    for producer in producers:  # the first edge's shared consumer lists are not appended to twice
        (partition,) = producer.produced_partitions
        assert [[(c.job_vertex.index, c.subtask_index) for c in readers] for readers in partition.consumers] == [
            [(1, 0), (2, 0)], [(1, 1), (2, 1)]]
    streaming = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    rebalanced = streaming.from_sequence(1, 10).rebalance()
    rebalanced.map(lambda x: x).print()
    rebalanced.filter(lambda x: True).print()
    assert len(streaming.get_job_graph().vertices[0].produced_data_sets) == 2


def test_checkpointing_settings(env):
    env.enable_checkpointing("3s")
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    a = env.from_sequence(1, 10).name("A")
    b = env.from_sequence(1, 10).name("B")
    a.union(b).rebalance().print()
    job = env.get_job_graph()
    settings = job.checkpointing
    assert settings.config.interval == 3.0 and settings.config.unaligned
    assert [v.name for v in settings.tasks_to_trigger] == ["Source: A", "Source: B"]
    assert settings.tasks_to_acknowledge == settings.tasks_to_commit == job.vertices
    custom = StreamExecutionEnvironment.get_execution_environment()
    custom.enable_checkpointing(1).get_checkpoint_config().enable_unaligned_checkpoints()
    custom.from_sequence(1, 10).partition_custom(lambda k, n: 0, lambda x: x).print()
    with pytest.raises(UnsupportedOperationException, match="not supported for custom partitioners"):
        custom.get_job_graph()


def test_forced_unaligned_checkpoints_allow_custom_partitioners_and_iterations_with_aligned_edges():
    custom = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    custom.enable_checkpointing(1).get_checkpoint_config().enable_unaligned_checkpoints()
    custom.get_checkpoint_config().set_force_unaligned_checkpoints()
    custom.from_sequence(1, 10).partition_custom(lambda k, n: 0, lambda x: x).map(lambda x: x).rebalance().print()
    edges = {edge.partitioner.name: edge for edge in custom.get_stream_graph().edges}
    # as in Flink 2.3: forcing lifts the refusal; a custom edge still takes aligned barriers
    assert not edges["CUSTOM"].supports_unaligned_checkpoints and edges["REBALANCE"].supports_unaligned_checkpoints
    custom.get_job_graph()
    iterative = StreamExecutionEnvironment.get_execution_environment()
    iterative.enable_checkpointing(1, force=True).get_checkpoint_config().enable_unaligned_checkpoints()
    iteration = iterative.from_sequence(1, 10).iterate()
    iteration.close_with(iteration.map(lambda x: x - 1).filter(lambda x: x > 0))
    with pytest.raises(UnsupportedOperationException, match="not supported for iterative jobs"):
        iterative.get_job_graph()
    iterative.get_checkpoint_config().set_force_unaligned_checkpoints()
    assert iterative.get_job_graph().checkpointing.config.force_unaligned
