"""Scenario files: TOML to typed, frozen settings, with `--set` overrides (also a sweep's).

Every user mistake is one `ScenarioError` naming the file, the key and the value, e.g.
``scenario.toml: network.buffer_timeout: '10 parsecs' is not a duration (e.g. "100ms")``.
Durations, sizes and bandwidths are strings with units, parsed by `graph.units`; inside
the settings they are seconds, bytes and bytes/s. Network defaults are Flink's.

Stage keys (``[[job.stages]]``), a linear pipeline from one source to one sink:

- every stage: ``kind``, ``name``, ``parallelism``, ``slot_sharing_group``,
  ``disable_chaining``; not the sink: ``buffer_timeout`` (a duration; Flink cannot turn
  flushing off for one operator, only ``network.buffer_timeout = "off"`` does);
- not the source: ``partitioner`` (how the stage receives its input: forward, rebalance,
  rescale, shuffle, broadcast, global, hash; absent: as Flink chooses), ``cost``
  (modelled time per record) and ``cost_changes = [{from, to, cost}]``;
- source: ``rate`` (records/s per subtask, 0 = unthrottled), ``record_size`` (bytes, at
  least 8: an 8-byte record is a Long, its own key; keys need 16), ``count`` (records per subtask: a bounded source), ``keys = {distribution, num_keys,
  exponent (zipf), hot_fraction (hot_key)}``;
- filter: ``selectivity``; flat_map: ``fan_out``; key_by_reduce: always hash-partitioned.

Unset optional stage keys are None: the graph API's defaults apply.
"""

from __future__ import annotations

import copy
import difflib
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, NamedTuple

from graph.api.environment import MINIMAL_CHECKPOINT_TIME
from graph.api.workload import KEYED_RECORD_SIZE, MIN_RECORD_SIZE
from taskmgr.checkpointing.checkpoint_costs import CheckpointCosts
from taskmgr.restart_strategy import RestartStrategy
from taskmgr.scheduler import PLACEMENTS
from graph.units import parse_bandwidth, parse_duration, parse_size
from shuffle.config import FRAME_HEADROOM, NetworkConfig


class ScenarioError(ValueError):
    """A scenario or sweep file (or an override) is wrong; the message says where and why."""


class UnknownKeyError(ScenarioError):
    """A key (or an override's key path) that the scenario does not accept, whatever its value;
    `detail` says what is wrong without naming the file (a sweep file names its own)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


class _BadValue(Exception):
    """A value is wrong; the message lacks the file and key (added by the caller)."""


class Where(NamedTuple):
    """The file and dotted key a value comes from, for error messages."""

    file: str
    key: str

    def child(self, name: str) -> Where:
        return Where(self.file, f"{self.key}.{name}" if self.key else name)

    def item(self, index: int) -> Where:
        return Where(self.file, f"{self.key}[{index}]")

    def error(self, message: str, kind: type[ScenarioError] = ScenarioError) -> ScenarioError:
        return kind(f"{self.file}: {self.key}: {message}" if self.key else f"{self.file}: {message}")


def stage_key(index: int, name: str | None) -> str:
    """How messages name a stage: by index, and by name if it has one (`job.stages[3] (Store)`);
    `--set job.stages[3].cost=...` and `--set job.stages[Store].cost=...` both pick it."""
    return f"job.stages[{index}]" + (f" ({name})" if name else "")


def _raw_stage_name(table: Any) -> str | None:
    """The `name` of a stage's raw table, if it is a non-empty string."""
    name = table.get("name") if isinstance(table, dict) else None
    return name if isinstance(name, str) and name else None


Parser = Callable[[Any, Where], Any]


def _show(value: Any) -> str:
    """A value as the user wrote it: strings quoted, booleans as TOML's true/false."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def _leaf(convert: Callable[[Any], Any]) -> Parser:
    """A parser of one value; `convert` raises `_BadValue` with the reason."""

    def parse(value: Any, where: Where) -> Any:
        try:
            return convert(value)
        except _BadValue as e:
            raise where.error(str(e)) from None

    return parse


def _is_plain_number(text: str) -> bool:
    """Whether `text` is a number without a unit ("5", " 2.5 ")."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _with_units(
    parse: Callable[[str], float], what: str, example: str, *, numbers_ok: bool = False
) -> Callable[[Any], float]:
    """A string with units parsed by `parse`; plain integers too if `numbers_ok` (sizes in bytes).

    Without `numbers_ok` a number needs its unit, in a string too: "5" could mean 5 s or 5 ms."""

    def convert(value: Any) -> float:
        if numbers_ok and type(value) is int:
            return value
        if not isinstance(value, str):
            raise _BadValue(f"{_show(value)} is not a {what} (e.g. {example})")
        if not numbers_ok and _is_plain_number(value):
            raise _BadValue(f"{_show(value)} has no unit (e.g. {example})")
        try:
            return parse(value)
        except ValueError:
            raise _BadValue(f"{_show(value)} is not a {what} (e.g. {example})") from None

    return convert


_as_duration = _with_units(parse_duration, "duration", '"100ms"')
_as_size = _with_units(parse_size, "size", '"32kb"', numbers_ok=True)
_as_bandwidth = _with_units(parse_bandwidth, "bandwidth", '"10gbit" or "200mb/s"')


def _at_least(convert: Callable[[Any], float], low: float, *, strict: bool = False,
              shown: str | None = None) -> Callable[[Any], Any]:
    """`convert`, then at least `low` (`shown` says the bound in the file's units)."""

    def checked(value: Any) -> Any:
        result = convert(value)
        if result < low or (strict and result == low):
            raise _BadValue(f"{_show(value)} must be {'>' if strict else '>='} {shown or format(low, 'g')}")
        return result

    return checked


def _quoted(value: Any, *types: type) -> str:
    """A hint for a string holding a TOML literal of `types` ("2", "true"): quotes make it a string."""
    if isinstance(value, str):
        try:
            literal = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            return ""
        if type(literal) in types:
            return " (write it without quotes)"
    return ""


def _as_int(value: Any) -> int:
    if type(value) is not int:
        raise _BadValue(f"{_show(value)} is not an integer{_quoted(value, int)}")
    return value


def _as_number(value: Any) -> float:
    if type(value) not in (int, float):
        raise _BadValue(f"{_show(value)} is not a number{_quoted(value, int, float)}")
    return float(value)


def _as_bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _BadValue(f"{_show(value)} is not true or false{_quoted(value, bool)}")
    return value


def _as_text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _BadValue(f"{_show(value)} is not a non-empty string")
    return value


def _fraction(value: Any) -> float:
    result = _as_number(value)
    if not 0.0 <= result <= 1.0:
        raise _BadValue(f"{_show(value)} must be between 0 and 1")
    return result


def _choice(*options: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in options:
            raise _BadValue(f"{_show(value)} is not one of {', '.join(map(repr, options))}")
        return value

    return convert


def _flush_timeout(value: Any) -> float:
    """A buffer timeout: a duration, or "off" (-1: flush only full buffers, as Flink's -1)."""
    if value == "off":
        return -1.0
    try:
        seconds = _as_duration(value)
    except _BadValue as e:
        raise _BadValue(f'{e} or "off"') from None
    if seconds < 0:
        raise _BadValue(f'{_show(value)} must be >= 0 (or "off": flush only full buffers)')
    return seconds


def _secret(value: Any) -> str:
    """A cluster secret (shuffle.transport.auth); messages never show its value."""
    from shuffle.transport.auth import secret_from_text

    if not isinstance(value, str):
        raise _BadValue("must be a string")
    try:
        secret_from_text(value)
    except ValueError as e:
        raise _BadValue(str(e)) from None
    return value


def _program(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
        raise _BadValue(f'{_show(value)} is not "module:function"')
    module, _, function = value.partition(":")
    if module.endswith(".py"):
        raise _BadValue(f'{_show(value)} names a file: give its module, "{module[:-3]}:{function}"')
    return value


def _operator_flush_timeout(value: Any) -> float:
    """An operator's buffer timeout: a duration (Flink's setBufferTimeout(-1) is the job's)."""
    if value == "off":
        raise _BadValue('"off" is only for network.buffer_timeout: Flink cannot turn flushing off '
                        "for one operator (its setBufferTimeout(-1) means the job's timeout)")
    return _at_least(_as_duration, 0)(value)


DURATION = _leaf(_at_least(_as_duration, 0))
POSITIVE_DURATION = _leaf(_at_least(_as_duration, 0, strict=True))
#: Flink's MINIMAL_CHECKPOINT_TIME: checkpoint intervals and timeouts are at least 10 ms.
_checkpoint_time = _at_least(_as_duration, MINIMAL_CHECKPOINT_TIME, shown='"10ms" (Flink\'s minimum)')
CHECKPOINT_TIME = _leaf(_checkpoint_time)


def _checkpoint_interval(value: Any) -> float | None:
    """A checkpoint interval, or "off" (None: no checkpoints, whatever the section's other keys
    say: a run without checkpoints of a scenario that has them, e.g. `--set`)."""
    if value == "off":
        return None
    return _checkpoint_time(value)


CHECKPOINT_INTERVAL = _leaf(_checkpoint_interval)
FLUSH_TIMEOUT = _leaf(_flush_timeout)
TEXT = _leaf(_as_text)
BOOL = _leaf(_as_bool)
INT = _leaf(_as_int)


def _int_from(low: int) -> Parser:
    return _leaf(_at_least(_as_int, low))


def _size_from(low: int) -> Parser:
    return _leaf(_at_least(_as_size, low))


def _opt(parse: Parser, key: str | None = None) -> dict[str, Any]:
    """Field metadata: the parser of a TOML key (by default the field's name)."""
    return {"parse": parse, "key": key}


def _table(value: Any, where: Where) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise where.error(f"{_show(value)} is not a table")
    return value


def check_keys(table: Mapping[str, Any], known: Iterable[str], where: Where) -> None:
    """A key of `table` not in `known` is an `UnknownKeyError` with a did-you-mean hint."""
    known = list(known)
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {where.child(close[0]).key!r}?" if close else f"known keys: {', '.join(known)}"
            detail = f"unknown key {where.child(key).key!r} ({hint})"
            raise UnknownKeyError(f"{where.file}: {detail}", detail)


def _build(cls: type, table: Any, where: Where, **given: Any) -> Any:
    """An instance of dataclass `cls` from a TOML table, by the parsers in its field metadata.

    `given` are values not read from the table, or defaults the table may override.
    """
    table = _table(table, where)
    specs = {f.metadata.get("key") or f.name: f for f in fields(cls) if "parse" in f.metadata}
    check_keys(table, specs, where)
    for key, f in specs.items():
        required = f.default is MISSING and f.default_factory is MISSING and f.name not in given
        if key not in table and required:
            raise ScenarioError(f"{where.file}: missing key {where.child(key).key!r}")
    parsed = {
        specs[key].name: specs[key].metadata["parse"](value, where.child(key)) for key, value in table.items()
    }
    return cls(**(given | parsed))


def _section(cls: type) -> Parser:
    return lambda value, where: _build(cls, value, where)


# --- settings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterConfig:
    task_managers: int = field(default=1, metadata=_opt(_int_from(1)))
    slots_per_task_manager: int = field(default=1, metadata=_opt(_int_from(1)))
    #: Bytes of network memory per TaskManager; None: the network stack's default (64 MiB).
    network_memory: int | None = field(default=None, metadata=_opt(_size_from(1)))
    #: The secret every connection proves; None: $SHUFFLESIM_SECRET, else random per run.
    secret: str | None = field(default=None, repr=False, metadata=_opt(_leaf(_secret)))
    #: Flink's heartbeat.interval / heartbeat.timeout: a TaskManager silent for the timeout is lost.
    heartbeat_interval: float = field(default=10.0, metadata=_opt(POSITIVE_DURATION))
    heartbeat_timeout: float = field(default=50.0, metadata=_opt(POSITIVE_DURATION))
    #: Flink's task.cancellation.timeout: a cancelled task still running this long after
    #: (user code that ignores interrupts) ends its TaskManager's process; 0: never.
    task_cancellation_timeout: float = field(default=180.0, metadata=_opt(DURATION))
    #: How shared slots land on TaskManagers: "ordered" (one fixed placement) or "random"
    #: (drawn from the seed, as a Flink run picks its own; taskmgr.scheduler).
    placement: str = field(default="ordered", metadata=_opt(_leaf(_choice(*PLACEMENTS))))


#: `[network]` settings of the simulated link and of the virtual clock's flusher: a
#: realtime run (TCP on loopback, real sleeps) does not use them.
SIM_ONLY_NETWORK = ("link_bandwidth", "link_latency", "send_window", "flusher_sleep_overshoot")


@dataclass(frozen=True)
class NetworkSettings:
    """The scenario's `[network]`: fields named as `shuffle.config.NetworkConfig`'s, Flink defaults."""

    buffer_size: int = field(default=32 * 1024, metadata=_opt(_size_from(64)))
    exclusive_buffers_per_channel: int = field(default=2, metadata=_opt(_int_from(0)))
    floating_buffers_per_gate: int = field(default=8, metadata=_opt(_int_from(1)))
    max_buffers_per_channel: int = field(default=10, metadata=_opt(_int_from(1)))
    max_overdraft_buffers_per_gate: int = field(default=20, metadata=_opt(_int_from(0)))
    #: Seconds; 0 flushes after every record, -1 ("off") only full buffers.
    buffer_timeout: float = field(default=0.1, metadata=_opt(FLUSH_TIMEOUT))
    flow_control: str = field(default="credit", metadata=_opt(_leaf(_choice("credit", "tcp"))))
    debloat: bool = field(default=False, metadata=_opt(BOOL))
    #: Debloating (Flink's taskmanager.network.memory.buffer-debloat.*, min/starting segment size).
    debloat_target: float = field(default=1.0, metadata=_opt(POSITIVE_DURATION))
    debloat_period: float = field(default=0.2, metadata=_opt(POSITIVE_DURATION))
    debloat_samples: int = field(default=20, metadata=_opt(_int_from(1)))
    debloat_threshold_percentages: int = field(default=25, metadata=_opt(_int_from(0)))
    min_segment_size: int = field(default=256, metadata=_opt(_size_from(1)))
    starting_segment_size: int = field(default=1024, metadata=_opt(_size_from(1)))
    #: Simulated link (sim mode): 10 Gbit/s in bytes/s, 50 us.
    link_bandwidth: float = field(default=10e9 / 8, metadata=_opt(_leaf(_as_bandwidth)))
    link_latency: float = field(default=50e-6, metadata=_opt(DURATION))
    #: What the output flusher's sleep adds to each period (sim mode; see NetworkConfig).
    flusher_sleep_overshoot: float = field(default=100e-6, metadata=_opt(DURATION))
    #: Bytes a simulated connection holds in flight (its socket buffers); None: autotuned
    #: from bandwidth and latency as Linux does (see NetworkConfig.socket_window).
    send_window: int | None = field(default=None, metadata=_opt(_size_from(1)))
    #: Largest frame a connection accepts; None: 1 MiB, or one buffer plus 64 KiB.
    max_frame_size: int | None = field(default=None, metadata=_opt(_size_from(1)))

    def to_network_config(self, network_memory: int | None = None) -> Any:
        """The `shuffle.config.NetworkConfig` of these settings (plus the cluster's memory).

        A setting the network stack has no field for is an error unless left at its default.
        """
        from shuffle.config import NetworkConfig

        known = {f.name for f in fields(NetworkConfig)}
        kwargs = {f.name: getattr(self, f.name) for f in fields(self) if f.name in known}
        unsupported = [
            f.name for f in fields(self) if f.name not in known and getattr(self, f.name) != f.default
        ]
        if unsupported:
            name = unsupported[0]
            raise ScenarioError(
                f"network.{name} = {_show(getattr(self, name))} is not supported by the network stack yet"
                f" (shuffle.config.NetworkConfig has no {name!r})"
            )
        if network_memory is not None:
            kwargs["network_memory"] = network_memory
        return NetworkConfig(**kwargs)


CHECKPOINT_MODES = ("aligned", "unaligned", "at_least_once")


@dataclass(frozen=True)
class CheckpointSettings:
    """`[checkpoints]`: Flink's checkpoint config, and what a checkpoint costs outside the
    network (`taskmgr.checkpointing.checkpoint_costs`; defaults as measured on Flink 2.3)."""

    #: Seconds between checkpoints; None: no checkpoints.
    interval: float | None = field(default=None, metadata=_opt(CHECKPOINT_INTERVAL))
    mode: str = field(default="aligned", metadata=_opt(_leaf(_choice(*CHECKPOINT_MODES))))
    #: Unaligned mode only: start aligned, switch to unaligned after this long (0: at once).
    aligned_timeout: float = field(default=0.0, metadata=_opt(DURATION))
    timeout: float = field(default=600.0, metadata=_opt(CHECKPOINT_TIME))
    max_concurrent: int = field(default=1, metadata=_opt(_int_from(1)))
    min_pause: float = field(default=0.0, metadata=_opt(DURATION))
    #: Flink's execution.checkpointing.checkpoints-after-tasks-finish (default true).
    checkpoints_after_tasks_finish: bool = field(default=True, metadata=_opt(BOOL))
    #: Flink's execution.checkpointing.tolerable-failed-checkpoints (default 0).
    tolerable_failed_checkpoints: int = field(default=0, metadata=_opt(_int_from(0)))
    #: Flink's execution.checkpointing.unaligned.forced (default false): unaligned checkpoints
    #: for a program with iterations or custom partitioners, which Flink refuses otherwise.
    force_unaligned: bool = field(default=False, metadata=_opt(BOOL))
    trigger_delay: float = field(default=CheckpointCosts.trigger_delay, metadata=_opt(DURATION))
    ack_latency: float = field(default=CheckpointCosts.ack_latency, metadata=_opt(DURATION))
    sync_snapshot: float = field(default=CheckpointCosts.sync_snapshot, metadata=_opt(DURATION))
    async_overhead: float = field(default=CheckpointCosts.async_overhead, metadata=_opt(DURATION))
    upload_bandwidth: float = field(default=CheckpointCosts.upload_bandwidth,
                                    metadata=_opt(_leaf(_as_bandwidth)))
    state_size: int = field(default=CheckpointCosts.state_size, metadata=_opt(_size_from(0)))

    def costs(self) -> CheckpointCosts:
        return CheckpointCosts(self.trigger_delay, self.ack_latency, self.sync_snapshot, self.async_overhead,
                               self.upload_bandwidth, self.state_size)

    @property
    def enabled(self) -> bool:
        return self.interval is not None


def _checkpoints(value: Any, where: Where) -> CheckpointSettings:
    """`[checkpoints]`; a setting without `interval` is an error: checkpointing would stay off
    (unless the interval says "off")."""
    settings = _build(CheckpointSettings, value, where)
    if not settings.enabled and value and value.get("interval") != "off":
        raise where.child(next(iter(value))).error(
            'does nothing without checkpoints.interval (no interval: no checkpoints): give one, e.g. "3s"')
    return settings


RESTART_STRATEGIES = ("none", "fixed_delay", "failure_rate", "exponential_delay")


@dataclass(frozen=True)
class RestartSettings:
    """The scenario's `[restart]`: Flink's restart-strategy.type and its settings
    (taskmgr.restart_strategy); no strategy: Flink's default (exponential_delay with
    checkpoints, none without)."""

    strategy: str | None = field(default=None, metadata=_opt(_leaf(_choice(*RESTART_STRATEGIES))))
    #: fixed_delay: restart-strategy.fixed-delay.attempts (default 1); exponential_delay:
    #: .exponential-delay.attempts-before-reset-backoff (default unlimited).
    attempts: int | None = field(default=None, metadata=_opt(_int_from(0)))
    #: restart-strategy.fixed-delay.delay, restart-strategy.failure-rate.delay.
    delay: float = field(default=1.0, metadata=_opt(DURATION))
    #: restart-strategy.failure-rate.max-failures-per-interval, .failure-rate-interval.
    max_failures_per_interval: int = field(default=1, metadata=_opt(_int_from(1)))
    failure_rate_interval: float = field(default=60.0, metadata=_opt(POSITIVE_DURATION))
    #: restart-strategy.exponential-delay.*: initial-backoff, max-backoff, backoff-multiplier,
    #: reset-backoff-threshold, jitter-factor.
    initial_backoff: float = field(default=1.0, metadata=_opt(POSITIVE_DURATION))
    max_backoff: float = field(default=60.0, metadata=_opt(POSITIVE_DURATION))
    backoff_multiplier: float = field(default=1.5, metadata=_opt(_leaf(_at_least(_as_number, 1, strict=True))))
    reset_backoff_threshold: float = field(default=3600.0, metadata=_opt(POSITIVE_DURATION))
    jitter_factor: float = field(default=0.1, metadata=_opt(_leaf(_fraction)))


#: The `[restart]` keys each strategy reads (Flink's restart-strategy.<type>.* options).
RESTART_KEYS = {
    "none": (),
    "fixed_delay": ("attempts", "delay"),
    "failure_rate": ("max_failures_per_interval", "failure_rate_interval", "delay"),
    "exponential_delay": ("attempts", "initial_backoff", "max_backoff", "backoff_multiplier",
                          "reset_backoff_threshold", "jitter_factor"),
}


def _check_restart_keys(restart: RestartSettings, checkpointing: bool, table: Mapping[str, Any],
                        where: Where) -> None:
    """A `[restart]` key the job's strategy does not read is an error: it would do nothing.
    Without a strategy that is every key: Flink's default strategy takes its default
    settings (RestartBackoffTimeStrategyFactoryLoader reads restart-strategy.<type>.* only
    for the type set)."""
    strategy = restart.strategy or ("exponential_delay" if checkpointing else "none")
    for key in table:
        if key == "strategy":
            continue
        owners = ", ".join(name for name, keys in RESTART_KEYS.items() if key in keys)
        if not restart.strategy:
            raise where.child(key).error(
                f"Flink's default strategy {'with' if checkpointing else 'without'} checkpoints, {strategy!r}, "
                f"takes its default settings and does not read it (a setting of {owners}): set restart.strategy")
        if key not in RESTART_KEYS[strategy]:
            raise where.child(key).error(f"the {strategy!r} strategy does not use it (a setting of {owners})")


@dataclass(frozen=True)
class MetricsSettings:
    sample_period: float = field(default=1.0, metadata=_opt(POSITIVE_DURATION))


KEY_DISTRIBUTIONS = ("uniform", "zipf", "hot_key")


@dataclass(frozen=True)
class KeySpec:
    """Keys of a generator source (`graph.KeyDistribution`); None: the API's default."""

    distribution: str = field(default="uniform", metadata=_opt(_leaf(_choice(*KEY_DISTRIBUTIONS))))
    num_keys: int | None = field(default=None, metadata=_opt(_int_from(1)))
    exponent: float | None = field(default=None, metadata=_opt(_leaf(_at_least(_as_number, 0, strict=True))))
    hot_fraction: float | None = field(default=None, metadata=_opt(_leaf(_fraction)))


_KEY_ONLY_FOR = {"exponent": "zipf", "hot_fraction": "hot_key"}


def _keys(value: Any, where: Where) -> KeySpec:
    spec = _build(KeySpec, value, where)
    for key, distribution in _KEY_ONLY_FOR.items():
        if key in value and spec.distribution != distribution:
            raise where.child(key).error(f'only for distribution = "{distribution}"')
    return spec


@dataclass(frozen=True)
class CostChange:
    """From `start` to `end` seconds of the run, records cost `cost` seconds each."""

    start: float = field(metadata=_opt(DURATION, key="from"))
    end: float = field(metadata=_opt(DURATION, key="to"))
    cost: float = field(metadata=_opt(DURATION))


def _cost_changes(value: Any, where: Where) -> tuple[CostChange, ...]:
    if not isinstance(value, list):
        raise where.error(f'{_show(value)} is not a list like [{{from = "10s", to = "20s", cost = "50ms"}}]')
    changes = tuple(_build(CostChange, item, where.item(i)) for i, item in enumerate(value))
    for i, change in enumerate(changes):
        if change.end <= change.start:
            raise where.item(i).error("'to' must be after 'from'")
        for j, other in enumerate(changes[:i]):
            if change.start < other.end and other.start < change.end:
                raise where.item(i).error(f"overlaps cost_changes[{j}]")
    return changes


STAGE_KINDS = ("source", "map", "filter", "flat_map", "key_by_reduce", "sink")
PARTITIONERS = ("forward", "rebalance", "rescale", "shuffle", "broadcast", "global", "hash")
_COMMON_KEYS = {"kind", "name", "parallelism", "slot_sharing_group", "disable_chaining"}
_SINK_KEYS = _COMMON_KEYS | {"partitioner", "cost", "cost_changes"}
_OPERATOR_KEYS = _SINK_KEYS | {"buffer_timeout"}
_STAGE_KEYS = {
    "source": _COMMON_KEYS | {"rate", "record_size", "count", "keys", "buffer_timeout"},
    "map": _OPERATOR_KEYS,
    "filter": _OPERATOR_KEYS | {"selectivity"},
    "flat_map": _OPERATOR_KEYS | {"fan_out"},
    "key_by_reduce": _OPERATOR_KEYS,
    "sink": _SINK_KEYS,
}


#: Records/s a generator subtask may be paced at: a faster pace is a typo, not a study (its
#: pacing steps would hold billions of records: 1e12 exhausted 20 GB of memory).
MAX_RATE = 1e9


def _rate(value: Any) -> float:
    rate = _at_least(_as_number, 0)(value)
    if rate > MAX_RATE:
        raise _BadValue(f"{_show(value)} is more than {MAX_RATE:.0e} records/s per subtask "
                        "(0: as fast as downstream allows)")
    return rate


@dataclass(frozen=True)
class StageSpec:
    """One stage of a linear pipeline; None: not set (the graph API's default applies)."""

    kind: str = field(metadata=_opt(_leaf(_choice(*STAGE_KINDS))))
    name: str | None = field(default=None, metadata=_opt(TEXT))
    parallelism: int | None = field(default=None, metadata=_opt(_int_from(1)))
    rate: float | None = field(default=None, metadata=_opt(_leaf(_rate)))
    record_size: int | None = field(default=None, metadata=_opt(_size_from(MIN_RECORD_SIZE)))
    count: int | None = field(default=None, metadata=_opt(_int_from(1)))
    keys: KeySpec | None = field(default=None, metadata=_opt(_keys))
    cost: float | None = field(default=None, metadata=_opt(DURATION))
    cost_changes: tuple[CostChange, ...] = field(default=(), metadata=_opt(_cost_changes))
    selectivity: float | None = field(default=None, metadata=_opt(_leaf(_fraction)))
    fan_out: int | None = field(default=None, metadata=_opt(_int_from(0)))
    partitioner: str | None = field(default=None, metadata=_opt(_leaf(_choice(*PARTITIONERS))))
    slot_sharing_group: str | None = field(default=None, metadata=_opt(TEXT))
    disable_chaining: bool = field(default=False, metadata=_opt(BOOL))
    #: Seconds; None: the job's buffer timeout.
    buffer_timeout: float | None = field(default=None, metadata=_opt(_leaf(_operator_flush_timeout)))


def _stage(value: Any, where: Where) -> StageSpec:
    # Keys before values: a key the stage's kind does not take is wrong whatever its value.
    table = _table(value, where)
    check_keys(table, [f.name for f in fields(StageSpec)], where)
    for key in table:
        if table.get("kind") in _STAGE_KEYS and key not in _STAGE_KEYS[table["kind"]]:
            raise where.child(key).error(f"a {table['kind']!r} stage takes no {key!r}", UnknownKeyError)
    stage = _build(StageSpec, table, where)
    if stage.kind == "key_by_reduce" and stage.partitioner not in (None, "hash"):
        raise where.child("partitioner").error("a 'key_by_reduce' stage is always hash-partitioned")
    if stage.keys is not None and stage.record_size is not None and stage.record_size < KEYED_RECORD_SIZE:
        raise where.child("record_size").error(
            f"{stage.record_size} leaves no room for keys (a record of {stage.record_size} bytes is its own key, "
            f"a Long): with 'keys' it must be >= {KEYED_RECORD_SIZE}")
    return stage


def _stages(value: Any, where: Where) -> tuple[StageSpec, ...]:
    if not isinstance(value, list) or not value:
        raise where.error("expected [[job.stages]] tables, a source first and a sink last")
    stages = tuple(_stage(item, Where(where.file, stage_key(i, _raw_stage_name(item))))
                   for i, item in enumerate(value))
    kinds = [s.kind for s in stages]
    if kinds[0] != "source" or "source" in kinds[1:]:
        raise where.error("the first stage, and only the first, must be a 'source'")
    if len(kinds) < 2 or kinds[-1] != "sink" or "sink" in kinds[:-1]:
        raise where.error("the last stage, and only the last, must be a 'sink'")
    first_named: dict[str, int] = {}
    for i, stage in enumerate(stages):
        if stage.name is not None and first_named.setdefault(stage.name, i) != i:
            raise Where(where.file, stage_key(i, stage.name)).child("name").error(
                f"{stage.name!r} is also the name of {stage_key(first_named[stage.name], stage.name)}: stage "
                "names must differ (job.stages[NAME] picks a stage by its name)")
    return stages


@dataclass(frozen=True)
class JobSpec:
    """Either `program` ("module:function" taking a StreamExecutionEnvironment) or `stages`."""

    program: str | None = field(default=None, metadata=_opt(_leaf(_program)))
    stages: tuple[StageSpec, ...] = field(default=(), metadata=_opt(_stages))
    #: Default parallelism of the job's operators; None: the environment's default.
    parallelism: int | None = field(default=None, metadata=_opt(_int_from(1)))


def _job(value: Any, where: Where) -> JobSpec:
    job = _build(JobSpec, value, where)
    if (job.program is None) == (not job.stages):
        raise where.error("give either 'program' or [[job.stages]], not both or neither")
    return job


#: Per fault kind: the keys it needs, and the ones it may have (besides `at` and `kind`).
FAULT_KEYS = {
    "kill_task_manager": ({"task_manager"}, set()),
    "drop_connection": ({"between"}, set()),
    "pause_link": ({"between", "duration"}, set()),
    "slow_link": ({"between", "duration", "bandwidth"}, {"latency"}),
    "pause_task": ({"vertex", "duration"}, {"subtask"}),
    "block_task": ({"vertex", "duration"}, {"subtask"}),
    "fail_task": ({"vertex"}, {"subtask", "message"}),
    "corrupt_frame": ({"between"}, set()),
}


def _task_manager_pair(value: Any, where: Where) -> tuple[str, str]:
    if (not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value)
            or value[0] == value[1]):
        raise where.error(f'{_show(value)} is not two TaskManagers, like ["tm-0", "tm-1"]')
    return value[0], value[1]


@dataclass(frozen=True)
class FaultSpec:
    """One `[[faults]]` table: what happens (`kind`) and when (`at`, after the job starts)."""

    at: float = field(metadata=_opt(DURATION))
    kind: str = field(metadata=_opt(_leaf(_choice(*FAULT_KEYS))))
    task_manager: str | None = field(default=None, metadata=_opt(TEXT))
    between: tuple[str, str] | None = field(default=None, metadata=_opt(_task_manager_pair))
    vertex: str | None = field(default=None, metadata=_opt(TEXT))
    subtask: int = field(default=0, metadata=_opt(_int_from(0)))
    duration: float = field(default=0.0, metadata=_opt(POSITIVE_DURATION))
    bandwidth: float | None = field(default=None, metadata=_opt(_leaf(_as_bandwidth)))
    latency: float | None = field(default=None, metadata=_opt(DURATION))
    message: str = field(default="injected failure", metadata=_opt(TEXT))


def _faults(value: Any, where: Where) -> tuple[FaultSpec, ...]:
    if not isinstance(value, list):
        raise where.error('expected [[faults]] tables, like at = "12s", kind = "kill_task_manager"')
    faults = []
    for i, item in enumerate(value):
        fault = _build(FaultSpec, item, where.item(i))
        required, optional = FAULT_KEYS[fault.kind]
        for key in item:
            if key not in required | optional | {"at", "kind"}:
                raise where.item(i).child(key).error(f"a {fault.kind!r} fault takes no {key!r}")
        for key in sorted(required - set(item)):
            raise where.item(i).error(f"a {fault.kind!r} fault needs {key!r}")
        faults.append(fault)
    return tuple(faults)


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file. Times in seconds, sizes in bytes."""

    source_path: Path
    #: Default: the file's name without ".toml".
    name: str = field(metadata=_opt(TEXT))
    duration: float = field(metadata=_opt(POSITIVE_DURATION))
    job: JobSpec = field(metadata=_opt(_job))
    seed: int = field(default=0, metadata=_opt(INT))
    mode: str = field(default="sim", metadata=_opt(_leaf(_choice("sim", "realtime"))))
    cluster: ClusterConfig = field(default_factory=ClusterConfig, metadata=_opt(_section(ClusterConfig)))
    network: NetworkSettings = field(
        default_factory=NetworkSettings, metadata=_opt(_section(NetworkSettings))
    )
    checkpoints: CheckpointSettings = field(default_factory=CheckpointSettings, metadata=_opt(_checkpoints))
    metrics: MetricsSettings = field(
        default_factory=MetricsSettings, metadata=_opt(_section(MetricsSettings))
    )
    restart: RestartSettings = field(default_factory=RestartSettings, metadata=_opt(_section(RestartSettings)))
    faults: tuple[FaultSpec, ...] = field(default=(), metadata=_opt(_faults))

    def restart_strategy(self) -> RestartStrategy:
        """`[restart]` as the runtime's strategy; a `ScenarioError` naming the keys if they do
        not fit together."""
        try:
            return RestartStrategy(**asdict(self.restart))
        except ValueError as e:
            raise ScenarioError(f"{self.source_path}: [restart]: {e}") from None

    def unused_settings(self) -> list[str]:
        """The keys set away from their defaults that this scenario's mode does not use
        (the simulated link's in a realtime run)."""
        if self.mode == "sim":
            return []
        return [f"network.{f.name}" for f in fields(NetworkSettings)
                if f.name in SIM_ONLY_NETWORK and getattr(self.network, f.name) != f.default]

    @property
    def folder(self) -> Path:
        """The scenario file's folder: relative paths (programs) resolve against it."""
        return self.source_path.parent

    def network_config(self) -> Any:
        """The `shuffle.config.NetworkConfig` every TaskManager of this scenario uses."""
        try:
            return self.network.to_network_config(self.cluster.network_memory)
        except ScenarioError as e:
            raise ScenarioError(f"{self.source_path}: {e}") from None


#: What summary.json and the report show for a secret that was set (`[cluster] secret`).
HIDDEN = "(hidden)"


def settings_of(value: Any) -> Any:
    """Settings as plain JSON values keyed as in scenario files (defaults included; times in
    seconds, sizes in bytes, bandwidth in bytes/s; None: not set, the API's default applies).
    A secret (a field kept out of its repr) shows as `HIDDEN`: whoever holds it can run code
    in the cluster's TaskManagers, and run outputs are shared."""
    if is_dataclass(value):
        return {f.metadata.get("key") or f.name: _shown(f, getattr(value, f.name))
                for f in fields(value) if "parse" in f.metadata}
    if isinstance(value, tuple):
        return [settings_of(item) for item in value]
    return value


def _shown(field_: Any, value: Any) -> Any:
    if not field_.repr and value is not None:
        return HIDDEN
    return settings_of(value)


#: Metric samples a run may take (duration / metrics.sample_period): more is a typo, not a study.
MAX_SAMPLES = 100_000


def _scenario(raw: Mapping[str, Any], path: Path) -> Scenario:
    where = Where(str(path), "")
    if "scenario" in raw and ("grid" in raw or "points" in raw):
        raise where.error("this is a sweep file (it has 'scenario' and a [grid] or [[points]]): "
                          "run it with 'shufflesim sweep'")
    scenario = _build(Scenario, raw, where, source_path=path, name=path.stem)
    _check_restart_keys(scenario.restart, scenario.checkpoints.enabled, raw.get("restart", {}), where.child("restart"))
    samples = scenario.duration / scenario.metrics.sample_period
    if samples > MAX_SAMPLES:
        raise where.child("metrics.sample_period").error(
            f"a duration of {scenario.duration:g} s sampled every {scenario.metrics.sample_period:g} s is "
            f"{samples:.3g} samples, at most {MAX_SAMPLES:,} are allowed: lengthen metrics.sample_period "
            f"or shorten duration")
    if scenario.metrics.sample_period > scenario.duration:
        raise where.child("metrics.sample_period").error(
            f"{scenario.metrics.sample_period:g} s is longer than the run (duration {scenario.duration:g} s): it "
            f"would take one sample, at its end, start-up included, for the steady state of its second half: "
            f"make it at most the duration")
    memory = scenario.cluster.network_memory
    if memory is not None and memory < scenario.network.buffer_size:
        raise where.child("cluster.network_memory").error(
            f"must hold at least one buffer ({scenario.network.buffer_size} bytes)"
        )
    if memory is None and NetworkConfig.network_memory < scenario.network.buffer_size:
        raise where.child("network.buffer_size").error(
            f"{scenario.network.buffer_size} bytes is more than a TaskManager's network memory "
            f"(cluster.network_memory, by default {NetworkConfig.network_memory} bytes)")
    frame_size = scenario.network.max_frame_size
    if frame_size is not None and frame_size < scenario.network.buffer_size + FRAME_HEADROOM:
        raise where.child("network.max_frame_size").error(
            f"must hold one buffer plus {FRAME_HEADROOM} bytes of headers "
            f"({scenario.network.buffer_size + FRAME_HEADROOM} bytes)"
        )
    _check_segment_sizes(scenario.network, where.child("network"))
    return scenario


def _check_segment_sizes(network: NetworkSettings, where: Where) -> None:
    """Debloated sizes lie in [min_segment_size, buffer_size], and start inside it."""
    if not network.debloat:
        return
    if network.min_segment_size > network.buffer_size:
        raise where.child("min_segment_size").error(
            f"must not exceed buffer_size ({network.buffer_size} bytes), got {network.min_segment_size}")
    if not network.min_segment_size <= network.starting_segment_size <= network.buffer_size:
        raise where.child("starting_segment_size").error(
            f"must lie between min_segment_size ({network.min_segment_size}) and buffer_size "
            f"({network.buffer_size}) bytes, got {network.starting_segment_size}")


# --- reading files and overrides ---------------------------------------------------------


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict; an unreadable or invalid file is a `ScenarioError` naming it."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{path}: invalid TOML: {e}") from None


_KEY_TOKEN = re.compile(r"(\.?)([^.\[\]]+)|\[([^\]]+)\]")


def _split_key(key: str) -> list[str]:
    """`job.stages[Slow.Map].cost` -> ['job', 'stages', '[Slow.Map]', 'cost']."""
    parts: list[str] = []
    pos = 0
    while pos < len(key):
        match = _KEY_TOKEN.match(key, pos)
        if not match or (match[2] is not None and bool(match[1]) != (pos > 0)):
            raise _BadValue(f"{key!r} is not a key like 'network.buffer_timeout' or 'job.stages[1].cost'")
        parts.append(match[2] if match[2] is not None else f"[{match[3]}]")
        pos = match.end()
    if not parts:
        raise _BadValue("the key is empty")
    return parts


def _join_key(parts: list[str]) -> str:
    """['job', 'stages', '[1]'] -> 'job.stages[1]' (the inverse of `_split_key`)."""
    return "".join(part if part.startswith("[") or i == 0 else f".{part}" for i, part in enumerate(parts))


def _select_item(items: Any, selector: str, path: str) -> dict[str, Any]:
    """The table `path[selector]` of a list of tables (job.stages, faults): by index, or by name."""
    if not isinstance(items, list):
        raise _BadValue(f"{path!r} is not a list of tables in the scenario")
    if selector.isdigit():
        if int(selector) >= len(items):
            raise _BadValue(f"there is no {path}[{selector}] (the scenario has {len(items)}, numbered from 0)")
        return items[int(selector)]
    named = {item["name"]: item for item in items if isinstance(item, dict) and isinstance(item.get("name"), str)}
    if selector in named:
        return named[selector]
    close = difflib.get_close_matches(selector, named, n=1)
    hint = (f"did you mean {close[0]!r}?" if close else f"names: {', '.join(named)}" if named
            else f"give an index from 0 to {len(items) - 1}" if items else "the list is empty")
    raise _BadValue(f"there is no {path}[{selector}] ({hint})")


def _set(raw: dict[str, Any], key: str, value: Any) -> str:
    """Set a dotted key in a raw scenario dict, creating tables on the way; the key with items
    by index ('job.stages[1].cost' for 'job.stages[SlowMap].cost'; `_as_shown` names the stage
    as messages do)."""
    parts = _split_key(key)
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        if part.startswith("["):
            item = _select_item(node, part[1:-1], _join_key(parts[:i]))
            parts[i] = f"[{next(j for j, other in enumerate(node) if other is item)}]"
            node = item
            continue
        if parts[i + 1].startswith("["):
            node = node.get(part) if isinstance(node, dict) else None
            continue
        node = node.setdefault(part, {}) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise _BadValue(f"{'.'.join(parts[: i + 1])!r} is not a table")
    if parts[-1].startswith("[") or not isinstance(node, dict):
        raise _BadValue(f"{key!r} does not name a value")
    node[parts[-1]] = value
    return _join_key(parts)


def parse_override(item: str) -> tuple[str, Any]:
    """`"network.buffer_timeout=10ms"` -> (key, value): a TOML literal if it is one, else the string."""
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise ScenarioError(f"--set {item!r}: expected KEY=VALUE, e.g. network.buffer_timeout=10ms")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    return key.strip(), value


#: Scenario keys whose value is a table (a source's keys = {...}): set whole, not key by key.
TABLE_VALUED = ("keys",)


def flatten_overrides(overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`overrides` with table values flattened into dotted keys: a table sets each of its keys.

    `network = {buffer_size = "8kb"}` (or a bare dotted key in a sweep file, a nested table in
    TOML) sets network.buffer_size and keeps the rest of the scenario's [network], in `--set`
    and in sweeps alike; a source's `keys` table (`TABLE_VALUED`) is set whole.
    """
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted.rpartition(".")[2] not in TABLE_VALUED:
            flat |= flatten_overrides(value, f"{dotted}.")
        else:
            flat[dotted] = value
    return flat


def _apply(raw: Mapping[str, Any], overrides: Mapping[str, Any], origin: str,
           named: dict[str, str] | None = None) -> dict[str, Any]:
    """A copy of `raw` with `overrides`; `named` (if given) gets, per override, the key as error
    messages name it -> where it came from ("--set KEY")."""
    result = copy.deepcopy(dict(raw))
    for given, table_or_value in overrides.items():
        for key, value in flatten_overrides({given: table_or_value}).items():
            try:
                resolved = _set(result, key, value)
            except _BadValue as e:
                raise UnknownKeyError(f"{origin} {key}={_show(value)}: {e}", str(e)) from None
            if named is not None:
                named[resolved] = f"{origin} {given}"  # no value: the message shows it, unless it is a secret
    return result


def apply_overrides(raw: Mapping[str, Any], overrides: Iterable[str],
                    named: dict[str, str] | None = None) -> dict[str, Any]:
    """A copy of a raw scenario dict with `--set KEY=VALUE` items applied (validated on load);
    `named` as `_apply`'s."""
    return _apply(raw, dict(parse_override(item) for item in overrides), "--set", named)


def scenario_from_raw(raw: Mapping[str, Any], path: Path, overrides: Mapping[str, Any],
                      origin: str = "--set") -> Scenario:
    """The scenario of a raw scenario dict (read from `path`) with `overrides` (key -> TOML value).

    Errors name `path`, and `origin` and the override where it gave the value (or a key path
    that leads nowhere).
    """
    named: dict[str, str] = {}
    return _validated(_apply(raw, overrides, origin, named), Path(path), named)


def load_scenario(path: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read, override (`--set KEY=VALUE` items) and validate a scenario file."""
    path = Path(path)
    named: dict[str, str] = {}
    raw = apply_overrides(read_toml(path), overrides, named)
    return _validated(raw, path, named)


def _validated(raw: Mapping[str, Any], path: Path, named: Mapping[str, str]) -> Scenario:
    """`_scenario`, its error ending with where an override's value came from (`named` as `_apply`'s)."""
    try:
        return _scenario(raw, path)
    except ScenarioError as e:
        named = {_as_shown(raw, key): item for key, item in named.items()}
        # The file does not hold a value an override gave: say where it came from.
        given = [item for key, item in named.items()
                 if any(f"{before}{key}{after}" in str(e) for before in " '" for after in ":.'")]
        if given:
            raise _with_note(e, f"(from {', '.join(given)})") from None
        # A value of the file that an override beside it made wrong (keys.distribution
        # overridden, the file's keys.hot_fraction refused): name the override too.
        beside = [item for key, item in named.items()
                  if "." in key and any(f"{before}{key.rpartition('.')[0]}." in str(e) for before in " '")]
        if beside:
            raise _with_note(e, f"(a value of the file, beside {', '.join(beside)})") from None
        raise


_STAGE_BY_INDEX = re.compile(r"job\.stages\[(\d+)\]")


def _as_shown(raw: Mapping[str, Any], key: str) -> str:
    """A key of `_set` as messages name it: a stage with its name (`stage_key`), from `raw`."""
    match = _STAGE_BY_INDEX.match(key)
    if match is None:
        return key
    job = raw.get("job")
    stages = job.get("stages") if isinstance(job, dict) else None
    index = int(match[1])
    table = stages[index] if isinstance(stages, list) and index < len(stages) else None
    return stage_key(index, _raw_stage_name(table)) + key[match.end():]


def _with_note(error: ScenarioError, note: str) -> ScenarioError:
    """The same error with `note` after its message (an unknown key keeps its detail)."""
    if isinstance(error, UnknownKeyError):
        return UnknownKeyError(f"{error} {note}", error.detail)
    return type(error)(f"{error} {note}")


def show_value(value: Any) -> str:
    """A TOML value as written: strings bare, booleans as true/false, numbers as Python prints them."""
    return value if isinstance(value, str) else _show(value)
