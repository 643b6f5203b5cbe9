"""Partition ids in deployment descriptors carry the producer's random attempt id (Flink's
ResultPartitionID); trace channel names keep the readable part."""

from graph import DiscardingSink, StreamExecutionEnvironment
from shuffle.partition.result_partition_id import readable_partition_id
from shuffle.trace import Tracer
from taskmgr.cluster import execute
from taskmgr.deployment import JobInformation, create_descriptor, execution_id, new_attempt_ids


def graph():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(count=100).set_parallelism(2).rebalance().map(cost="1ms").sink_to(DiscardingSink())
    return env.get_execution_graph()


def test_consumers_are_told_the_producers_attempt_ids():
    g = graph()
    attempts = new_attempt_ids(g)
    assert len(set(attempts.values())) == len(attempts) and all(len(a) == 32 for a in attempts.values())
    assert new_attempt_ids(g) != attempts  # random per deployment
    info = JobInformation("job-0", 0, 0.0, 1.0, 1.0)
    addresses = dict.fromkeys(attempts, "tm-0")
    descriptors = [create_descriptor(v, info, addresses, attempts) for v in g.all_execution_vertices]
    produced = {p.partition_id for d in descriptors for p in d.produced_partitions}
    consumed = {c.partition_id for d in descriptors for gate in d.input_gates for c in gate.channels}
    assert consumed == produced
    for vertex in g.all_execution_vertices:
        for partition in vertex.produced_partitions:
            assert f"{partition.partition_id}@{attempts[execution_id(vertex)]}" in produced
            assert readable_partition_id(f"{partition.partition_id}@x") == partition.partition_id


def test_trace_channels_keep_readable_names():
    tracer = Tracer()
    execute(graph(), duration=5.0, task_managers=2, tracer=tracer).raise_for_status()
    channels = {e["channel"] for e in tracer.events if "channel" in e}
    assert channels and all("@" not in c for c in channels)
    assert "ds0#0#0" in channels
