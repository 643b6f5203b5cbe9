"""ExecutionGraph wiring: which producer subtask and subpartition feeds which consumer
input channel, for all-to-all, broadcast and pointwise (up and down) exchanges."""

import pytest

from graph import JobException, StreamExecutionEnvironment, build_execution_graph
from graph.execution_graph import pointwise_consumers


def wiring(source_parallelism, target_parallelism, partitioning):
    env = StreamExecutionEnvironment.get_execution_environment()
    source = env.from_sequence(1, 100).name("S").set_parallelism(source_parallelism)
    partitioning(source).map(lambda x: x).set_parallelism(target_parallelism)
    execution = env.get_execution_graph()
    producers, consumers = (execution.execution_vertices(v) for v in execution.job_graph.vertices)
    return producers, consumers


def channels(consumer):
    (gate,) = consumer.input_gates
    return [(partition.producer.subtask_index, subpartition) for partition, subpartition in gate]


def test_all_to_all_reads_subpartition_i_of_every_producer():
    producers, consumers = wiring(2, 3, lambda s: s.rebalance())
    assert [p.produced_partitions[0].num_subpartitions for p in producers] == [3, 3]
    assert [channels(c) for c in consumers] == [[(0, 0), (1, 0)], [(0, 1), (1, 1)], [(0, 2), (1, 2)]]
    partition = producers[1].produced_partitions[0]
    assert partition.partition_id == "ds0#1"
    assert [[c.subtask_index for c in readers] for readers in partition.consumers] == [[0], [1], [2]]


def test_an_all_to_all_edge_shares_its_lists_across_subtasks():
    producers, consumers = wiring(3, 4, lambda s: s.rebalance())
    partitions = [p.produced_partitions[0] for p in producers]
    assert all(p.consumers is partitions[0].consumers for p in partitions)  # Flink's ConsumerVertexGroup
    gates = [c.input_gates[0] for c in consumers]
    assert all(gate.partitions is gates[0].partitions for gate in gates)  # and ConsumedPartitionGroup
    assert [gate[2] for gate in gates] == [(partitions[2], i) for i in range(4)] and len(gates[0]) == 3
    pairs = [(partition, 1) for partition in partitions]
    assert gates[1] == pairs and gates[1][1:] == pairs[1:] and gates[1] != pairs[:2] and gates[0] != pairs
    assert repr(gates[1]) == "ConsumedPartitionGroup(['ds0#0', 'ds0#1', 'ds0#2'], subpartition=1)"


def test_broadcast_is_all_to_all_with_one_subpartition_per_consumer():
    producers, consumers = wiring(2, 3, lambda s: s.broadcast())
    assert producers[0].produced_partitions[0].data_set.is_broadcast
    assert [channels(c) for c in consumers] == [[(0, 0), (1, 0)], [(0, 1), (1, 1)], [(0, 2), (1, 2)]]


def test_rescale_up_2_to_4():
    producers, consumers = wiring(2, 4, lambda s: s.rescale())
    assert [p.produced_partitions[0].num_subpartitions for p in producers] == [2, 2]
    assert [channels(c) for c in consumers] == [[(0, 0)], [(0, 1)], [(1, 0)], [(1, 1)]]


def test_rescale_down_4_to_2():
    producers, consumers = wiring(4, 2, lambda s: s.rescale())
    assert [p.produced_partitions[0].num_subpartitions for p in producers] == [1, 1, 1, 1]
    assert [channels(c) for c in consumers] == [[(0, 0), (1, 0)], [(2, 0), (3, 0)]]
    assert [[c.subtask_index for c in r] for p in producers for r in p.produced_partitions[0].consumers] == [
        [0], [0], [1], [1]]


def test_forward_is_one_to_one():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(3)
    env.from_sequence(1, 10).map(lambda x: x).disable_chaining().print()
    execution = env.get_execution_graph()
    producers, consumers = (execution.execution_vertices(v) for v in execution.job_graph.vertices[:2])
    assert [p.produced_partitions[0].num_subpartitions for p in producers] == [1, 1, 1]
    assert [channels(c) for c in consumers] == [[(0, 0)], [(1, 0)], [(2, 0)]]


@pytest.mark.parametrize("producers, consumers, expected", [
    (2, 4, [[0, 1], [2, 3]]),
    (2, 3, [[0, 1], [2]]),
    (2, 5, [[0, 1, 2], [3, 4]]),
    (3, 2, [[0], [1], [1]]),
    (4, 2, [[0], [0], [1], [1]]),
    (5, 2, [[0], [0], [1], [1], [1]]),
    (3, 3, [[0], [1], [2]]),
])
def test_pointwise_mapping_is_flinks(producers, consumers, expected):
    assert [list(r) for r in pointwise_consumers(producers, consumers)] == expected


def test_uneven_pointwise_subpartitions_follow_flinks_modulo_rule():
    producers, consumers = wiring(2, 5, lambda s: s.rescale())
    assert [p.produced_partitions[0].num_subpartitions for p in producers] == [3, 2]
    # consumer i reads subpartition i % (number of consumers of its producer)
    assert [channels(c) for c in consumers] == [[(0, 0)], [(0, 1)], [(0, 2)], [(1, 1)], [(1, 0)]]


def test_every_subpartition_is_read_exactly_once():
    for source, target in [(2, 7), (7, 2), (3, 5), (6, 4)]:
        for partitioning in (lambda s: s.rescale(), lambda s: s.shuffle()):
            producers, consumers = wiring(source, target, partitioning)
            read = sorted((p.producer.subtask_index, sub) for c in consumers for p, sub in channels_of(c))
            written = sorted((p.subtask_index, sub) for p in producers
                             for sub in range(p.produced_partitions[0].num_subpartitions))
            assert read == written


def channels_of(consumer):
    return [channel for gate in consumer.input_gates for channel in gate]


def test_input_gates_follow_job_edges_and_names_show_subtasks():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    a = env.from_sequence(1, 10).name("A")
    b = env.from_sequence(1, 10).name("B").set_parallelism(1)
    a.connect(b).map(type("M", (__import__("graph").CoMapFunction,), {})()).print()
    execution = env.get_execution_graph()
    co_map = execution.execution_vertices("Co-Map -> Sink: Print to Std. Out")
    assert [ev.name for ev in co_map] == ["Co-Map -> Sink: Print to Std. Out (1/2)",
                                          "Co-Map -> Sink: Print to Std. Out (2/2)"]
    assert [[(p.partition_id, s) for p, s in gate] for gate in co_map[1].input_gates] == [
        [("ds0#1", 0)], [("ds1#0", 1)]]
    assert set(execution.partitions) == {"ds0#0", "ds0#1", "ds1#0"}


def test_parallelism_above_max_parallelism_is_rejected():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(4)
    env.set_max_parallelism(2)
    env.from_sequence(1, 10).print()
    job = env.get_job_graph()
    with pytest.raises(JobException) as raised:  # ExecutionJobVertex's check
        build_execution_graph(job)
    assert str(raised.value) == (
        "Vertex Source: Sequence Source -> Sink: Print to Std. Out's parallelism (4) is higher than "
        "the max parallelism (2). Please lower the parallelism or increase the max parallelism.")
