"""Random jobs for the chaos test: a seed draws a bounded, lossless job (generator sources,
one-to-one operators over random exchanges, a verifying sink), a network configuration,
checkpointing and faults with a restart strategy, and `run_chaos_job` runs it in sim mode.
Every draw must finish with every record verified and every buffer back."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from graph import StreamExecutionEnvironment
from graph.api.environment import CheckpointingMode
from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobResult
from taskmgr.operators import VerifyingSink
from taskmgr.restart_strategy import RestartStrategy

EXCHANGES = ("forward", "rebalance", "rescale", "shuffle", "key_by")
COSTS = (None, "10us", "100us", "1ms")
#: Virtual seconds a drawn job may take: its sources are bounded and finish well before.
DURATION = 600.0


@dataclass
class ChaosJob:
    """One seed's draw, printable: what a failing seed ran."""

    seed: int
    task_managers: int
    slots: int
    sources: list[dict[str, Any]]
    stages: list[dict[str, Any]]
    network: dict[str, Any]
    checkpoints: dict[str, Any] | None
    faults: list[Fault] = field(default_factory=list)
    restart_delay: float = 0.5
    #: TaskManagers beyond those the job fills (where it restarts after losing one).
    spare_task_managers: int = 0

    def describe(self) -> str:
        return "\n".join(f"{name} = {value!r}" for name, value in vars(self).items())


def draw(seed: int) -> ChaosJob:
    """The job of `seed`."""
    rng = random.Random(seed)
    task_managers = rng.choice((1, 2, 2, 3))
    slots = rng.choice((1, 2, 3, 4))
    max_parallelism = task_managers * slots
    sources = [{"parallelism": rng.randint(1, max_parallelism),
                "count": rng.choice((50, 500, 3000)),
                "rate": rng.choice((0, 0, 1000, 20000)),
                "record_size": rng.choice((16, 32, 200, 3000, 40000))}
               for _ in range(rng.choice((1, 1, 2)))]
    for source in sources:  # at most ~2 MB a source subtask: a 20 ms link with few credits is slow
        source["count"] = min(source["count"], max(50, 2_000_000 // source["record_size"]))
    stages = []
    parallelism = max(source["parallelism"] for source in sources)
    for _ in range(rng.randint(1, 3)):
        exchange = rng.choice(EXCHANGES)
        if exchange != "forward" or len(sources) > 1 and not stages:
            parallelism = rng.randint(1, max_parallelism)
        if exchange == "forward" and len(sources) > 1 and not stages:
            exchange = "rebalance"
        stages.append({"exchange": exchange, "parallelism": parallelism, "cost": rng.choice(COSTS),
                       "chaining": rng.random() < 0.8})
    buffer_size = rng.choice((1024, 4096, 32768))
    network = {
        "buffer_size": buffer_size,
        "buffer_timeout": rng.choice((0.0, 0.001, 0.01, 0.1, -1.0)),
        # without credit, exchanges back and forth between TaskManagers can deadlock (README)
        "flow_control": rng.choice(("credit", "credit", "credit", "tcp")) if len(stages) == 1 else "credit",
        "exclusive_buffers_per_channel": rng.choice((1, 2, 2, 3)),
        "floating_buffers_per_gate": rng.choice((1, 2, 8, 8)),
        "max_buffers_per_channel": rng.choice((2, 10, 10)),
        "max_overdraft_buffers_per_gate": rng.choice((0, 5, 20)),
        "debloat": rng.random() < 0.2,
        "link_latency": rng.choice((50e-6, 1e-3, 20e-3)),
        "link_bandwidth": rng.choice((10e9 / 8, 10e6)),
    }
    checkpoints = None
    if rng.random() < 0.6:
        mode = rng.choice(("aligned", "aligned", "unaligned", "at_least_once"))
        checkpoints = {"mode": mode, "interval": rng.choice((0.05, 0.2, 1.0)),
                       "aligned_timeout": rng.choice((None, 0.0, 0.02)) if mode == "unaligned" else None,
                       "max_concurrent": rng.choice((1, 1, 2)) if mode != "unaligned" else 1,
                       "after_finish": rng.random() < 0.8}
    if checkpoints is not None and checkpoints["mode"] == "aligned":
        network["flow_control"] = "credit"  # an alignment without credit deadlocks likewise (README)
    faults = []
    vertices = [f"Stage{i}" for i in range(len(stages))]
    for _ in range(rng.choice((0, 0, 1, 2))):
        at = round(rng.uniform(0.01, 2.0), 3)
        kinds = ["fail_task", "pause_task", "block_task"]
        if task_managers > 1:
            kinds += ["drop_connection", "corrupt_frame", "pause_link", "slow_link"]
        kind = rng.choice(kinds)
        if kind in ("fail_task", "pause_task", "block_task"):
            faults.append(Fault(at, kind, vertex=rng.choice(vertices), subtask=0,
                                duration=rng.choice((0.01, 0.3))))
        else:
            pair = tuple(rng.sample([f"tm-{i}" for i in range(task_managers)], 2))
            faults.append(Fault(at, kind, between=pair, duration=rng.choice((0.01, 0.3)),
                                bandwidth=1e6 if kind == "slow_link" else None,
                                latency=0.005 if kind == "slow_link" else None))
    job = ChaosJob(seed, task_managers, slots, sources, stages, network, checkpoints, faults,
                   rng.choice((0.0, 0.1, 1.0)))
    lost = random.Random(f"lost-{seed}")  # drawn apart: the draws above stay what they were
    if lost.random() < 0.15:  # its heartbeats stop; found lost after heartbeat_timeout
        job.spare_task_managers = 1
        job.faults.append(Fault(round(lost.uniform(0.01, 2.0), 3), "kill_task_manager", task_manager="tm-0"))
    return job


def build(job: ChaosJob) -> StreamExecutionEnvironment:
    """The drawn job as a program: the sources (unioned), each stage a map behind its exchange."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_buffer_timeout(job.network["buffer_timeout"])
    if job.checkpoints is not None:
        c = job.checkpoints
        mode = CheckpointingMode.AT_LEAST_ONCE if c["mode"] == "at_least_once" else CheckpointingMode.EXACTLY_ONCE
        env.enable_checkpointing(c["interval"], mode)
        config = env.get_checkpoint_config()
        if c["mode"] == "unaligned":
            config.enable_unaligned_checkpoints()
            if c["aligned_timeout"] is not None:
                config.set_aligned_checkpoint_timeout(c["aligned_timeout"])
        config.set_max_concurrent_checkpoints(c["max_concurrent"])
        config.enable_checkpoints_after_tasks_finish(c["after_finish"])
    streams = [env.from_generator(rate=s["rate"], record_size=s["record_size"], count=s["count"])
               .name(f"Gen{i}").set_parallelism(s["parallelism"]) for i, s in enumerate(job.sources)]
    stream = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
    for i, stage in enumerate(job.stages):
        exchange = stage["exchange"]
        if exchange == "key_by":
            stream = stream.key_by(lambda record: record.key)
        else:
            stream = getattr(stream, exchange)()
        stream = stream.map(cost=stage["cost"]).name(f"Stage{i}").set_parallelism(stage["parallelism"])
        if not stage["chaining"]:
            stream = stream.disable_chaining()
    stream.sink_to(VerifyingSink("chaos")).name("Check")
    return env


def run_chaos_job(job: ChaosJob) -> JobResult:
    """Run the job in sim mode, restarting once per fault."""
    network = NetworkConfig(**{k: v for k, v in job.network.items() if k != "buffer_timeout"})
    task_managers = job.task_managers + job.spare_task_managers
    cluster = ClusterConfig("sim", task_managers, job.slots, network)
    if job.spare_task_managers:  # redeploying onto the lost TaskManager fails until it is found lost (50 s)
        restart = RestartStrategy("fixed_delay", attempts=len(job.faults) + 60, delay=1.0)
    elif job.faults:
        restart = RestartStrategy("fixed_delay", attempts=len(job.faults), delay=job.restart_delay)
    else:
        restart = RestartStrategy("none")
    config = JobConfig(DURATION, seed=job.seed, task_managers=task_managers, restart=restart)
    return kernel.run(run_job, build(job), cluster, config, NULL_TRACER, None, None, job.faults, mode="sim")

