"""Translation rules of Flink 2.3's StreamGraphGenerator beyond the golden sample: Sink V2
writers, keyed sinks, buffer timeouts and what BATCH mode changes (each test names the
Flink class whose rule it checks)."""

import json

import pytest

from graph import (
    DiscardingSink,
    IllegalStateException,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from graph.hashing import murmur3_128
from graph.plan_json import stream_graph_detail


@pytest.fixture
def env():
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)


def batch(env):
    return env.set_runtime_mode(RuntimeExecutionMode.BATCH)


def test_sink_v2_writer_takes_the_sinks_uid(env):
    # SinkTransformationTranslator.concatUid: the writer's uid is the sink's, unchanged
    env.from_sequence(1, 10).key_by(lambda x: x).sink_to(DiscardingSink()).uid("my-sink")
    writer = env.get_stream_graph().node(5)  # 2: key_by, 3: the sink, 4: the virtual hash node
    assert (writer.operator_name, writer.uid) == ("Sink: Writer", "my-sink")
    assert env.get_job_graph().vertices[1].id == murmur3_128(b"my-sink").hex()


def test_sinks_on_a_keyed_stream_are_keyed(env):
    # KeyedStream.doTransform (the writer is `input.transform(...)`) and KeyedStream.addSink
    keyed = env.from_sequence(1, 10).key_by(lambda x: x)
    keyed.sink_to(DiscardingSink())
    keyed.print()
    nodes = {n["name"]: n for n in stream_graph_detail(env.get_stream_graph())["nodes"]}
    assert nodes["Sink: Writer"]["keyed"] and nodes["Sink: Print to Std. Out"]["keyed"]
    assert nodes["Sink: Writer"]["chaining_strategy"] == "ALWAYS"


def test_keyed_sinks_sort_their_input_in_batch(env):
    # LegacySinkTransformationTranslator / OneInputTransformationTranslator.translateForBatch
    keyed = batch(env).from_sequence(1, 10).key_by(lambda x: x)
    keyed.print()
    keyed.sink_to(DiscardingSink())
    nodes = {n["name"]: n for n in stream_graph_detail(env.get_stream_graph())["nodes"]}
    for name in ("Sink: Print to Std. Out", "Sink: Writer"):
        assert (nodes[name]["chaining_strategy"], nodes[name]["input_requirements"]) == ("HEAD", {"0": "SORTED"})


def test_an_operators_buffer_timeout_of_minus_one_is_the_jobs_default(env):
    # StreamGraphUtils.configureBufferTimeout: -1 on a transformation means the default
    env.set_buffer_timeout("5ms")
    source = env.from_sequence(1, 10)
    source.map(lambda x: x).set_buffer_timeout(-1).rebalance().print()
    source.filter(lambda x: True).set_buffer_timeout("20ms").print()
    graph = env.get_stream_graph()
    assert [graph.node(i).buffer_timeout for i in (1, 2, 5)] == [0.005, 0.005, 0.02]


def test_batch_disables_the_default_buffer_timeout(env):
    # configureStreamGraph: BATCH sets execution.buffer-timeout.enabled=false (-1)
    batch(env).set_buffer_timeout("5ms")
    env.from_sequence(1, 10).map(lambda x: x).print()
    graph = env.get_stream_graph()
    assert graph.buffer_timeout == -1
    assert {node.buffer_timeout for node in graph.nodes.values()} == {-1}


def test_batch_rejects_an_unbounded_source(env):
    # StreamGraphGenerator.shouldExecuteInBatchMode
    batch(env).from_generator().map(lambda x: x).print()
    with pytest.raises(IllegalStateException) as raised:
        env.get_execution_plan()
    assert str(raised.value) == (
        "Detected an UNBOUNDED source with the 'execution.runtime-mode' set to 'BATCH'. This "
        "combination is not allowed, please set the 'execution.runtime-mode' to STREAMING or AUTOMATIC")
    bounded = StreamExecutionEnvironment.get_execution_environment()
    batch(bounded).from_generator(count=10).map(lambda x: x).print()
    assert bounded.get_job_graph().job_type == "BATCH"


def test_batch_disables_checkpointing(env):
    # configureStreamGraphBatch: checkpointing is disabled on the StreamGraph's copy
    batch(env).enable_checkpointing("1s")
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    env.from_sequence(1, 10).partition_custom(lambda key, n: 0, lambda x: x).print()
    job = env.get_job_graph()  # no "not supported for custom partitioners": no checkpoints
    assert not job.checkpointing.enabled
    assert env.get_checkpoint_config().is_checkpointing_enabled()  # the environment keeps its own


def test_automatic_mode_runs_bounded_programs_in_batch():
    # StreamGraphGenerator.shouldExecuteInBatchMode: AUTOMATIC is BATCH without unbounded sources
    bounded = StreamExecutionEnvironment.get_execution_environment()
    bounded.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    bounded.from_sequence(1, 10).map(lambda x: x).print()
    assert bounded.get_job_graph().job_type == "BATCH"
    unbounded = StreamExecutionEnvironment.get_execution_environment()
    unbounded.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    unbounded.from_generator().map(lambda x: x).print()
    assert unbounded.get_job_graph().job_type == "STREAMING"


def test_a_description_replaces_the_contents_but_not_the_sink_v2_writers(env):
    # SimpleTransformationTranslator.configure sets the node's description; the Sink V2
    # writer's description is the sink's joined to its own, which it has none of
    source = env.from_sequence(1, 10).set_description("numbers")
    source.map(lambda x: x).set_description("identity").print().set_description("stdout")
    source.sink_to(DiscardingSink()).set_description("dropped")
    plan = json.loads(env.get_execution_plan())
    assert [(n["type"], n["contents"]) for n in plan["nodes"]] == [
        ("Source: Sequence Source", "numbers"), ("Map", "identity"), ("Sink: Writer", "Sink: Writer"),
        ("Sink: Print to Std. Out", "stdout")]
    assert env.get_job_graph().vertices[0].operator_pretty_name == (
        "numbers\n:- identity\n:  +- stdout\n+- Sink: Writer\n")


def test_one_exchange_without_unaligned_support_turns_it_off_for_every_input(env):
    # StreamGraphGenerator.generate: a node with any in-edge whose partitioner cannot carry
    # unaligned checkpoints (pointwise, broadcast) has all its in-edges marked unsupported,
    # both inputs of a two-input operator alike
    from graph import CoMapFunction

    forward = env.from_sequence(1, 10).name("A")
    keyed = env.from_sequence(1, 10).name("B").key_by(lambda x: x)
    forward.connect(keyed).map(type("M", (CoMapFunction,), {})()).print()
    edges = stream_graph_detail(env.get_stream_graph())["edges"]
    assert [(e["partitioner"], e["type_number"], e["supports_unaligned_checkpoints"]) for e in edges] == [
        ("FORWARD", 1, False), ("HASH", 2, False), ("FORWARD", 0, False)]
