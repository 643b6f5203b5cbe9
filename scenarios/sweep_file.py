"""Sweep files: a base scenario and the overrides of each point, validated before anything runs.

A sweep file (TOML)::

    scenario = "../slow-map.toml"            # relative to the sweep file
    seeds = [1, 2, 3]                        # optional: every point once per seed

    [grid]                                   # the cartesian product, the last key fastest
    "network.buffer_timeout" = ["1ms", "10ms", "100ms"]
    "job.stages[SlowMap].cost" = ["1ms", "5ms"]

    [[points]]                               # optional: explicit points after the grid's
    "network.buffer_timeout" = "off"
    duration = "10s"

Keys are those of `shufflesim run --set`. A key the scenario does not accept (whatever
its value) is an error of the sweep file; a value the scenario rejects only makes its
point invalid: that point is reported, the others run.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scenarios.scenario_file import (
    Scenario,
    ScenarioError,
    UnknownKeyError,
    Where,
    check_keys,
    flatten_overrides,
    read_toml,
    scenario_from_raw,
    show_value,
)

SWEEP_KEYS = ("scenario", "seeds", "grid", "points")


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: its id, seed (None if the point's own seed is invalid) and overrides."""

    id: str
    seed: int | None
    #: Dotted key -> the TOML value (as `--set` parses it).
    overrides: Mapping[str, Any]

    def written(self) -> dict[str, str]:
        """The overrides' values as written in the sweep file (the results' key columns)."""
        return {key: show_value(value) for key, value in self.overrides.items()}


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file: the base scenario (raw TOML) and its points, in run order."""

    source_path: Path
    scenario_path: Path
    scenario_raw: Mapping[str, Any]
    #: The swept keys, in the order they first appear in the file.
    keys: tuple[str, ...]
    points: tuple[SweepPoint, ...]

    def scenario(self, point: SweepPoint) -> Scenario:
        """The scenario of `point` (a `ScenarioError` if its overrides are invalid)."""
        return scenario_from_raw(self.scenario_raw, self.scenario_path, point.overrides,
                                 origin=f"{self.source_path}: point {point.id}")


def _list(value: Any, where: Where, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise where.error(f"must be a non-empty list of {what}")
    return value


def _grid(value: Any, where: Where) -> list[dict[str, Any]]:
    if not isinstance(value, dict):
        raise where.error("must be a table of keys, each with a list of values")
    if not value:
        raise where.error("is empty: give at least one key with a list of values")
    value = flatten_overrides(value)
    columns = [_list(values, Where(where.file, f"grid {key!r}"), "values") for key, values in value.items()]
    # a table among a key's values sets each of its keys, as a table value of [[points]] does
    return [flatten_overrides(dict(zip(value, combo))) for combo in itertools.product(*columns)]


def _explicit_points(value: Any, where: Where) -> list[dict[str, Any]]:
    points = _list(value, where, "[[points]] tables")
    for i, point in enumerate(points):
        if not isinstance(point, dict):
            raise where.item(i).error("must be a table of overrides, e.g. \"network.buffer_timeout\" = \"1ms\"")
    return [flatten_overrides(point) for point in points]


def _seeds(value: Any, where: Where) -> list[int]:
    seeds = _list(value, where, "integers")
    if any(type(seed) is not int for seed in seeds) or len(set(seeds)) != len(seeds):
        raise where.error("must be distinct integers")
    return seeds


def _check_key(raw: Mapping[str, Any], scenario_path: Path, key: str, values: list[Any], where: Where) -> None:
    """A key the scenario does not accept is the sweep file's error (tried alone, with each value)."""
    for value in values:
        try:
            scenario_from_raw(raw, scenario_path, {key: value}, origin=f"{scenario_path}:")
        except UnknownKeyError as e:
            raise where.error(f"{key!r}: not in {scenario_path.name}: {e.detail}") from None
        except ScenarioError:
            pass  # a bad value: only its points are invalid


def _point_ids(count: int, seeds: list[int] | None) -> list[str]:
    width = max(2, len(str(count - 1)))
    if seeds is None:
        return [f"p{i:0{width}d}" for i in range(count)]
    return [f"p{i:0{width}d}-s{seed}" for i in range(count) for seed in seeds]


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file (its scenario too); errors name the sweep file."""
    path = Path(path)
    where = Where(str(path), "")
    raw = read_toml(path)
    if "scenario" not in raw and ("duration" in raw or "job" in raw):
        raise where.error("this is a scenario file: run it with 'shufflesim run', "
                          "or name it in a sweep file's scenario = \"...\"")
    check_keys(raw, SWEEP_KEYS, where)
    if "scenario" not in raw:
        raise where.error("missing key 'scenario' (the scenario file the sweep varies)")
    if "grid" not in raw and "points" not in raw:
        raise where.error("give a [grid] of keys with lists of values, or [[points]] tables")
    if not isinstance(raw["scenario"], str) or not raw["scenario"]:
        raise where.child("scenario").error(f"{show_value(raw['scenario'])!r} is not a file name")
    scenario_path = Path(os.path.normpath(path.parent / raw["scenario"]))
    try:
        scenario_raw = read_toml(scenario_path)
        base = scenario_from_raw(scenario_raw, scenario_path, {})
    except ScenarioError as e:
        raise where.child("scenario").error(str(e)) from None
    combos = _grid(raw["grid"], where.child("grid")) if "grid" in raw else []
    combos += _explicit_points(raw["points"], where.child("points")) if "points" in raw else []
    seeds = _seeds(raw["seeds"], where.child("seeds")) if "seeds" in raw else None
    keys = tuple(dict.fromkeys(key for combo in combos for key in combo))
    if seeds is not None and "seed" in keys:
        raise where.child("seeds").error("the points set 'seed' too: give seeds in one place")
    if "mode" in keys or base.mode != "sim":
        raise where.error("sweeps run in sim mode (virtual time): leave 'mode' at \"sim\"")
    for key in keys:
        values = [combo[key] for combo in combos if key in combo]
        _check_key(scenario_raw, scenario_path, key, values, where)
    overrides = combos if seeds is None else [combo | {"seed": s} for combo in combos for s in seeds]
    points = tuple(
        SweepPoint(point_id, _seed_of(point, base.seed), point)
        for point_id, point in zip(_point_ids(len(combos), seeds), overrides)
    )
    return Sweep(path, scenario_path, scenario_raw, keys, points)


def _seed_of(overrides: Mapping[str, Any], default: int) -> int | None:
    seed = overrides.get("seed", default)
    return seed if type(seed) is int else None
