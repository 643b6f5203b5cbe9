"""A scenario as the reference job's arguments: the graph our compiler builds, Flink's options,
and a refusal by name of anything the job on Flink would not reproduce."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios.flink_reference.job_args import ReferenceUnsupportedError, latency_operator, reference_args
from scenarios.scenario_file import load_scenario

LIBRARY = Path(__file__).resolve().parents[3] / "scenarios" / "library"


def args_of(name: str, *overrides: str) -> dict[str, str]:
    pairs = (arg.split("=", 1) for arg in reference_args(load_scenario(LIBRARY / f"{name}.toml", list(overrides))))
    return dict(pairs)


def test_slow_map_runs_as_compiled_two_task_managers_rebalance_five_ms_chained_sink():
    args = args_of("slow-map")
    assert args | {"jobName": "slow-map"} == {
        "jobName": "slow-map", "sourceName": "Seq", "sourceParallelism": "1", "rate": "0.0", "recordSize": "16",
        "keys": "1024", "hotFraction": "-1", "sourceSlotSharingGroup": "default", "sourceDisableChaining": "false",
        "stages": "2", "stage0Kind": "map", "stage0Selectivity": "1.0", "stage0FanOut": "1", "stage0Name": "SlowMap",
        "stage0Parallelism": "2",
        "stage0Partitioner": "REBALANCE", "stage0CostNanos": "5000000", "stage0SlotSharingGroup": "default",
        "stage0DisableChaining": "false", "stage1Kind": "sink", "stage1Selectivity": "1.0", "stage1FanOut": "1",
        "stage1Name": "Sink", "stage1Parallelism": "2",
        "stage1Partitioner": "FORWARD", "stage1CostNanos": "0", "stage1SlotSharingGroup": "default",
        "stage1DisableChaining": "false", "minicluster.number-of-taskmanagers": "2",
        "taskmanager.numberOfTaskSlots": "1", "execution.buffer-timeout.interval": "100ms"}


def test_keyed_stage_hot_keys_and_an_unchained_sink_come_from_the_compiled_graph():
    args = args_of("floating-vs-exclusive")
    assert (args["stage0Partitioner"], args["stage0Parallelism"], args["stage0CostNanos"]) == ("HASH", "4", "200000")
    assert (args["recordSize"], args["keys"], args["hotFraction"]) == ("256", "1000", "0.6")
    # the sink has no parallelism of its own: the environment's (1), behind a rebalance, as Flink's
    assert (args["stage1Parallelism"], args["stage1Partitioner"]) == ("1", "REBALANCE")


def test_checkpoint_and_debloat_settings_become_flink_options():
    args = args_of("checkpoints-slow-map", "checkpoints.aligned_timeout=20ms")
    assert args["execution.checkpointing.interval"] == "3000ms"
    assert args["execution.checkpointing.unaligned.enabled"] == "true"
    assert args["execution.checkpointing.aligned-checkpoint-timeout"] == "20ms"
    # the sink inherits the stage's group, as in Flink; the source keeps the default one
    assert (args["sourceSlotSharingGroup"], args["stage0SlotSharingGroup"], args["stage1SlotSharingGroup"]) == (
        "default", "slow", "slow")
    assert args["execution.checkpointing.checkpoints-after-tasks-finish"] == "true"
    assert "execution.checkpointing.unaligned.forced" not in args  # Flink's default: false
    forced = args_of("checkpoints-slow-map", "checkpoints.force_unaligned=true")
    assert forced["execution.checkpointing.unaligned.forced"] == "true"
    assert args_of("checkpoints-slow-map", "checkpoints.mode=at_least_once")["execution.checkpointing.mode"] == (
        "AT_LEAST_ONCE")
    debloat = args_of("debloat-slow-map", "network.debloat_target=500ms", "network.min_segment_size=512b")
    assert debloat["taskmanager.network.memory.buffer-debloat.enabled"] == "true"
    assert debloat["taskmanager.network.memory.buffer-debloat.target"] == "500ms"
    assert debloat["taskmanager.memory.min-segment-size"] == "512b"
    assert "taskmanager.network.memory.buffer-debloat.period" not in debloat  # left at Flink's default
    assert args_of("slow-map", "network.buffer_timeout=off")["execution.buffer-timeout.enabled"] == "false"


def test_a_costed_sink_of_its_own_reports_the_latency():
    args = args_of("slow-sink")
    assert (args["stage0Name"], args["stage0CostNanos"], args["stage1Name"], args["stage1CostNanos"]) == (
        "Sessionize", "100000", "Store", "2000000")
    assert (args["stage0SlotSharingGroup"], args["stage1SlotSharingGroup"], args["stage1Partitioner"]) == (
        "maps", "sinks", "REBALANCE")
    assert latency_operator(reference_args(load_scenario(LIBRARY / "slow-sink.toml"))) == "Store: Writer"


def test_a_broadcast_stage_and_its_rebalanced_sink():
    args = args_of("broadcast-fanout")
    assert (args["stage0Partitioner"], args["stage0Parallelism"], args["stage1Parallelism"], args["stage1Partitioner"]) == (
        "BROADCAST", "4", "1", "REBALANCE")


def test_a_keyed_map_stays_a_map_and_machine_settings_are_left_out():
    assert args_of("slow-map", "job.stages[SlowMap].partitioner=hash")["stage0Kind"] == "map"
    assert args_of("skewed-keys")["stage0Kind"] == "keyed_reduce"
    # our model of the machine and the run: nothing to tell Flink
    assert args_of("checkpoints-slow-map", "checkpoints.state_size=1mb", "checkpoints.upload_bandwidth=10mb/s",
                   "cluster.placement=random", "network.flusher_sleep_overshoot=1ms", "seed=3") == args_of(
        "checkpoints-slow-map")


@pytest.mark.parametrize(("name", "overrides", "named"), [
    ("head-of-line", [], "network.flow_control"),
    ("slow-map", ["network.link_latency=1ms"], "network.link_latency"),
    ("broadcast-fanout", ["job.stages[Apply].partitioner=global"], "partitioner GLOBAL"),
    ("slow-sink-window", [], "sets cost_changes"),
    ("slow-map", ["job.stages[Seq].count=100"], r"job.stages\[0\] \(Seq\) sets count"),
    ("slow-map", ["job.stages[Seq].record_size=12"], "record_size 12"),
    ("slow-map", ["job.stages[Seq].keys.distribution=zipf"], "zipf keys"),
    ("slow-map", ["cluster.network_memory=64mb"], "cluster.network_memory"),
    ("slow-map", ["network.exclusive_buffers_per_channel=4"], "network.exclusive_buffers_per_channel"),
    ("slow-map", ["network.buffer_timeout=0.4ms"], "network.buffer_timeout = 0.4 ms"),
    ("checkpoints-slow-map", ["checkpoints.interval=12500us"], "checkpoints.interval = 12.5 ms"),
])
def test_what_the_reference_job_cannot_reproduce_is_refused_by_name(name, overrides, named):
    with pytest.raises(ReferenceUnsupportedError, match=named) as refused:
        args_of(name, *overrides)
    assert f"library/{name}.toml" in str(refused.value)


PIPELINE = """
name = "pipeline"
duration = "10s"
[cluster]
task_managers = 3
slots_per_task_manager = 2
[[job.stages]]
name = "Src"
kind = "source"
parallelism = 2
[[job.stages]]
name = "Parse"
kind = "map"
parallelism = 2
cost = "0.2ms"
[[job.stages]]
name = "Count"
kind = "key_by_reduce"
parallelism = 3
cost = "1ms"
slot_sharing_group = "counts"
[[job.stages]]
name = "Enrich"
kind = "map"
parallelism = 3
cost = "0.5ms"
disable_chaining = true
[[job.stages]]
name = "Store"
kind = "sink"
parallelism = 2
cost = "2ms"
"""


def test_a_pipeline_of_several_stages_keeps_each_stage_its_edge_chaining_and_group(tmp_path):
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE)
    args = dict(arg.split("=", 1) for arg in reference_args(load_scenario(path)))
    assert args["stages"] == "4"
    stages = [{key.removeprefix(f"stage{i}"): value for key, value in args.items() if key.startswith(f"stage{i}")}
              for i in range(4)]
    assert [(s["Kind"], s["Name"], s["Parallelism"], s["Partitioner"], s["CostNanos"]) for s in stages] == [
        ("map", "Parse", "2", "FORWARD", "200000"), ("keyed_reduce", "Count", "3", "HASH", "1000000"),
        ("map", "Enrich", "3", "FORWARD", "500000"), ("sink", "Store", "2", "REBALANCE", "2000000")]
    # groups are inherited from the input, as in Flink; chaining is the stage's own
    assert [s["SlotSharingGroup"] for s in stages] == ["default", "counts", "counts", "counts"]
    assert [s["DisableChaining"] for s in stages] == ["false", "false", "true", "false"]
    assert latency_operator(reference_args(load_scenario(path))) == "Store: Writer"


def test_filter_and_flat_map_stages_carry_their_selectivity_and_fan_out(tmp_path):
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE.replace('kind = "map"\nparallelism = 2', 'kind = "filter"\nselectivity = 0.25\nparallelism = 2')
                    .replace('kind = "map"\nparallelism = 3', 'kind = "flat_map"\nfan_out = 3\nparallelism = 3'))
    args = dict(arg.split("=", 1) for arg in reference_args(load_scenario(path)))
    assert (args["stage0Kind"], args["stage0Selectivity"], args["stage0FanOut"]) == ("filter", "0.25", "1")
    assert (args["stage2Kind"], args["stage2Selectivity"], args["stage2FanOut"]) == ("flat_map", "1.0", "3")
