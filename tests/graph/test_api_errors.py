"""API misuse fails at the call with a clear message naming the operator and value."""

import pytest

from graph import (
    CoMapFunction,
    IllegalArgumentException,
    IllegalStateException,
    OutputTag,
    StreamExecutionEnvironment,
    UnsupportedOperationException,
)


@pytest.fixture
def env():
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)


@pytest.mark.parametrize("value, error", [(0, IllegalArgumentException), (-1, IllegalArgumentException),
                                          ("2", TypeError), (1.5, TypeError)])
def test_parallelism_below_one_or_not_int(env, value, error):
    # OperatorValidationUtils.validateParallelism and ExecutionConfig.setParallelism
    operator = "The parallelism of an operator must be at least 1" if error is IllegalArgumentException else "parallelism"
    with pytest.raises(error, match=operator):
        env.from_sequence(1, 10).map(lambda x: x).set_parallelism(value)
    environment = "^Parallelism must be at least one, or" if error is IllegalArgumentException else "parallelism"
    with pytest.raises(error, match=environment):
        env.set_parallelism(value)


def test_max_parallelism_below_parallelism_is_left_to_the_scheduler(env):
    # Transformation.setParallelism/setMaxParallelism only check bounds; the plan and the
    # JobGraph compile, the ExecutionGraph refuses (test_execution_graph)
    env.from_sequence(1, 10).map(lambda x: x).set_max_parallelism(4).set_parallelism(5).print()
    env.from_sequence(1, 10).filter(lambda x: True).set_max_parallelism(1)
    assert [n.max_parallelism for n in env.get_stream_graph().nodes.values()] == [-1, 4, -1, -1, 1]
    assert [(v.name, v.configured_max_parallelism) for v in env.get_job_graph().vertices] == [
        ("Source: Sequence Source", -1), ("Source: Sequence Source -> Filter", -1), ("Map", 4),
        ("Sink: Print to Std. Out", -1)]


def test_max_parallelism_and_buffer_timeout_bounds_raise_flinks_exceptions(env):
    # StreamExecutionEnvironment.setMaxParallelism, OperatorValidationUtils.validateMaxParallelism,
    # StreamExecutionEnvironment.setBufferTimeout, SingleOutputStreamOperator.setBufferTimeout
    with pytest.raises(IllegalArgumentException, match=r"^maxParallelism is out of bounds 0 < maxParallelism <= 32768\. Found: 40000$"):
        env.set_max_parallelism(40000)
    mapped = env.from_sequence(1, 10).map(lambda x: x)
    with pytest.raises(IllegalArgumentException, match=r"^The maximum parallelism must be greater than 0\.$"):
        mapped.set_max_parallelism(0)
    with pytest.raises(IllegalArgumentException, match=r"^Maximum parallelism must be between 1 and 32768\. Found: 40000$"):
        mapped.set_max_parallelism(40000)
    with pytest.raises(IllegalArgumentException, match=r"^Timeout of buffer must be non-negative or -1$"):
        env.set_buffer_timeout(-5)
    with pytest.raises(IllegalArgumentException, match=r"^timeout must be >= -1$"):
        mapped.set_buffer_timeout("-2ms")


@pytest.mark.parametrize("method", ["map", "flat_map", "filter", "process"])
def test_non_callable_function(env, method):
    with pytest.raises(TypeError, match=f"{method}: expected a callable .* got 42"):
        getattr(env.from_sequence(1, 10), method)(42)


def test_key_by_and_partition_custom_need_callables(env):
    with pytest.raises(TypeError, match="key_by"):
        env.from_sequence(1, 10).key_by("field")
    with pytest.raises(TypeError, match="partition_custom"):
        env.from_sequence(1, 10).partition_custom(3, lambda x: x)


def test_synthetic_operator_arguments(env):
    stream = env.from_sequence(1, 10)
    with pytest.raises(ValueError, match="selectivity must be in \\[0, 1\\], got 1.5"):
        stream.filter(selectivity=1.5)
    with pytest.raises(TypeError, match="filter: give either"):
        stream.filter()
    with pytest.raises(ValueError, match="fan_out must be an int >= 0, got -1"):
        stream.flat_map(fan_out=-1)
    with pytest.raises(ValueError, match="map: invalid cost 'slow'"):
        stream.map(cost="slow")


def test_co_functions_must_be_function_objects(env):
    connected = env.from_sequence(1, 10).connect(env.from_sequence(1, 10))
    with pytest.raises(TypeError, match="map: expected a CoMapFunction"):
        connected.map(lambda x: x)
    assert connected.map(type("M", (CoMapFunction,), {})()) is not None


def test_operator_settings_on_a_partitioning_are_rejected(env):
    with pytest.raises(TypeError, match="set_parallelism: applies to an operator"):
        env.from_sequence(1, 10).shuffle().set_parallelism(3)


def test_sinks_have_no_chain_start_or_buffer_timeout(env):
    # Flink's DataStreamSink has disableChaining but neither startNewChain nor setBufferTimeout
    sink = env.from_sequence(1, 10).print()
    for method in ("start_new_chain", "set_buffer_timeout"):
        assert not hasattr(sink, method)
    assert sink.disable_chaining().set_max_parallelism(8) is sink


def test_keyed_stream_partitioning_cannot_be_overridden(env):
    with pytest.raises(UnsupportedOperationException, match="Cannot override partitioning for KeyedStream."):
        env.from_sequence(1, 10).key_by(lambda x: x).rebalance()


def test_streams_of_different_environments_do_not_mix(env):
    other = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(ValueError, match="union: the streams belong to different environments"):
        env.from_sequence(1, 10).union(other.from_sequence(1, 10))


def test_side_output_needs_a_tag(env):
    with pytest.raises(TypeError, match="get_side_output: expected an OutputTag"):
        env.from_sequence(1, 10).process(lambda v, ctx: [v]).get_side_output("late")
    with pytest.raises(ValueError):
        OutputTag("")


def test_environment_settings_are_validated(env):
    with pytest.raises(TypeError, match="runtime mode"):
        env.set_runtime_mode("BATCH")
    with pytest.raises(ValueError, match="checkpoint interval"):
        env.enable_checkpointing(0)
    # Flink's MINIMAL_CHECKPOINT_TIME: 10 ms for the interval and the timeout
    with pytest.raises(ValueError, match="checkpoint interval must be at least 10 ms"):
        env.enable_checkpointing("9ms")
    env.enable_checkpointing("10ms")
    with pytest.raises(ValueError, match="checkpoint timeout must be at least 10 ms"):
        env.get_checkpoint_config().set_checkpoint_timeout("1ms")


def test_sources_are_validated(env):
    with pytest.raises(ValueError, match="from_collection: the collection must not be empty"):
        env.from_collection([])
    with pytest.raises(TypeError, match="from_collection: expected a collection"):
        env.from_collection("abc")
    with pytest.raises(ValueError, match="from_sequence: start 5 is after end 1"):
        env.from_sequence(5, 1)


def test_empty_program_has_no_graph(env):
    env.from_sequence(1, 10)  # a source alone is no operator
    with pytest.raises(IllegalStateException) as raised:  # StreamExecutionEnvironment's check
        env.get_execution_plan()
    assert str(raised.value) == "No operators defined in streaming topology. Cannot execute."


def test_each_environment_is_fresh():
    first = StreamExecutionEnvironment.get_execution_environment()
    first.from_sequence(1, 2).print()
    second = StreamExecutionEnvironment.get_execution_environment()
    assert second is not first and second.transformations == []
    assert second.from_sequence(1, 2).transformation.id == 1
