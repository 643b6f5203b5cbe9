"""A scenario's job as a DataStream program: a user `program`, or the `[[job.stages]]`.

The environment gets the scenario's job-wide settings (default parallelism, buffer
timeout, checkpointing) before the program adds its pipeline, so a program may still
override them. The graph API takes durations in seconds, as the scenario holds them.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from graph import (
    CheckpointingMode,
    Cost,
    DiscardingSink,
    IllegalArgumentException,
    IllegalStateException,
    JobException,
    KeyDistribution,
    StreamExecutionEnvironment,
    UnsupportedOperationException,
)
from scenarios.scenario_file import KeySpec, Scenario, ScenarioError, StageSpec, stage_key


def build_program(scenario: Scenario) -> StreamExecutionEnvironment:
    """A fresh environment configured from `scenario`, with its job's pipeline added."""
    env = StreamExecutionEnvironment.get_execution_environment()
    _configure(env, scenario)
    if scenario.job.program is not None:
        call_program(_load_program(scenario), env, f"{scenario.source_path}: job.program {scenario.job.program!r}")
    else:
        _add_stages(env, scenario.job.stages, str(scenario.source_path))
    return env


@contextmanager
def compile_errors_named(where: str | Path) -> Iterator[None]:
    """Within: a job the compiler rejects (Flink's exceptions, with Flink's messages) is a
    `ScenarioError` starting with `where`, the scenario file or program that holds the job."""
    try:
        yield
    except (UnsupportedOperationException, IllegalStateException, IllegalArgumentException, JobException) as e:
        raise ScenarioError(f"{where}: the job does not compile: {e}") from None


def _configure(env: StreamExecutionEnvironment, scenario: Scenario) -> None:
    if scenario.job.parallelism is not None:
        env.set_parallelism(scenario.job.parallelism)
    env.set_buffer_timeout(scenario.network.buffer_timeout)
    checkpoints = scenario.checkpoints
    if checkpoints.enabled:
        at_least_once = checkpoints.mode == "at_least_once"
        mode = CheckpointingMode.AT_LEAST_ONCE if at_least_once else CheckpointingMode.EXACTLY_ONCE
        env.enable_checkpointing(checkpoints.interval, mode)
        config = env.get_checkpoint_config()
        config.set_checkpoint_timeout(checkpoints.timeout)
        config.set_max_concurrent_checkpoints(checkpoints.max_concurrent)
        config.set_min_pause_between_checkpoints(checkpoints.min_pause)
        config.enable_checkpoints_after_tasks_finish(checkpoints.checkpoints_after_tasks_finish)
        config.set_tolerable_checkpoint_failure_number(checkpoints.tolerable_failed_checkpoints)
        config.set_force_unaligned_checkpoints(checkpoints.force_unaligned)
        if checkpoints.mode == "unaligned":
            config.enable_unaligned_checkpoints()
            config.set_aligned_checkpoint_timeout(checkpoints.aligned_timeout)


def _load_program(scenario: Scenario) -> Callable[[StreamExecutionEnvironment], Any]:
    """The `module:function` of the scenario, imported with the scenario's folder on sys.path."""
    folder = str(scenario.folder.resolve())
    return load_program(scenario.job.program, f"{scenario.source_path}: job.program", folder)


#: Our own packages: frames in them are not where a user's program went wrong.
_OWN_CODE = tuple(str(Path(__file__).resolve().parents[1] / package) for package in ("graph", "shuffle",
                                                                                       "taskmgr", "scenarios"))


def describe_user_error(exc: BaseException) -> str:
    """`Type: message (file.py, line n)`: the error and the last line of user code it passed."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError):
        return text
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(_OWN_CODE) and not f.filename.startswith("<")]
    if frames:
        text += f" ({Path(frames[-1].filename).name}, line {frames[-1].lineno})"
    return text


def load_program(program: str, where: str, folder: str) -> Callable[[StreamExecutionEnvironment], Any]:
    """The function of a `module:function` program, imported with `folder` first on sys.path;
    every failure is a `ScenarioError` starting with `where`."""
    module_name, _, function_name = program.partition(":")
    sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ScenarioError(f"{where}: cannot import {module_name!r} (from {folder} or sys.path): {e}") from e
    except Exception as e:
        raise ScenarioError(f"{where}: importing {module_name!r} failed: {describe_user_error(e)}") from e
    finally:
        sys.path.remove(folder)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ScenarioError(f"{where}: module {module_name!r} has no function {function_name!r}")
    return function


def call_program(function: Callable[[StreamExecutionEnvironment], Any], env: StreamExecutionEnvironment,
                 where: str) -> None:
    """Run a user's program on `env`; what it raises is a `ScenarioError` starting with `where`
    (programs Flink rejects raise Flink's exceptions from inside the program)."""
    try:
        function(env)
    except Exception as e:
        raise ScenarioError(f"{where} failed: {describe_user_error(e)}") from e
    if not env.transformations:
        raise ScenarioError(f"{where} added no operators to the environment it was given "
                            f"(e.g. env.from_sequence(1, 100).sink_to(DiscardingSink()))")


def _key_distribution(keys: KeySpec) -> KeyDistribution:
    given = {"num_keys": keys.num_keys, "zipf_exponent": keys.exponent, "hot_key_fraction": keys.hot_fraction}
    return KeyDistribution(keys.distribution, **{k: v for k, v in given.items() if v is not None})


def _cost(stage: StageSpec) -> dict[str, Cost]:
    """`cost=` for an operator, if the stage models one."""
    if stage.cost is None and not stage.cost_changes:
        return {}
    changes = tuple((c.start, c.end, c.cost) for c in stage.cost_changes)
    return {"cost": Cost(per_record=stage.cost or 0.0, changes=changes)}


def _record_key(record: Any) -> Any:
    """The key of a synthetic fixed-width record."""
    return record.key


def _source(env: StreamExecutionEnvironment, stage: StageSpec) -> Any:
    given = {"rate": stage.rate, "record_size": stage.record_size, "count": stage.count}
    kwargs = {k: v for k, v in given.items() if v is not None}
    if stage.keys is not None:
        kwargs["keys"] = _key_distribution(stage.keys)
    return env.from_generator(**kwargs)


_PARTITIONERS: dict[str, Callable[[Any], Any]] = {
    "forward": lambda ds: ds.forward(),
    "rebalance": lambda ds: ds.rebalance(),
    "rescale": lambda ds: ds.rescale(),
    "shuffle": lambda ds: ds.shuffle(),
    "broadcast": lambda ds: ds.broadcast(),
    "global": lambda ds: ds.global_(),
    "hash": lambda ds: ds.key_by(_record_key),
}


def _operator(ds: Any, stage: StageSpec) -> Any:
    """`ds` partitioned as the stage says, then the stage's operator."""
    if stage.partitioner is not None and stage.kind != "key_by_reduce":
        ds = _PARTITIONERS[stage.partitioner](ds)
    cost = _cost(stage)
    if stage.kind == "map":
        return ds.map(**cost)
    if stage.kind == "filter":
        return ds.filter(**cost, **({} if stage.selectivity is None else {"selectivity": stage.selectivity}))
    if stage.kind == "flat_map":
        return ds.flat_map(**cost, **({} if stage.fan_out is None else {"fan_out": stage.fan_out}))
    if stage.kind == "key_by_reduce":
        return ds.key_by(_record_key).reduce(**cost)  # each record its key's latest: rows stay rows
    return ds.sink_to(DiscardingSink(), **cost)


def _add_stages(env: StreamExecutionEnvironment, stages: tuple[StageSpec, ...], file: str) -> None:
    """The stages' pipeline; settings the graph API refuses that the scenario file's checks let
    through are a `ScenarioError` naming the file and the stage."""
    ds: Any = None
    for i, stage in enumerate(stages):
        try:
            ds = _add_stage(env, ds, stage)
        except (ValueError, TypeError) as e:
            raise ScenarioError(f"{file}: {stage_key(i, stage.name)}: {e}") from None


def _add_stage(env: StreamExecutionEnvironment, ds: Any, stage: StageSpec) -> Any:
    """`ds` with `stage` added (a source starts a new one)."""
    ds = _source(env, stage) if stage.kind == "source" else _operator(ds, stage)
    if stage.name is not None:
        ds = ds.name(stage.name)
    if stage.parallelism is not None:
        ds = ds.set_parallelism(stage.parallelism)
    if stage.slot_sharing_group is not None:
        ds = ds.slot_sharing_group(stage.slot_sharing_group)
    if stage.disable_chaining:
        ds = ds.disable_chaining()
    if stage.buffer_timeout is not None:
        ds = ds.set_buffer_timeout(stage.buffer_timeout)
    return ds
