"""Which subtasks share a slot and which TaskManager each slot is on, as Flink 2.x's
default scheduler places a streaming job (`LocalInputPreferredSlotSharingStrategy`, and
the slot manager filling one TaskManager before the next)."""

import pytest

from graph import CoMapFunction, StreamExecutionEnvironment
from taskmgr.deployment import execution_id
from taskmgr.scheduler import SlotOffer, allocate_slots, execution_slot_sharing_groups, placement_rng, slots_needed


def two_vertices(producers, consumers, partitioning, consumer_group=None):
    env = StreamExecutionEnvironment.get_execution_environment()
    source = env.from_sequence(1, 100).name("S").set_parallelism(producers)
    mapped = partitioning(source).map(lambda x: x).name("M").set_parallelism(consumers)
    if consumer_group is not None:
        mapped.slot_sharing_group(consumer_group)
    return env.get_execution_graph()


def shared_slots(graph):
    """Each shared slot as (vertex name, subtask index) pairs."""
    return [sorted((s.job_vertex.name, s.subtask_index) for s in group)
            for group in execution_slot_sharing_groups(graph)]


def test_rescale_up_puts_each_producer_beside_a_consumer_it_feeds():
    # Flink's testInputLocalityIsRespectedWithRescaleEdge: producer 1 feeds consumer 2
    graph = two_vertices(2, 3, lambda s: s.rescale())
    assert shared_slots(graph) == [[("M", 0), ("Source: S", 0)], [("M", 2), ("Source: S", 1)], [("M", 1)]]


def test_rescale_down_puts_each_consumer_beside_its_first_producer():
    graph = two_vertices(4, 2, lambda s: s.rescale())
    assert shared_slots(graph) == [[("M", 0), ("Source: S", 0)], [("Source: S", 1)],
                                   [("M", 1), ("Source: S", 2)], [("Source: S", 3)]]


def test_all_to_all_consumer_i_shares_the_slot_of_producer_i():
    graph = two_vertices(2, 4, lambda s: s.rebalance())
    assert shared_slots(graph) == [[("M", 0), ("Source: S", 0)], [("M", 1), ("Source: S", 1)], [("M", 2)],
                                   [("M", 3)]]
    assert slots_needed(graph) == 4


def test_vertices_in_different_slot_sharing_groups_share_no_slot():
    graph = two_vertices(2, 3, lambda s: s.rescale(), consumer_group="other")
    assert shared_slots(graph) == [[("Source: S", 0)], [("Source: S", 1)], [("M", 0)], [("M", 1)], [("M", 2)]]


def test_iteration_head_and_tail_share_a_slot():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    iteration = env.from_sequence(1, 10).name("Seq").iterate(max_wait_time="5s")
    body = iteration.map(lambda x: x - 1)
    iteration.close_with(body.filter(lambda x: x > 0))
    body.filter(lambda x: x <= 0).print()
    groups = execution_slot_sharing_groups(env.get_execution_graph())
    assert len(groups) == 2
    for index, group in enumerate(groups):
        assert {s.subtask_index for s in group} == {index}
        assert {s.job_vertex.name for s in group} >= {"IterationSource-2", "IterationSink-2"}


# Ports of Flink's LocalInputPreferredSlotSharingStrategyTest (and the cases its builder
# decides the same way: union, two-input and several slot sharing groups), through our API.

def environment():
    return StreamExecutionEnvironment.get_execution_environment()


def test_all_to_all_edge_fewer_consumers_take_the_first_producers_slots():
    # testInputLocalityIsRespectedWithAllToAllEdge, with 4 producers and 2 consumers
    graph = two_vertices(4, 2, lambda s: s.rebalance())
    assert shared_slots(graph) == [[("M", 0), ("Source: S", 0)], [("M", 1), ("Source: S", 1)],
                                   [("Source: S", 2)], [("Source: S", 3)]]


def test_forward_edge_puts_consumer_i_beside_producer_i():
    env = environment()
    source = env.from_sequence(1, 100).name("S").set_parallelism(2)
    source.forward().map(lambda x: x).name("M").set_parallelism(2).disable_chaining()
    assert shared_slots(env.get_execution_graph()) == [[("M", 0), ("Source: S", 0)], [("M", 1), ("Source: S", 1)]]


def test_disjoint_vertices_in_one_group_pair_up_by_subtask_index():
    # testDisjointVerticesInOneGroup: two unconnected pipelines of parallelism 2
    env = environment()
    for name in ("A", "B"):
        env.from_sequence(1, 10).name(name).set_parallelism(2).print().set_parallelism(2)
    groups = execution_slot_sharing_groups(env.get_execution_graph())
    assert [sorted((s.job_vertex.name.split(" ")[1], s.subtask_index) for s in group) for group in groups] == [
        [("A", 0), ("B", 0)], [("A", 1), ("B", 1)]]


def test_two_edges_between_two_vertices_keep_subtask_i_together():
    # testInputLocalityIsRespectedWithTwoEdgesBetweenTwoVertices: two all-to-all edges, parallelism 4
    env = environment()
    source = env.from_sequence(1, 100).name("S").set_parallelism(4)
    source.rebalance().union(source.rebalance()).map(lambda x: x).name("M").set_parallelism(4)
    graph = env.get_execution_graph()
    assert len(graph.job_graph.vertices[1].inputs) == 2
    assert shared_slots(graph) == [[("M", i), ("Source: S", i)] for i in range(4)]


def test_union_consumer_takes_the_second_input_s_slots_when_the_first_input_s_are_used():
    # each input's producers are candidates in turn: M 2 finds no free slot of A's, then B 2's
    env = environment()
    a = env.from_sequence(1, 10).name("A").set_parallelism(2)
    b = env.from_sequence(1, 10).name("B").set_parallelism(3)
    a.union(b).rebalance().map(lambda x: x).name("M").set_parallelism(3)
    assert shared_slots(env.get_execution_graph()) == [
        [("M", 0), ("Source: A", 0), ("Source: B", 0)], [("M", 1), ("Source: A", 1), ("Source: B", 1)],
        [("M", 2), ("Source: B", 2)]]


def test_two_input_vertex_takes_a_slot_of_its_second_input_s_producers():
    # B 1 reads Y 2 and Y 3 (rescale), so sits beside Y 2. C 1 finds no free slot of its
    # first input's (A 0's is C 0's), then pops B 0's (taken) and takes B 1's: not Y 1's
    # slot, which would be the first free one of the group
    env = environment()
    a = env.from_sequence(1, 10).name("A").set_parallelism(1)
    y = env.from_sequence(1, 10).name("Y").set_parallelism(4)
    b = y.rescale().map(lambda x: x).name("B").set_parallelism(2)
    a.connect(b).key_by(lambda x: x, lambda x: x).map(type("Co", (CoMapFunction,), {})()).name("C").set_parallelism(2)
    graph = env.get_execution_graph()
    assert [edge.source_vertex.name for edge in graph.job_graph.vertices[-1].inputs] == ["Source: A", "B"]
    assert shared_slots(graph) == [[("B", 0), ("C", 0), ("Source: A", 0), ("Source: Y", 0)], [("Source: Y", 1)],
                                   [("B", 1), ("C", 1), ("Source: Y", 2)], [("Source: Y", 3)]]


def test_a_consumer_of_another_group_takes_its_own_group_s_slots_in_creation_order():
    # B reads A across groups (no producer slot to join); C, back in "default", reads B:
    # its subtasks take the default group's free slots first, then a new one
    env = environment()
    a = env.from_sequence(1, 10).name("A").set_parallelism(2)
    b = a.rebalance().map(lambda x: x).name("B").set_parallelism(2).slot_sharing_group("other")
    b.rebalance().map(lambda x: x).name("C").set_parallelism(3).slot_sharing_group("default")
    graph = env.get_execution_graph()
    assert shared_slots(graph) == [[("C", 0), ("Source: A", 0)], [("C", 1), ("Source: A", 1)], [("B", 0)], [("B", 1)],
                                   [("C", 2)]]
    assert slots_needed(graph) == 5  # testSetSlotSharingGroupResource: per group its largest parallelism


def iteration_slots(graph, head):
    """Per subtask index of iteration `head`'s co-location group: the shared slot of each member."""
    groups = {s: index for index, group in enumerate(execution_slot_sharing_groups(graph)) for s in group}
    members = [v for v in graph.job_graph.vertices if v.co_location_group is head.co_location_group]
    return [{groups[graph.execution_vertices(v)[i]] for v in members} for i in range(head.parallelism)]


def test_co_location_groups_of_different_parallelism_keep_head_and_tail_together():
    # testCoLocationConstraintIsRespected (1.19+): a vertex of parallelism 1 and two
    # co-location groups of parallelism 2 and 3 in one slot sharing group
    env = environment()
    env.from_sequence(1, 10).name("P").set_parallelism(1).print()
    for parallelism in (2, 3):
        iteration = env.from_sequence(1, 10).set_parallelism(parallelism).iterate(max_wait_time="5s")
        body = iteration.map(lambda x: x - 1).set_parallelism(parallelism)
        iteration.close_with(body.filter(lambda x: x > 0).set_parallelism(parallelism))
    graph = env.get_execution_graph()
    heads = [v for v in graph.job_graph.vertices if v.name.startswith("IterationSource")]
    assert sorted(head.parallelism for head in heads) == [2, 3]
    for head in heads:
        assert all(len(slots) == 1 for slots in iteration_slots(graph, head))
    assert slots_needed(graph) == 3


def test_iteration_tail_joins_its_head_s_slot_over_its_producer_s():
    # co-location comes before input locality: tail 1's producer F 1 sits beside Y 2,
    # yet tail 1 joins head 1's slot
    env = environment().set_parallelism(2)
    iteration = env.from_sequence(1, 10).name("S").iterate(max_wait_time="5s")
    body = iteration.map(lambda x: x - 1).name("Body")
    y = body.rebalance().map(lambda x: x).name("Y").set_parallelism(4)
    iteration.close_with(y.rescale().filter(lambda x: x > 0).name("F"))
    graph = env.get_execution_graph()
    slots = shared_slots(graph)
    assert [("F", 1), ("Y", 2)] in slots
    head = next(v for v in graph.job_graph.vertices if v.name.startswith("IterationSource"))
    assert [len(s) for s in iteration_slots(graph, head)] == [1, 1]

def test_rescale_up_on_one_slot_task_managers_makes_the_fed_consumers_local():
    graph = two_vertices(2, 4, lambda s: s.rescale())
    slots = allocate_slots(graph, [SlotOffer(f"tm-{i}", 1) for i in range(4)])
    producers, consumers = (graph.execution_vertices(v) for v in graph.job_graph.vertices)
    local = [slots[execution_id(partition.producer)].task_manager == slots[execution_id(consumer)].task_manager
             for consumer in consumers for partition, _ in consumer.input_gates[0]]
    assert local == [True, False, True, False]  # consumers 0 and 2 run beside producers 0 and 1


def test_shared_slots_fill_one_task_manager_before_the_next():
    graph = two_vertices(1, 3, lambda s: s.rebalance())
    slots = allocate_slots(graph, [SlotOffer("tm-0", 2), SlotOffer("tm-1", 2)])
    placed = {(s.job_vertex.name, s.subtask_index): (slots[execution_id(s)].task_manager,
                                                      slots[execution_id(s)].slot_index)
              for s in graph.all_execution_vertices}
    assert placed == {("Source: S", 0): ("tm-0", 0), ("M", 0): ("tm-0", 0), ("M", 1): ("tm-0", 1),
                      ("M", 2): ("tm-1", 0)}


def task_managers_of_groups(graph, slots):
    """The TaskManager of each shared slot, slots in creation order."""
    return tuple(slots[execution_id(group[0])].task_manager for group in execution_slot_sharing_groups(graph))


def test_random_placement_draws_flink_s_groupings_from_the_seed():
    graph = two_vertices(1, 4, lambda s: s.rebalance())  # 4 shared slots on 2 x 2 slots
    offers = [SlotOffer("tm-0", 2), SlotOffer("tm-1", 2)]
    ordered = task_managers_of_groups(graph, allocate_slots(graph, offers))
    assert ordered == ("tm-0", "tm-0", "tm-1", "tm-1")
    drawn = {seed: task_managers_of_groups(graph, allocate_slots(graph, offers, placement_rng("random", seed)))
             for seed in range(40)}
    for placement in drawn.values():
        assert sorted(placement) == ["tm-0", "tm-0", "tm-1", "tm-1"]  # every slot used once
    # any grouping of the 4 shared slots onto the two TaskManagers can come out (6 of them)
    assert len(set(drawn.values())) == 6
    again = {seed: task_managers_of_groups(graph, allocate_slots(graph, offers, placement_rng("random", seed)))
             for seed in range(40)}
    assert again == drawn
    assert placement_rng("ordered", 3) is None


def test_random_placement_fills_the_task_managers_it_takes_first():
    graph = two_vertices(1, 3, lambda s: s.rebalance())  # 3 shared slots on 3 x 2 slots
    offers = [SlotOffer(f"tm-{i}", 2) for i in range(3)]
    used = {frozenset(task_managers_of_groups(graph, allocate_slots(graph, offers, placement_rng("random", seed))))
            for seed in range(30)}
    # one TaskManager full and one more with one slot: always two TaskManagers, each of them sometimes
    assert all(len(task_managers) == 2 for task_managers in used)
    assert set().union(*used) == {"tm-0", "tm-1", "tm-2"}


def test_an_unknown_placement_is_refused():
    with pytest.raises(ValueError, match="placement must be one of ordered, random, got 'spread'"):
        placement_rng("spread", 0)


def test_task_managers_are_taken_in_name_order_whatever_order_they_registered_in():
    graph = two_vertices(1, 3, lambda s: s.rebalance())
    names = [f"tm-{i}" for i in (10, 2, 0, 1)]  # as they might register on Spark
    offers = [SlotOffer(name, 1) for name in names]
    assert task_managers_of_groups(graph, allocate_slots(graph, offers)) == ("tm-0", "tm-1", "tm-2")
    shuffled = [offers[i] for i in (3, 0, 2, 1)]
    rng = placement_rng("random", 5)
    assert (task_managers_of_groups(graph, allocate_slots(graph, offers, placement_rng("random", 5)))
            == task_managers_of_groups(graph, allocate_slots(graph, shuffled, rng)))
