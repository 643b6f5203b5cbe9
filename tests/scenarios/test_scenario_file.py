import json
import re
from pathlib import Path

import pytest

from scenarios.scenario_file import (
    ScenarioError,
    apply_overrides,
    load_scenario,
    parse_override,
)
from shuffle.config import NetworkConfig

LIBRARY = Path(__file__).parents[2] / "scenarios" / "library"

MINIMAL = """
duration = "30s"
[[job.stages]]
name = "Seq"
kind = "source"
[[job.stages]]
name = "SlowMap"
kind = "map"
cost = "5ms"
[[job.stages]]
kind = "sink"
"""


def write(tmp_path, text, name="scenario.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(tmp_path, text, overrides=()):
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(tmp_path, text), overrides)
    return str(info.value)


@pytest.mark.parametrize("path", sorted(LIBRARY.glob("*.toml")), ids=lambda p: p.name)
def test_every_library_file_loads(path):
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    assert path.read_text().startswith("#"), "library files start with a comment saying what they show"


def test_library_has_the_documented_files():
    names = {p.name for p in LIBRARY.glob("*.toml")}
    assert {"slow-map.toml", "slow-map-throttled.toml", "skewed-keys.toml", "slow-sink-window.toml", "head-of-line.toml"} <= names


def test_defaults_are_flinks(tmp_path):
    scenario = load_scenario(write(tmp_path, MINIMAL))
    net = scenario.network
    assert (net.buffer_size, net.exclusive_buffers_per_channel, net.floating_buffers_per_gate) == (32768, 2, 8)
    assert (net.max_buffers_per_channel, net.max_overdraft_buffers_per_gate) == (10, 20)
    assert net.buffer_timeout == pytest.approx(0.1)
    assert (net.flow_control, net.debloat, net.send_window) == ("credit", False, None)
    assert net.link_bandwidth == pytest.approx(10e9 / 8)
    assert net.link_latency == pytest.approx(50e-6)
    assert scenario.name == "scenario"
    assert (scenario.seed, scenario.mode, scenario.duration) == (0, "sim", 30.0)
    assert not scenario.checkpoints.enabled
    assert scenario.metrics.sample_period == 1.0
    assert scenario.cluster.network_memory is None
    assert scenario.folder == tmp_path


def test_values_are_parsed(tmp_path):
    scenario = load_scenario(
        write(
            tmp_path,
            MINIMAL
            + """
[network]
buffer_size = "4kb"
buffer_timeout = "off"
flow_control = "tcp"
[checkpoints]
interval = "3s"
mode = "unaligned"
aligned_timeout = "10ms"
[cluster]
network_memory = "1mb"
""",
        )
    )
    assert scenario.network.buffer_size == 4096
    assert scenario.network.buffer_timeout == -1.0
    assert scenario.checkpoints.interval == 3.0 and scenario.checkpoints.mode == "unaligned"
    assert scenario.checkpoints.aligned_timeout == pytest.approx(0.01)
    assert scenario.checkpoints.checkpoints_after_tasks_finish  # Flink 2.x's default
    assert scenario.checkpoints.tolerable_failed_checkpoints == 0  # Flink's default: none
    assert scenario.cluster.network_memory == 1024 * 1024
    assert scenario.job.stages[1].cost == pytest.approx(0.005)


def test_checkpoints_interval_off_turns_a_files_checkpoints_off(tmp_path):
    path = write(tmp_path, MINIMAL + '[checkpoints]\ninterval = "3s"\nmode = "unaligned"\n')
    assert load_scenario(path).checkpoints.enabled
    off = load_scenario(path, ["checkpoints.interval=off"])
    assert not off.checkpoints.enabled and off.checkpoints.interval is None


def test_stage_details(tmp_path):
    scenario = load_scenario(
        write(
            tmp_path,
            """
duration = "10s"
[[job.stages]]
kind = "source"
rate = 200
count = 1000
record_size = 64
keys = { distribution = "zipf", num_keys = 100, exponent = 1.3 }
[[job.stages]]
kind = "key_by_reduce"
cost_changes = [{ from = "10s", to = "20s", cost = "50ms" }]
[[job.stages]]
kind = "sink"
partitioner = "rebalance"
""",
        )
    )
    source, reduce, sink = scenario.job.stages
    assert (source.rate, source.count, source.record_size) == (200, 1000, 64)
    assert (source.keys.distribution, source.keys.num_keys, source.keys.exponent) == ("zipf", 100, 1.3)
    assert source.keys.hot_fraction is None
    change = reduce.cost_changes[0]
    assert (change.start, change.end, change.cost) == (10.0, 20.0, pytest.approx(0.05))
    assert reduce.cost is None and reduce.parallelism is None
    assert sink.partitioner == "rebalance"


@pytest.mark.parametrize(
    "extra, message",
    [
        ("[network]\nbufer_size = '32kb'", "scenario.toml: unknown key 'network.bufer_size' (did you mean 'network.buffer_size'?)"),
        (
            "[network]\nbuffer_timeout = '10 parsecs'",
            "scenario.toml: network.buffer_timeout: '10 parsecs' is not a duration (e.g. \"100ms\") or \"off\"",
        ),
        ("[network]\nbuffer_size = 'big'", "scenario.toml: network.buffer_size: 'big' is not a size (e.g. \"32kb\")"),
        ("[network]\nlink_bandwidth = 3", 'scenario.toml: network.link_bandwidth: 3 is not a bandwidth (e.g. "10gbit" or "200mb/s")'),
        ("[network]\nflow_control = 'udp'", "scenario.toml: network.flow_control: 'udp' is not one of 'credit', 'tcp'"),
        ("[network]\nfloating_buffers_per_gate = 0", "scenario.toml: network.floating_buffers_per_gate: 0 must be >= 1"),
        ("[network]\nexclusive_buffers_per_channel = 1.5", "scenario.toml: network.exclusive_buffers_per_channel: 1.5 is not an integer"),
        ("[network]\ndebloat = 'yes'", "scenario.toml: network.debloat: 'yes' is not true or false"),
        ("[network]\ndebloat_target = '0s'", "scenario.toml: network.debloat_target: '0s' must be > 0"),
        ("[network]\ndebloat_samples = 0", "scenario.toml: network.debloat_samples: 0 must be >= 1"),
        ("[network]\ndebloat_threshold_percentages = -5",
         "scenario.toml: network.debloat_threshold_percentages: -5 must be >= 0"),
        ("[network]\ndebloat = true\nmin_segment_size = '64kb'",
         "scenario.toml: network.min_segment_size: must not exceed buffer_size (32768 bytes), got 65536"),
        ("[network]\ndebloat = true\nstarting_segment_size = '100b'",
         "scenario.toml: network.starting_segment_size: must lie between min_segment_size (256) and buffer_size"),
        ("[checkpoints]\ninterval = '0s'", "scenario.toml: checkpoints.interval: '0s' must be >= \"10ms\" (Flink's minimum)"),
        ("[checkpoints]\nmode = 'exactly_once'", "scenario.toml: checkpoints.mode: 'exactly_once' is not one of"),
        ("[checkpoints]\ncheckpoints_after_tasks_finish = 'no'",
         "scenario.toml: checkpoints.checkpoints_after_tasks_finish: 'no' is not true or false"),
        ("[checkpoints]\ntolerable_failed_checkpoints = -1",
         "scenario.toml: checkpoints.tolerable_failed_checkpoints: -1 must be >= 0"),
        ("[cluster]\ntask_managers = true", "scenario.toml: cluster.task_managers: true is not an integer"),
        ("[cluster]\nnetwork_memory = '1kb'", "scenario.toml: cluster.network_memory: must hold at least one buffer"),
        ("network = 5", "scenario.toml: network: 5 is not a table"),
        ("mode = 'fast'", "scenario.toml: mode: 'fast' is not one of 'sim', 'realtime'"),
        ("seeed = 3", "scenario.toml: unknown key 'seeed' (did you mean 'seed'?)"),
    ],
)
def test_bad_keys_and_values_name_file_and_key(tmp_path, extra, message):
    text = 'duration = "30s"\n' + extra + MINIMAL.replace('duration = "30s"', "")
    assert f"{tmp_path}/{message}" in error_of(tmp_path, text)


def stages(*bodies):
    return "".join(f"[[job.stages]]\n{body}\n" for body in bodies)


SOURCE, MAP, SINK = 'kind = "source"', 'kind = "map"', 'kind = "sink"'
REDUCE = 'kind = "key_by_reduce"'


@pytest.mark.parametrize(
    "job, message",
    [
        (stages(MAP, SINK), "job.stages: the first stage, and only the first, must be a 'source'"),
        (stages(SOURCE, MAP), "job.stages: the last stage, and only the last, must be a 'sink'"),
        (stages(SOURCE, SOURCE, SINK), "job.stages: the first stage, and only the first, must be a 'source'"),
        # two stages of one name: job.stages[Work] would pick one of them
        (stages(SOURCE + '\nname = "Work"', MAP + '\nname = "Work"', SINK),
         "job.stages[1] (Work).name: 'Work' is also the name of job.stages[0] (Work): stage names must differ"),
        (stages(SOURCE + '\ncost = "1ms"', SINK), "job.stages[0].cost: a 'source' stage takes no 'cost'"),
        (stages(SOURCE, MAP + "\nselectivity = 0.5", SINK), "job.stages[1].selectivity: a 'map' stage takes no"),
        (stages(SOURCE, 'kind = "mapp"'), "job.stages[1].kind: 'mapp' is not one of"),
        (stages(SOURCE, MAP + '\nbuffer_timeout = "off"', SINK),
         'job.stages[1].buffer_timeout: "off" is only for network.buffer_timeout'),
        (stages(SOURCE, SINK + '\nbuffer_timeout = "1ms"'), "job.stages[1].buffer_timeout: a 'sink' stage takes no"),
        (
            stages(SOURCE, REDUCE + '\npartitioner = "rebalance"', SINK),
            "job.stages[1].partitioner: a 'key_by_reduce' stage is always hash-partitioned",
        ),
        (
            stages(SOURCE + '\nkeys = { distribution = "uniform", exponent = 2.0 }', SINK),
            'job.stages[0].keys.exponent: only for distribution = "zipf"',
        ),
        (
            stages(SOURCE + '\nkeys = { distribution = "hot_key", hot_fraction = 1.5 }', SINK),
            "job.stages[0].keys.hot_fraction: 1.5 must be between 0 and 1",
        ),
        (
            stages(SOURCE, SINK + '\ncost_changes = [{ from = "20s", to = "10s", cost = "1ms" }]'),
            "job.stages[1].cost_changes[0]: 'to' must be after 'from'",
        ),
        (
            stages(SOURCE, SINK + '\ncost_changes = [{ from = "1s", to = "5s", cost = "1ms" },'
                   ' { from = "4s", to = "6s", cost = "2ms" }]'),
            "job.stages[1].cost_changes[1]: overlaps cost_changes[0]",
        ),
        (
            stages(SOURCE, SINK + '\ncost_changes = [{ from = "1s", cost = "1ms" }]'),
            "missing key 'job.stages[1].cost_changes[0].to'",
        ),
        (stages(SOURCE + "\nrecord_size = 7", SINK), "job.stages[0].record_size: 7 must be >= 8"),
        (stages('name = "A"', SINK), "missing key 'job.stages[0] (A).kind'"),
        # keys on records that are their own key (a Long): the key, not the graph API's message
        (stages(SOURCE + '\nrecord_size = 8\nkeys = { distribution = "hot_key" }', SINK),
         "job.stages[0].record_size: 8 leaves no room for keys"),
        (stages(SOURCE + '\nname = "Events"\nrecord_size = 12\nkeys = { num_keys = 4 }', SINK),
         "job.stages[0] (Events).record_size: 12 leaves no room for keys (a record of 12 bytes is its own key, "
         "a Long): with 'keys' it must be >= 16"),
        ('[job]\nprogram = "not a program"', 'job.program: \'not a program\' is not "module:function"'),
        ('[job]\nprogram = "m:f"\n' + stages(SOURCE, SINK), "job: give either 'program' or [[job.stages]]"),
        ("[job]", "job: give either 'program' or [[job.stages]], not both or neither"),
    ],
)
def test_bad_stages(tmp_path, job, message):
    assert message in error_of(tmp_path, 'duration = "10s"\n' + job)


def test_missing_required_and_bad_toml(tmp_path):
    assert error_of(tmp_path, '[job]\nprogram = "m:f"') == f"{tmp_path}/scenario.toml: missing key 'duration'"
    assert error_of(tmp_path, "duration = ").startswith(str(tmp_path / "scenario.toml") + ": invalid TOML")
    with pytest.raises(ScenarioError, match="nope.toml: cannot read"):
        load_scenario(tmp_path / "nope.toml")


def test_program_job(tmp_path):
    scenario = load_scenario(write(tmp_path, 'duration = "10s"\n[job]\nprogram = "pipelines.wordcount:build"\nparallelism = 4'))
    assert scenario.job.program == "pipelines.wordcount:build"
    assert scenario.job.parallelism == 4 and scenario.job.stages == ()


def test_overrides(tmp_path):
    path = write(tmp_path, MINIMAL)
    scenario = load_scenario(
        path,
        [
            "network.buffer_timeout=10ms",
            "seed=42",
            "network.debloat=true",
            "checkpoints.interval=2s",  # creates the [checkpoints] table
            "job.stages[SlowMap].cost=1ms",
            "job.stages[0].rate=100",
            'name="renamed"',
        ],
    )
    assert scenario.network.buffer_timeout == pytest.approx(0.01)
    assert scenario.seed == 42 and scenario.network.debloat is True
    assert scenario.checkpoints.interval == 2.0
    assert scenario.job.stages[1].cost == pytest.approx(0.001)
    assert scenario.job.stages[0].rate == 100
    assert scenario.name == "renamed"


def test_apply_overrides_copies_and_parses_toml_literals():
    raw = {"network": {"buffer_size": "32kb"}}
    result = apply_overrides(raw, ["network.buffer_size=4kb", "network.floating_buffers_per_gate=3", "a.b=[1, 2]"])
    assert raw == {"network": {"buffer_size": "32kb"}}
    assert result == {"network": {"buffer_size": "4kb", "floating_buffers_per_gate": 3}, "a": {"b": [1, 2]}}
    assert parse_override("debloat = true") == ("debloat", True)
    assert parse_override("x=hello world") == ("x", "hello world")


@pytest.mark.parametrize(
    "override, message",
    [
        ("network.bufer_size=1kb", "scenario.toml: unknown key 'network.bufer_size' (did you mean 'network.buffer_size'?)"),
        ("network.buffer_timeout=10 parsecs", "network.buffer_timeout: '10 parsecs' is not a duration"),
        ("network", "--set 'network': expected KEY=VALUE"),
        ("duration.x=1", "--set duration.x=1: 'duration' is not a table"),
        ("job.stages[7].cost=1ms", "--set job.stages[7].cost='1ms': there is no job.stages[7] (the scenario has 3, numbered from 0)"),
        ("job.stages[Nope].cost=1ms", "there is no job.stages[Nope] (names: Seq, SlowMap)"),
        ("network..x=1", "is not a key like"),
    ],
)
def test_bad_overrides(tmp_path, override, message):
    assert message in error_of(tmp_path, MINIMAL, [override])


def test_network_config_by_field_name(tmp_path):
    scenario = load_scenario(
        write(tmp_path, MINIMAL),
        ["network.buffer_size=4kb", "network.flow_control=tcp", "network.link_latency=1ms", "cluster.network_memory=2mb",
         "network.flusher_sleep_overshoot=0ms"],
    )
    config = scenario.network_config()
    assert type(config).__module__ == "shuffle.config"
    assert (config.buffer_size, config.flow_control, config.network_memory) == (4096, "tcp", 2 * 1024 * 1024)
    assert config.link_latency == pytest.approx(0.001)
    assert config.flusher_sleep_overshoot == 0 and NetworkConfig().flusher_sleep_overshoot == pytest.approx(100e-6)
    assert config.floating_buffers_per_gate == 8


def test_debloat_settings_reach_the_network_config_with_flinks_defaults(tmp_path):
    config = load_scenario(write(tmp_path, MINIMAL), ["network.debloat=true"]).network_config()
    assert (config.debloat, config.debloat_target, config.debloat_period) == (True, 1.0, pytest.approx(0.2))
    assert (config.debloat_samples, config.debloat_threshold_percentages) == (20, 25)
    assert (config.min_segment_size, config.starting_segment_size, config.starting_buffer_size) == (256, 1024, 1024)
    tuned = load_scenario(write(tmp_path, MINIMAL), ["network.debloat_target=200ms", "network.min_segment_size=1kb"])
    assert (tuned.network_config().debloat_target, tuned.network_config().min_segment_size) == (0.2, 1024)


def test_heartbeat_settings_are_durations_and_the_interval_must_be_below_the_timeout(tmp_path):
    from scenarios.run import run_scenario

    scenario = load_scenario("scenarios/library/slow-map.toml",
                             ["cluster.heartbeat_interval=2s", "cluster.heartbeat_timeout=5s"])
    assert (scenario.cluster.heartbeat_interval, scenario.cluster.heartbeat_timeout) == (2.0, 5.0)
    with pytest.raises(ScenarioError, match="cluster.heartbeat_timeout: 'soon' is not a duration"):
        load_scenario("scenarios/library/slow-map.toml", ["cluster.heartbeat_timeout=soon"])
    late = load_scenario("scenarios/library/slow-map.toml", ["cluster.heartbeat_interval=60s"])
    with pytest.raises(ScenarioError, match=r"cluster.heartbeat_interval \(60 s\) must be below"):
        run_scenario(late, tmp_path)


@pytest.mark.parametrize("fault, message", [
    ('{ at = "1s", kind = "meteor" }', "faults[0].kind: 'meteor' is not one of"),
    ('{ at = "1s", kind = "pause_task", vertex = "SlowMap" }', "faults[0]: a 'pause_task' fault needs 'duration'"),
    ('{ at = "1s", kind = "kill_task_manager", task_manager = "tm-0", vertex = "X" }',
     "faults[0].vertex: a 'kill_task_manager' fault takes no 'vertex'"),
    ('{ at = "1s", kind = "drop_connection", between = ["tm-0"] }',
     "faults[0].between: ['tm-0'] is not two TaskManagers"),
])
def test_bad_faults_are_one_clear_error(tmp_path, fault, message):
    text = f"faults = [{fault}]\n" + (LIBRARY / "slow-map.toml").read_text()  # a top-level key: before any table
    path = tmp_path / "faulty.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=re.escape(message)):
        load_scenario(path)


def test_faults_must_name_what_the_run_has(tmp_path):
    from scenarios.run import run_scenario

    base = (LIBRARY / "slow-map.toml").read_text()
    cases = [('{ at = "1s", kind = "kill_task_manager", task_manager = "tm-7" }',
              "faults[0].task_manager: no TaskManager 'tm-7'"),
             ('{ at = "1s", kind = "drop_connection", between = ["tm-0", "tm-7"] }',
              "faults[0].between: no TaskManager 'tm-7'"),
             ('{ at = "1s", kind = "fail_task", vertex = "Nope" }', "faults[0].vertex: no vertex 'Nope'"),
             ('{ at = "1s", kind = "fail_task", vertex = "SlowMap", subtask = 2 }',
              "faults[0].subtask: 'SlowMap -> Sink: Writer' has 2 subtasks, no subtask 2"),
             ('{ at = "1s", kind = "pause_link", between = ["tm-0", "tm-1"], duration = "1s" }',
              "needs the simulated link")]
    for i, (fault, message) in enumerate(cases):
        path = tmp_path / f"case{i}.toml"
        path.write_text(f"faults = [{fault}]\n" + base)
        scenario = load_scenario(path, ["mode=realtime"] if "pause_link" in fault else [])
        with pytest.raises(ScenarioError, match=re.escape(message)):
            run_scenario(scenario, tmp_path / f"out{i}")


def test_cluster_placement_random_draws_where_subtasks_run_from_the_seed(tmp_path):
    from scenarios.run import run_scenario

    def source_task_managers(overrides):
        scenario = load_scenario("scenarios/library/skewed-keys.toml", ["duration=1s", *overrides])
        out = tmp_path / "-".join(overrides)
        run_scenario(scenario, out)
        source = json.loads((out / "summary.json").read_text())["vertices"][0]
        return tuple(subtask["task_manager"] for subtask in source["subtasks"])

    assert source_task_managers([]) == ("tm-0", "tm-0")  # "ordered": both sources on the first
    drawn = [source_task_managers(["cluster.placement=random", f"seed={seed}"]) for seed in range(6)]
    assert any(a != b for a, b in drawn)  # as in Flink, most runs split them
    with pytest.raises(ScenarioError, match="cluster.placement: 'spread' is not one of 'ordered', 'random'"):
        load_scenario("scenarios/library/skewed-keys.toml", ["cluster.placement=spread"])


def test_a_table_value_in_set_sets_each_of_its_keys_as_in_a_sweep(tmp_path):
    """`--set network={...}` keeps the file's other [network] keys, as a sweep point's table does;
    a source's `keys` table is set whole (its keys depend on the distribution)."""
    text = (MINIMAL.replace('duration = "30s"', 'duration = "30s"\n[network]\nbuffer_timeout = "5ms"')
            .replace('kind = "source"', 'kind = "source"\nkeys = {distribution = "zipf", exponent = 1.5}'))
    path = write(tmp_path, text)
    scenario = load_scenario(path, ['network={buffer_size="8kb"}', 'job.stages[SlowMap]={cost="2ms"}',
                                    'job.stages[Seq].keys={distribution="hot_key", hot_fraction=0.5}'])
    assert scenario.network.buffer_size == 8192
    assert scenario.network.buffer_timeout == pytest.approx(0.005)
    assert scenario.job.stages[1].cost == pytest.approx(0.002) and scenario.job.stages[1].name == "SlowMap"
    keys = scenario.job.stages[0].keys
    assert (keys.distribution, keys.hot_fraction, keys.exponent) == ("hot_key", 0.5, None)
    assert error_of(tmp_path, MINIMAL, ['network={bufer_size="8kb"}']).endswith(
        "unknown key 'network.bufer_size' (did you mean 'network.buffer_size'?) (from --set network)")


def test_the_readme_checkpoints_section_loads_with_its_cost_settings(tmp_path):
    # its commented cost line wrote upload_bandwidth = "200MB", which is not a bandwidth
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = readme.split("## Checkpoints: barriers and their alignment\n", 1)[1].split("```toml\n", 1)[1]
    block = block.split("```", 1)[0]
    lines = []
    for line in block.splitlines():
        if re.match(r"# \w+ = ", line):  # "# key = value, key = value": the optional costs
            lines.extend(pair.strip() for pair in line[2:].rstrip(",").split(", "))
        elif not line.startswith("#"):
            lines.append(line)
    scenario = load_scenario(write(tmp_path, MINIMAL + "\n".join(lines) + "\n"))
    assert scenario.checkpoints.upload_bandwidth == 200e6
    assert scenario.checkpoints.state_size == 0
