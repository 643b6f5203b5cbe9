"""`shufflesim bench`: performance figures, one JSON object per line.

A figure is a function registered with `register_figure("name")` that returns a list of
dicts, each at least `{"figure": NAME, "value": X}` (a function may return several related
figures). Packages below scenarios cannot import this module: their figure functions are
registered here, one line each: `register_figure("name")(module.function)`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from graph import Cost, DiscardingSink, StreamExecutionEnvironment
from scenarios import bench_network, bench_scale, bench_sweep
from taskmgr.cluster import execute

Figure = Callable[[], Iterable[dict[str, Any]]]

FIGURES: dict[str, Figure] = {}
#: A figure a function returns beside its own -> the name that function is registered under.
ALSO: dict[str, str] = {}


def register_figure(name: str, also: tuple[str, ...] = ()) -> Callable[[Figure], Figure]:
    """Register a figure function under `name`; `also` names the other figures it returns,
    which name it too (`shufflesim bench virtual_to_wall` runs keyed_shuffle_records_per_s)."""
    def register(fn: Figure) -> Figure:
        for each in (name, *also):
            if each in FIGURES or each in ALSO:
                raise ValueError(f"figure {each!r} registered twice")
        FIGURES[name] = fn
        ALSO.update(dict.fromkeys(also, name))
        return fn
    return register


def run_figures(names: list[str] | None = None,
                on_start: Callable[[str, int, int], None] | None = None) -> Iterator[dict[str, Any]]:
    """Compute the named figures (all when None), in registration order; `on_start(name, k,
    n)` is told before the k-th of the n figure functions runs."""
    unknown = [name for name in names or () if name not in FIGURES and name not in ALSO]
    if unknown:
        raise KeyError(f"unknown figure {unknown[0]!r}; known: {', '.join([*FIGURES, *ALSO])}")
    wanted = None if names is None else {ALSO.get(name, name) for name in names}
    chosen = [name for name in FIGURES if wanted is None or name in wanted]
    for k, name in enumerate(chosen, 1):
        if on_start is not None:
            on_start(name, k, len(chosen))
        yield from FIGURES[name]()


def keyed_shuffle(per_record: float = 1e-6) -> StreamExecutionEnvironment:
    """4 generator sources -> key_by -> 4 maps (chained sinks), 32-byte records, modelled costs."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(4)
    records = env.from_generator(record_size=32).name("Gen")
    records.key_by(lambda record: record.key).map(cost=Cost(per_record)).name("KeyedMap").sink_to(DiscardingSink())
    return env


@register_figure("keyed_shuffle_records_per_s", also=("virtual_to_wall",))
def keyed_shuffle_records_per_s(duration: float = 2.0) -> list[dict[str, Any]]:
    """Simulated records per wall second of a 4x4 keyed shuffle on 2 TaskManagers (sim mode)."""
    env = keyed_shuffle()
    start = time.perf_counter()
    result = execute(env, duration=duration, task_managers=2, slots_per_task_manager=2).raise_for_status()
    wall = time.perf_counter() - start
    return [
        {"figure": "keyed_shuffle_records_per_s", "value": result.records_received / wall,
         "records": result.records_received, "wall_s": wall, "virtual_s": result.duration, "target": 15_000_000},
        {"figure": "virtual_to_wall", "value": result.duration / wall, "run": "keyed_shuffle_records_per_s"},
    ]


register_figure("sim_buffer_hops_per_s")(bench_network.sim_buffer_hops)
register_figure("tcp_payload_ratio")(bench_network.tcp_payload_ratio)
register_figure("scale")(bench_scale.scale_figures)
register_figure("idle_channel_bytes")(bench_scale.idle_channel_bytes)
register_figure("sweep_speedup_local2", also=("spark_startup_local2_s",))(bench_sweep.sweep_speedup_local2)
