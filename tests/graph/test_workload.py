import pytest

from graph import Cost, DiscardingSink, KeyDistribution, StreamExecutionEnvironment
from graph.api.workload import GeneratorSource


def test_cost_changes_in_a_window():
    cost = Cost(per_record=0.005, changes=((10.0, 20.0, 0.05),))
    assert cost.at(0) == 0.005
    assert cost.at(10.0) == 0.05
    assert cost.at(19.99) == 0.05
    assert cost.at(20.0) == 0.005


def test_cost_of_accepts_strings_numbers_and_costs():
    assert Cost.of("5ms") == Cost(0.005)
    assert Cost.of(0.25) == Cost(0.25)
    cost = Cost(0.001)
    assert Cost.of(cost) is cost


@pytest.mark.parametrize("kwargs", [
    {"per_record": -1}, {"per_record": 0.1, "changes": ((5.0, 1.0, 0.1),)},
    {"per_record": 0.1, "changes": ((0.0, 10.0, 0.1), (5.0, 15.0, 0.2))},
])
def test_invalid_costs(kwargs):
    with pytest.raises(ValueError):
        Cost(**kwargs)


@pytest.mark.parametrize("kwargs, word", [
    ({"kind": "gauss"}, "kind"), ({"kind": "zipf", "num_keys": 0}, "num_keys"),
    ({"kind": "zipf", "zipf_exponent": 0}, "zipf_exponent"), ({"kind": "hot_key", "hot_key_fraction": 1.5}, "hot_key_fraction"),
])
def test_key_distribution_is_validated(kwargs, word):
    with pytest.raises(ValueError, match=word):
        KeyDistribution(**kwargs)


def test_generator_source_is_a_named_parallel_source_with_its_description():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(3)
    keys = KeyDistribution("zipf", num_keys=100)
    env.from_generator(rate=1000, record_size=64, keys=keys, count=10).map(cost="5ms").sink_to(DiscardingSink(), cost=0.001)
    graph = env.get_stream_graph()
    source, mapper, writer = graph.nodes.values()
    assert source.operator_name == "Source: Generator"
    assert source.parallelism == 3 and not source.parallelism_configured
    assert source.source == GeneratorSource(1000, 64, keys, 10)
    assert mapper.function is None and mapper.cost == Cost(0.005)
    assert writer.operator_name == "Sink: Writer" and writer.cost == Cost(0.001)
    assert isinstance(writer.sink, DiscardingSink)


def test_generator_source_is_renamable_and_defaults():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator().name("Events").print()
    source = env.get_stream_graph().node(1)
    assert source.operator_name == "Source: Events"
    assert source.source == GeneratorSource(0, 16, KeyDistribution("uniform", 1024), None)


@pytest.mark.parametrize("kwargs", [{"rate": -1}, {"record_size": 7}, {"count": -3}, {"keys": "zipf"},
                                    {"record_size": 8, "keys": KeyDistribution("zipf", 10)}])
def test_generator_arguments_are_validated(kwargs):
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises((ValueError, TypeError), match="from_generator"):
        env.from_generator(**kwargs)
