"""Random programs for the chaos test: a seed draws a bounded program of Python functions
(sequence sources, union or connect, map / filter / flat_map over random exchanges,
broadcast included, a collect sink) with a network configuration, checkpointing and
faults; `expected` computes in plain Python what the collect sink must hold (as a
multiset: Flink keeps no order across channels). The generic (msgpack) record path,
two-input tasks and broadcast are what the generator jobs of chaos_jobs.py do not reach."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from graph import CollectSink, CoMapFunction, OutputTag, ProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from graph.api.environment import CheckpointingMode
from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobResult
from taskmgr.restart_strategy import RestartStrategy

EXCHANGES = ("forward", "rebalance", "rescale", "shuffle", "key_by", "broadcast")
MODULUS = 1_000_003
DURATION = 600.0


class Affine:
    """x -> (a*x + b) mod MODULUS."""

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b

    def __call__(self, x: int) -> int:
        return (self.a * x + self.b) % MODULUS


class NotMultiple:
    def __init__(self, m: int) -> None:
        self.m = m

    def __call__(self, x: int) -> bool:
        return x % self.m != 0


class Run:
    """x -> [x, x+1, ..., x+n-1]."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, x: int) -> list[int]:
        return [x + i for i in range(self.n)]


class Negate(CoMapFunction):
    """The first input as it is, the second negated."""

    def map1(self, value: int) -> int:
        return value

    def map2(self, value: int) -> int:
        return -value


ODD = OutputTag("odd")


class SplitOdd(ProcessFunction):
    """Even values out, odd ones to the side output."""

    def process_element(self, value: int, ctx: Any) -> list[Any]:
        return [value] if value % 2 == 0 else [(ODD, value)]


def key_of(x: int) -> int:
    return x % 7


def to_pair(x: int) -> tuple[int, int]:
    """(key, a non-negative value): each key's running sum then grows to its total."""
    return key_of(x), x % MODULUS


def first(pair: tuple[int, int]) -> int:
    return pair[0]


def add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0], a[1] + b[1]


@dataclass
class ChaosProgram:
    seed: int
    task_managers: int
    slots: int
    sources: list[tuple[int, int, int]]  # (start, end, parallelism)
    join: str  # "union" or "connect" (two sources)
    steps: list[dict[str, Any]]
    network: dict[str, Any]
    checkpoints: str | None
    faults: list[Fault] = field(default_factory=list)
    #: Ends with a keyed running sum (the sink then holds each key's sums as they grew).
    reduce: bool = False
    #: With `reduce`: sums over count windows of this many records per key (0: a running sum).
    window: int = 0
    #: BATCH execution (blocking exchanges; no checkpoints).
    batch: bool = False
    #: Ends with a process function sending odd values to a side output (negated, into "side").
    split: bool = False

    def describe(self) -> str:
        return "\n".join(f"{name} = {value!r}" for name, value in vars(self).items())


def draw_program(seed: int) -> ChaosProgram:
    rng = random.Random(seed)
    task_managers, slots = rng.choice((1, 2, 2, 3)), rng.choice((1, 2, 3))
    most = task_managers * slots
    sources = []
    for _ in range(rng.choice((1, 2, 2))):
        start = rng.randint(0, 1000)
        sources.append((start, start + rng.choice((10, 500, 5000)), rng.randint(1, most)))
    steps = []
    parallelism = max(p for _, _, p in sources) if len(sources) == 1 else None
    for _ in range(rng.randint(1, 4)):
        exchange = rng.choice(EXCHANGES)
        if exchange == "forward" and parallelism is None:
            exchange = "rebalance"
        if exchange != "forward":
            parallelism = rng.randint(1, most)
        kind = rng.choice(("map", "filter", "flat_map"))
        argument = {"map": (rng.randint(2, 9), rng.randint(0, 9)), "filter": rng.randint(2, 5),
                    "flat_map": rng.randint(0, 3)}[kind]
        steps.append({"exchange": exchange, "parallelism": parallelism, "kind": kind, "argument": argument,
                      "chaining": rng.random() < 0.8})
    network = {"buffer_size": rng.choice((1024, 4096, 32768)),
               "buffer_timeout": rng.choice((0.0, 0.01, 0.1, -1.0)),
               "exclusive_buffers_per_channel": rng.choice((1, 2)),
               "floating_buffers_per_gate": rng.choice((1, 8)),
               "link_latency": rng.choice((50e-6, 5e-3))}
    batch = rng.random() < 0.15
    checkpoints = None if batch else rng.choice((None, None, "aligned", "unaligned"))
    faults = []
    if checkpoints is not None and rng.random() < 0.5:
        at = round(rng.uniform(0.01, 0.5), 3)
        if task_managers > 1 and rng.random() < 0.5:
            faults.append(Fault(at, "drop_connection", between=("tm-0", "tm-1")))
        else:
            faults.append(Fault(at, "fail_task", vertex="Step0"))
    reduce = rng.random() < 0.3
    if batch:  # its regions run at once here, each in slots of its own (README)
        slots = 30
    program = ChaosProgram(seed, task_managers, slots, sources, rng.choice(("union", "connect")), steps, network,
                           checkpoints, faults, reduce, batch)
    extra = random.Random(f"extra-{seed}")  # drawn apart: the draws above stay what they were
    program.split = not reduce and extra.random() < 0.3
    program.window = extra.choice((0, 0, 3, 50)) if reduce else 0
    return program


def _function(step: dict[str, Any]) -> Any:
    kind, argument = step["kind"], step["argument"]
    return Affine(*argument) if kind == "map" else NotMultiple(argument) if kind == "filter" else Run(argument)


def build_program(program: ChaosProgram) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_buffer_timeout(program.network["buffer_timeout"])
    if program.batch:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    if program.checkpoints is not None:
        env.enable_checkpointing(0.1, CheckpointingMode.EXACTLY_ONCE)
        if program.checkpoints == "unaligned":
            env.get_checkpoint_config().enable_unaligned_checkpoints()
    streams = [env.from_sequence(start, end).set_parallelism(p) for start, end, p in program.sources]
    if len(streams) == 1:
        stream = streams[0]
    elif program.join == "union":
        stream = streams[0].union(streams[1])
    else:
        stream = streams[0].connect(streams[1]).map(Negate()).name("Join")
    for i, step in enumerate(program.steps):
        exchange = step["exchange"]
        stream = stream.key_by(key_of) if exchange == "key_by" else getattr(stream, exchange)()
        stream = getattr(stream, step["kind"])(_function(step)).name(f"Step{i}").set_parallelism(step["parallelism"])
        if not step["chaining"]:
            stream = stream.disable_chaining()
    if program.reduce:
        keyed = stream.map(to_pair).key_by(first)
        stream = (keyed.count_window(program.window) if program.window else keyed).reduce(add).name("Sum")
    if program.split:
        stream = stream.process(SplitOdd()).name("Split")
        stream.get_side_output(ODD).rebalance().map(Affine(-1, 0)).name("Side").sink_to(CollectSink("side"))
    stream.sink_to(CollectSink("out")).name("Out")
    return env


def expected(program: ChaosProgram) -> Any:
    """What the collect sink must hold (`summary` of it): each source's sequence through the
    steps."""
    values: list[int] = []
    for index, (start, end, _) in enumerate(program.sources):
        sign = -1 if index == 1 and program.join == "connect" else 1
        values += [sign * x for x in range(start, end + 1)]
    counts = Counter(values)
    for step in program.steps:
        function = _function(step)
        after: Counter = Counter()
        for x, n in counts.items():
            if step["kind"] == "map":
                after[function(x)] += n
            elif step["kind"] == "filter":
                if function(x):
                    after[x] += n
            else:
                for y in function(x):
                    after[y] += n
        if step["exchange"] == "broadcast":
            after = Counter({x: n * step["parallelism"] for x, n in after.items()})
        counts = after
    if program.split:
        side = Counter({Affine(-1, 0)(x): n for x, n in counts.items() if x % 2})
        return Counter({x: n for x, n in counts.items() if x % 2 == 0}), side
    if not program.reduce:
        return counts
    if program.window:  # which records share a window depends on their order: only how many windows
        per_key = Counter()
        for x, n in counts.items():
            per_key[key_of(x)] += n
        return {key: n // program.window for key, n in per_key.items() if n >= program.window}
    sums: dict[int, list[int]] = {}
    for x, n in counts.items():
        key, value = to_pair(x)
        entry = sums.setdefault(key, [0, 0])
        entry[0] += n
        entry[1] += value * n
    return {key: tuple(entry) for key, entry in sums.items()}


def summary(program: ChaosProgram, collected: dict[str, list[Any]]) -> Any:
    """The collect sinks' values (`JobResult.collected`) as `expected` gives them: a
    multiset (and one of the side output), per key of a running sum the number of sums and
    the largest (Flink keeps no order across channels, so which sums came is not fixed, only
    how many and the total), or per key the number of count windows."""
    if program.split:
        return Counter(collected.get("out", [])), Counter(collected.get("side", []))
    collected = collected.get("out", [])
    if not program.reduce:
        return Counter(collected)
    if program.window:
        return dict(Counter(key for key, _ in collected))
    sums: dict[int, list[int]] = {}
    for key, total in collected:
        entry = sums.setdefault(key, [0, total])
        entry[0] += 1
        entry[1] = max(entry[1], total)
    return {key: tuple(entry) for key, entry in sums.items()}


def run_program(program: ChaosProgram, mode: str = "sim") -> JobResult:
    """Run the program in `mode` ("realtime": over TCP on loopback), restarting once per fault."""
    network = NetworkConfig(**{k: v for k, v in program.network.items() if k != "buffer_timeout"})
    cluster = ClusterConfig(mode, program.task_managers, program.slots, network)
    restart = (RestartStrategy("fixed_delay", attempts=len(program.faults), delay=0.1)
               if program.faults else RestartStrategy("none"))
    config = JobConfig(DURATION, seed=program.seed, task_managers=program.task_managers, restart=restart)
    return kernel.run(run_job, build_program(program), cluster, config, NULL_TRACER, None, None, program.faults,
                      mode=mode)
