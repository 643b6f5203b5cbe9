import sys
from pathlib import Path

import pytest

from graph import Cost
from scenarios.build import build_program
from scenarios.scenario_file import ScenarioError, load_scenario

LIBRARY = Path(__file__).parents[2] / "scenarios" / "library"


def nodes_of(env):
    return list(env.get_stream_graph().nodes.values())


def partitioner_into(env, name):
    (edge,) = next(n for n in nodes_of(env) if n.name == name).in_edges
    return edge.partitioner.name


def test_slow_map_stages():
    env = build_program(load_scenario(LIBRARY / "slow-map.toml"))
    source, slow_map, sink = nodes_of(env)
    assert (source.kind, source.name, source.parallelism) == ("source", "Seq", 1)
    assert (source.source.rate, source.source.record_size, source.source.count) == (0, 16, None)
    assert (slow_map.kind, slow_map.name, slow_map.parallelism) == ("map", "SlowMap", 2)
    assert slow_map.cost == Cost(0.005)
    assert (sink.kind, sink.name, sink.parallelism) == ("sink", "Sink", 2)
    assert partitioner_into(env, "SlowMap") == "REBALANCE"
    assert partitioner_into(env, "Sink") == "FORWARD"
    assert env.get_buffer_timeout() == pytest.approx(0.1)
    assert not env.get_checkpoint_config().is_checkpointing_enabled()


def test_keyed_stage_and_key_distribution():
    env = build_program(load_scenario(LIBRARY / "skewed-keys.toml"))
    source, reduce, _ = nodes_of(env)
    keys = source.source.keys
    assert (keys.kind, keys.num_keys, keys.hot_key_fraction) == ("hot_key", 1000, 0.5)
    assert (source.source.rate, source.source.record_size) == (1000, 512)
    assert reduce.kind == "keyed_reduce" and reduce.keyed
    assert reduce.cost == Cost(0.001)
    assert partitioner_into(env, "CountPerKey") == "HASH"


def test_a_keyed_stage_sends_its_rows_on_at_their_size():
    """Each record is its key's latest aggregate, as Flink's reduce returns the record: the
    same row, the same 256 + 13 bytes on the wire into an unchained sink (Flink 2.3 on
    floating-vs-exclusive: 269 B per record); a Python reduce made them ~29 B tuples."""
    from taskmgr.cluster import execute

    scenario = load_scenario(LIBRARY / "floating-vs-exclusive.toml", ["duration=3s"])
    (reduce,) = [n for n in nodes_of(build_program(scenario)) if n.kind == "keyed_reduce"]
    assert reduce.function is None
    result = execute(build_program(scenario), duration=3, task_managers=2, slots_per_task_manager=2)
    sink = result.raise_for_status().vertex_summary("Sink: Writer")["metrics"]
    assert sink["numRecordsIn"] > 1000
    assert sink["numBytesIn"] == pytest.approx(269 * sink["numRecordsIn"], rel=0.01)


def test_cost_changes():
    env = build_program(load_scenario(LIBRARY / "slow-sink-window.toml"))
    sink = nodes_of(env)[-1]
    assert sink.cost.at(5.0) == pytest.approx(0.0001)
    assert sink.cost.at(15.0) == pytest.approx(0.01)


def test_job_settings_and_stage_options(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        """
duration = "10s"
[network]
buffer_timeout = "5ms"
[checkpoints]
interval = "3s"
mode = "unaligned"
aligned_timeout = "20ms"
[job]
parallelism = 3
[[job.stages]]
kind = "source"
count = 100
keys = { distribution = "zipf", exponent = 1.5 }
[[job.stages]]
kind = "filter"
name = "Half"
selectivity = 0.5
partitioner = "shuffle"
slot_sharing_group = "cheap"
[[job.stages]]
kind = "flat_map"
name = "Triple"
fan_out = 3
partitioner = "hash"
disable_chaining = true
buffer_timeout = "2ms"
[[job.stages]]
kind = "sink"
name = "Out"
cost = "1ms"
"""
    )
    env = build_program(load_scenario(path))
    source, half, triple, out = nodes_of(env)
    assert env.get_parallelism() == 3 and source.parallelism == 3
    assert env.get_buffer_timeout() == pytest.approx(0.005)
    config = env.get_checkpoint_config()
    assert config.interval == 3.0 and config.unaligned
    assert config.aligned_checkpoint_timeout == pytest.approx(0.02)
    assert source.source.count == 100 and source.source.keys.zipf_exponent == 1.5
    assert (half.kind, half.selectivity, half.slot_sharing_group) == ("filter", 0.5, "cheap")
    assert partitioner_into(env, "Half") == "SHUFFLE"
    assert (triple.kind, triple.fan_out, triple.buffer_timeout) == ("flat_map", 3, 0.002)
    assert partitioner_into(env, "Triple") == "HASH"
    assert out.cost == Cost(0.001)


def test_at_least_once_checkpoints(tmp_path):
    scenario = load_scenario(
        LIBRARY / "slow-map.toml", ["checkpoints.interval=1s", "checkpoints.mode=at_least_once"]
    )
    config = build_program(scenario).get_checkpoint_config()
    assert config.mode.name == "AT_LEAST_ONCE" and not config.unaligned


def test_forced_unaligned_checkpoints_reach_the_program():
    forced = load_scenario(LIBRARY / "checkpoints-slow-map.toml", ["checkpoints.force_unaligned=true"])
    assert build_program(forced).get_checkpoint_config().is_force_unaligned_checkpoints()
    plain = load_scenario(LIBRARY / "checkpoints-slow-map.toml")
    assert not build_program(plain).get_checkpoint_config().is_force_unaligned_checkpoints()


def test_program_relative_to_the_scenario_folder(tmp_path):
    (tmp_path / "my_pipeline_mod.py").write_text(
        "from graph import DiscardingSink\n"
        "def build(env):\n"
        "    env.from_generator(rate=10).name('Numbers').map(cost='2ms').sink_to(DiscardingSink())\n"
    )
    path = tmp_path / "s.toml"
    path.write_text('duration = "5s"\n[job]\nprogram = "my_pipeline_mod:build"\nparallelism = 2\n')
    env = build_program(load_scenario(path))
    names = [n.name for n in nodes_of(env)]
    assert names[0] == "Numbers" and len(names) == 3
    assert all(n.parallelism == 2 for n in nodes_of(env))
    assert str(tmp_path) not in sys.path


@pytest.mark.parametrize(
    "program, message",
    [
        ("no_such_module_xyz:build", "job.program: cannot import 'no_such_module_xyz'"),
        ("my_empty_mod:build", "job.program: module 'my_empty_mod' has no function 'build'"),
    ],
)
def test_program_errors(tmp_path, program, message):
    (tmp_path / "my_empty_mod.py").write_text("x = 1\n")
    path = tmp_path / "s.toml"
    path.write_text(f'duration = "5s"\n[job]\nprogram = "{program}"\n')
    with pytest.raises(ScenarioError, match=f"{path}: {message}"):
        build_program(load_scenario(path))


@pytest.mark.parametrize("path", sorted(LIBRARY.glob("*.toml")), ids=lambda p: p.name)
def test_every_library_file_compiles(path):
    scenario = load_scenario(path)
    job_graph = build_program(scenario).get_job_graph()
    assert job_graph.vertices[0].name.startswith("Source: ")
    slots_needed = sum(
        max(v.parallelism for v in job_graph.vertices if v.slot_sharing_group.name == group)
        for group in {v.slot_sharing_group.name for v in job_graph.vertices}
    )
    assert slots_needed <= scenario.cluster.task_managers * scenario.cluster.slots_per_task_manager
