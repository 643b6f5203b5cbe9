"""StreamingJobGraphGenerator rules beyond the golden sample: buffer timeouts on blocking
exchanges, checkpoint settings it adjusts, user-specified ids."""

import pytest

from graph import (
    CheckpointingMode,
    IllegalArgumentException,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    UnsupportedOperationException,
)


@pytest.fixture
def env():
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)


def test_batch_rejects_an_operators_own_buffer_timeout_on_a_blocking_exchange(env):
    # connect -> checkBufferTimeout: a BLOCKING result cannot be flushed by a timeout
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.from_sequence(1, 10).map(lambda x: x).set_buffer_timeout("10ms").rebalance().print()
    env.get_execution_plan()  # the StreamGraph is fine
    with pytest.raises(UnsupportedOperationException) as raised:
        env.get_job_graph()
    assert str(raised.value) == (
        "only canBePipelinedConsumed partition support buffer timeout 10 for src operator in edge "
        "(Map-2 -> Sink: Print to Std. Out-4, typeNumber=0, outputPartitioner=REBALANCE, "
        "exchangeMode=UNDEFINED, bufferTimeout=10, outputTag=null, uniqueId=0). \n"
        "Please either disable buffer timeout (via -1) or use the canBePipelinedConsumed partition.")
    chained = StreamExecutionEnvironment.get_execution_environment()
    chained.set_runtime_mode(RuntimeExecutionMode.BATCH)
    chained.from_sequence(1, 10).map(lambda x: x).set_buffer_timeout("10ms").print()
    assert len(chained.get_job_graph().vertices) == 1  # a chained edge is not checked


def test_at_least_once_turns_unaligned_checkpoints_off(env):
    # preValidate: unaligned checkpoints need EXACTLY_ONCE
    env.enable_checkpointing("1s", CheckpointingMode.AT_LEAST_ONCE)
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    env.from_sequence(1, 10).rebalance().print()
    assert not env.get_job_graph().checkpointing.config.unaligned
    assert env.get_checkpoint_config().unaligned


def test_unaligned_checkpoints_refuse_more_than_one_concurrent_checkpoint(env):
    # Flink 2.3's CheckpointCoordinatorConfiguration (built with the JobGraph's checkpointing
    # settings): unaligned checkpoints allow one checkpoint at a time; AT_LEAST_ONCE (which
    # turns them off) allows more
    env.enable_checkpointing("1s")
    env.get_checkpoint_config().enable_unaligned_checkpoints().set_max_concurrent_checkpoints(2)
    env.from_sequence(1, 10).rebalance().print()
    with pytest.raises(IllegalArgumentException) as raised:
        env.get_job_graph()
    assert str(raised.value) == "maxConcurrentCheckpoints can't be > 1 if UnalignedCheckpoints enabled"
    env.get_checkpoint_config().set_checkpointing_mode(CheckpointingMode.AT_LEAST_ONCE)
    assert env.get_job_graph().checkpointing.config.max_concurrent == 2


def test_uid_collision_names_the_uid(env):
    # StreamGraphHasherV2.generateNodeHash
    env.from_sequence(1, 10).uid("u").disable_chaining().map(lambda x: x).uid("u").print()
    with pytest.raises(IllegalArgumentException) as raised:
        env.get_job_graph()
    assert str(raised.value) == ('Hash collision on user-specified ID "u". Most likely cause is a '
                                 "non-unique ID. Please check that all IDs specified via `uid(String)` "
                                 "are unique.")
