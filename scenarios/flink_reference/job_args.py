"""A scenario as the arguments of FlinkReferenceJob.java: the job and Flink's configuration.

Only what the reference job can run is taken: `[[job.stages]]` of a generator source, any
number of `map`, `filter` (a random `selectivity`), `flat_map` (`fan_out` copies) and
`key_by_reduce` stages and a sink, each with its cost, partitioner,
parallelism, slot sharing group and chaining; Flink's own settings for the
cluster, the buffer timeout, buffer debloating and checkpoints. Settings of our model of the
machine (link, flusher overshoot, checkpoint costs), of the run (seed, mode, sampling,
restarts: the job has no faults) and the placement (Flink picks its own) do not apply to a
Flink run and are left out. Anything else that differs from its default is refused by name
(`ReferenceUnsupportedError`), so that a comparison never runs silently against a
different job. The job's shape (names, parallelism, partitioners, slot sharing groups, the
source's resolved defaults) is read off the StreamGraph our compiler builds, so both sides
run the same graph.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from graph import GeneratorSource, StreamNode
from scenarios.build import build_program, compile_errors_named
from scenarios.scenario_file import (CheckpointSettings, ClusterConfig, NetworkSettings, Scenario, ScenarioError,
                                     stage_key)

#: Partitioners the reference job can put before its stage (the StreamGraph's names).
PARTITIONERS = ("REBALANCE", "RESCALE", "FORWARD", "SHUFFLE", "BROADCAST", "HASH")
#: `[network]` settings with a Flink option, and its name.
NETWORK_OPTIONS = {
    "buffer_size": "taskmanager.memory.segment-size",
    "debloat": "taskmanager.network.memory.buffer-debloat.enabled",
    "debloat_target": "taskmanager.network.memory.buffer-debloat.target",
    "debloat_period": "taskmanager.network.memory.buffer-debloat.period",
    "debloat_samples": "taskmanager.network.memory.buffer-debloat.samples",
    "debloat_threshold_percentages": "taskmanager.network.memory.buffer-debloat.threshold-percentages",
    "min_segment_size": "taskmanager.memory.min-segment-size",
    "starting_segment_size": "taskmanager.memory.starting-segment-size",
}
#: Settings that do not apply to a Flink run (see the module doc), per section. The buffer
#: timeout is applied, but per operator, as the StreamGraph resolves it.
NOT_APPLICABLE = {
    "network": {"buffer_timeout", "flusher_sleep_overshoot"},
    "cluster": {"secret", "heartbeat_interval", "heartbeat_timeout", "task_cancellation_timeout", "placement"},
    "checkpoints": {"trigger_delay", "ack_latency", "sync_snapshot", "async_overhead", "upload_bandwidth",
                    "state_size"},
}
#: Settings turned into Flink options elsewhere in this module, per section.
MAPPED = {
    "network": set(NETWORK_OPTIONS),
    "cluster": {"task_managers", "slots_per_task_manager"},
    "checkpoints": {"interval", "mode", "aligned_timeout", "timeout", "max_concurrent", "min_pause",
                    "tolerable_failed_checkpoints", "checkpoints_after_tasks_finish", "force_unaligned"},
}

#: The source's arguments the reference job reads as Java ints, and their settings.
SOURCE_JAVA_INTS = {"recordSize": "record_size", "keys": "keys.num_keys", "sourceParallelism": "parallelism"}
JAVA_INT_MAX = 2**31 - 1


class ReferenceUnsupportedError(ScenarioError):
    """The scenario uses something the reference job on real Flink cannot reproduce."""


def _ms(scenario: Scenario, key: str, seconds: float) -> str:
    """A duration as Flink's option value; Flink's are whole milliseconds."""
    millis = seconds * 1000
    if abs(millis - round(millis)) > 1e-6:
        raise _refuse(scenario, f"{key} = {millis:g} ms (Flink takes whole milliseconds)")
    return f"{round(millis)}ms"


def _check_all_mapped(scenario: Scenario, section: str, settings: Any, kind: type) -> None:
    """Refuse a setting of `section` that differs from its default and has no Flink option."""
    handled = MAPPED[section] | NOT_APPLICABLE[section]
    for f in fields(kind):
        if f.name not in handled and getattr(settings, f.name) != f.default:
            raise _refuse(scenario, f"{section}.{f.name} (Flink 2.3 has no option for it)")


def _refuse(scenario: Scenario, what: str) -> ReferenceUnsupportedError:
    return ReferenceUnsupportedError(f"{scenario.source_path}: {what}: the Flink reference job cannot run it")


def _pipeline(scenario: Scenario) -> list[StreamNode]:
    """The compiled graph's operators in their order, one per stage: the source first."""
    if scenario.job.program is not None:
        raise _refuse(scenario, f"job.program = {scenario.job.program!r} (only [[job.stages]] scenarios)")
    stages = scenario.job.stages
    unset = {f.name: f.default for f in fields(stages[0])}
    for i, stage in enumerate(stages):
        for key in ("count", "cost_changes", "buffer_timeout"):
            if getattr(stage, key) != unset[key]:
                raise _refuse(scenario, f"{stage_key(i, stage.name)} sets {key}")
    with compile_errors_named(scenario.source_path):
        nodes = sorted(build_program(scenario).get_stream_graph().nodes.values(), key=lambda node: node.id)
    if len(nodes) != len(stages):
        raise _refuse(scenario, f"it compiles to {len(nodes)} operators, not {len(stages)}")
    return nodes


def _source_args(scenario: Scenario, node: StreamNode) -> dict[str, Any]:
    source: GeneratorSource = node.source
    keys = source.keys
    stage = stage_key(0, scenario.job.stages[0].name)
    if keys.kind == "zipf":
        raise _refuse(scenario, f"{stage}: zipf keys")
    size = source.record_size
    if size not in (8, 16) and size < 20:
        raise _refuse(scenario, f"{stage}: record_size {size} (8, 16, or 20 and more: a Long, Tuple2 or Tuple3 "
                                "of Longs and padding)")
    return {"sourceName": node.operator_name.removeprefix("Source: "), "sourceParallelism": node.parallelism,
            "rate": source.rate, "recordSize": size, "keys": keys.num_keys,
            "hotFraction": keys.hot_key_fraction if keys.kind == "hot_key" else -1,
            "sourceSlotSharingGroup": node.slot_sharing_group}


def _flink_options(scenario: Scenario, buffer_timeout: float) -> dict[str, Any]:
    cluster, network, checkpoints = scenario.cluster, scenario.network, scenario.checkpoints
    if scenario.faults:
        raise _refuse(scenario, "[[faults]]")
    _check_all_mapped(scenario, "cluster", cluster, ClusterConfig)
    _check_all_mapped(scenario, "network", network, NetworkSettings)
    _check_all_mapped(scenario, "checkpoints", checkpoints, CheckpointSettings)
    options: dict[str, Any] = {"minicluster.number-of-taskmanagers": cluster.task_managers,
                               "taskmanager.numberOfTaskSlots": cluster.slots_per_task_manager}
    if buffer_timeout < 0:
        options["execution.buffer-timeout.enabled"] = "false"
    else:
        options["execution.buffer-timeout.interval"] = _ms(scenario, "network.buffer_timeout", buffer_timeout)
    for f in fields(NetworkSettings):
        value = getattr(network, f.name)
        if f.name in NETWORK_OPTIONS and value != f.default:
            options[NETWORK_OPTIONS[f.name]] = (
                _ms(scenario, f"network.{f.name}", value) if f.name in ("debloat_target", "debloat_period")
                else f"{value}b" if f.name.endswith("size") else str(value).lower())
    if checkpoints.enabled:
        def ms(key: str) -> str:
            return _ms(scenario, f"checkpoints.{key}", getattr(checkpoints, key))

        options["execution.checkpointing.interval"] = ms("interval")
        options["execution.checkpointing.timeout"] = ms("timeout")
        options["execution.checkpointing.max-concurrent-checkpoints"] = checkpoints.max_concurrent
        options["execution.checkpointing.min-pause"] = ms("min_pause")
        options["execution.checkpointing.tolerable-failed-checkpoints"] = checkpoints.tolerable_failed_checkpoints
        options["execution.checkpointing.checkpoints-after-tasks-finish"] = str(
            checkpoints.checkpoints_after_tasks_finish).lower()
        if checkpoints.mode == "at_least_once":
            options["execution.checkpointing.mode"] = "AT_LEAST_ONCE"
        elif checkpoints.mode == "unaligned":
            options["execution.checkpointing.unaligned.enabled"] = "true"
            options["execution.checkpointing.aligned-checkpoint-timeout"] = ms("aligned_timeout")
        if checkpoints.force_unaligned:
            options["execution.checkpointing.unaligned.forced"] = "true"
    return options


def _cost_nanos(node: StreamNode) -> int:
    return round(node.cost.per_record * 1e9) if node.cost is not None else 0


def job_arg(args: list[str], key: str) -> str:
    """The value of the reference job's argument `key`."""
    return next(arg.partition("=")[2] for arg in args if arg.startswith(f"{key}="))


def latency_operator(args: list[str]) -> str:
    """The operator whose latency histogram the job reports: its sink's writer, named as Flink does."""
    return job_arg(args, f"stage{int(job_arg(args, 'stages')) - 1}Name") + ": Writer"


def _stage_args(scenario: Scenario, i: int, node: StreamNode) -> dict[str, Any]:
    """The arguments of the job's stage `i` (after the source; the last one is the sink)."""
    spec = scenario.job.stages[i + 1]
    stage = stage_key(i + 1, spec.name)
    partitioner = node.in_edges[0].partitioner.name
    if partitioner not in PARTITIONERS:
        raise _refuse(scenario, f"{stage}: partitioner {partitioner}")
    if node.parallelism > JAVA_INT_MAX:
        raise _refuse(scenario, f"{stage}: parallelism = {node.parallelism} (the reference job reads it as a "
                                f"Java int: at most {JAVA_INT_MAX})")
    prefix = f"stage{i}"
    return {f"{prefix}Kind": "sink" if node.sink is not None else node.kind,
            f"{prefix}Selectivity": 1.0 if node.selectivity is None else node.selectivity,
            f"{prefix}FanOut": 1 if node.fan_out is None else node.fan_out,
            f"{prefix}Name": node.operator_name.removesuffix(": Writer"), f"{prefix}Parallelism": node.parallelism,
            f"{prefix}Partitioner": partitioner, f"{prefix}CostNanos": _cost_nanos(node),
            f"{prefix}SlotSharingGroup": node.slot_sharing_group,
            f"{prefix}DisableChaining": str(spec.disable_chaining).lower()}


def reference_args(scenario: Scenario) -> list[str]:
    """The scenario as `key=value` arguments of FlinkReferenceJob (dotted keys: Flink options)."""
    source, *stages = _pipeline(scenario)
    args: dict[str, Any] = {"jobName": scenario.name, **_source_args(scenario, source),
                            "sourceDisableChaining": str(scenario.job.stages[0].disable_chaining).lower(),
                            "stages": len(stages)}
    for i, node in enumerate(stages):
        args |= _stage_args(scenario, i, node)
    args |= _flink_options(scenario, source.buffer_timeout)
    for arg, key in SOURCE_JAVA_INTS.items():
        if args[arg] > JAVA_INT_MAX:
            raise _refuse(scenario, f"{stage_key(0, scenario.job.stages[0].name)}: {key} = {args[arg]} (the "
                                    f"reference job reads it as a Java int: at most {JAVA_INT_MAX})")
    return [f"{key}={value}" for key, value in args.items()]
