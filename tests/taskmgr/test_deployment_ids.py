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


def test_descriptors_survive_the_message_round_trip_sharing_partition_ids():
    """A decoded descriptor equals the one sent; channels that read one partition share its id
    string (one copy per partition, not per channel: at 256x256 that is 65,536 strings)."""
    import msgpack

    from taskmgr.deployment import TaskDeploymentDescriptor

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_generator(count=100).rebalance().map(cost="1ms").sink_to(DiscardingSink())
    g = env.get_execution_graph()
    attempts = new_attempt_ids(g)
    info = JobInformation("job-0", 0, 0.0, 1.0, 1.0)
    descriptors = [create_descriptor(v, info, dict.fromkeys(attempts, "tm-0"), attempts)
                   for v in g.all_execution_vertices]
    decoded = [TaskDeploymentDescriptor.from_message(msgpack.unpackb(msgpack.packb(d.to_message())))
               for d in descriptors]
    assert decoded == descriptors
    channels = [c for d in decoded for gate in d.input_gates for c in gate.channels]
    by_partition = {}
    for channel in channels:
        by_partition.setdefault(channel.partition_id, []).append(channel.partition_id)
    assert len(channels) == 4 and len(by_partition) == 2  # rebalance 2 -> 2: each partition read twice
    assert all(ids[0] is ids[1] for ids in by_partition.values())
    assert all(c.producer_address is channels[0].producer_address for c in channels)


def test_trace_channels_keep_readable_names():
    tracer = Tracer()
    execute(graph(), duration=5.0, task_managers=2, tracer=tracer).raise_for_status()
    channels = {e["channel"] for e in tracer.events if "channel" in e}
    assert channels and all("@" not in c for c in channels)
    assert "ds0#0#0" in channels


def test_task_managers_get_the_job_graph_not_the_execution_graph(monkeypatch):
    """As Flink's JobInformation: the program travels once per TaskManager, each task's wiring
    in its descriptor, so what a TaskManager holds does not grow with parallelism squared."""
    from graph import JobGraph
    from taskmgr.rpc import DeployJob
    from taskmgr.taskmanager import TaskManager

    payloads = []
    on_deploy_job = TaskManager._on_deploy_job

    async def recording(self, message: DeployJob) -> None:
        payloads.append(len(message.job_graph))
        await on_deploy_job(self, message)
        assert isinstance(self._graphs[message.job_id], JobGraph)

    monkeypatch.setitem(TaskManager._handlers, DeployJob, recording)

    def all_to_all(n):
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(n)
        env.from_generator(rate=100, record_size=32).key_by(lambda r: r.key).map(cost="1us").sink_to(DiscardingSink())
        return env

    for n in (4, 32):
        execute(all_to_all(n), duration=0.05, task_managers=n // 4, slots_per_task_manager=4).raise_for_status()
    small, large = payloads[0], payloads[-1]
    assert len(payloads) == 1 + 8  # one per TaskManager
    assert large < 1.1 * small  # 1,024 channels against 16: the same program
