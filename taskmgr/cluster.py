"""In-process deployment: a JobManager and N TaskManagers in one trio run.

`sim` mode: virtual time and one simulated network (`SimNetwork`) shared by everyone,
addresses are names ("jobmanager", "tm-0", ...). `realtime` mode: the real clock and TCP
on loopback, addresses "127.0.0.1:port". TaskManagers find everything through the
JobManager's address, as they would in separate processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from graph import ExecutionGraph, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.netty.connection_manager import Transport
from shuffle.trace import NULL_TRACER, Tracer
from shuffle.transport.auth import AuthenticatedTransport, generate_secret
from taskmgr.faults import Fault, inject_faults
from taskmgr.jobmanager import JobConfig, JobManager, JobResult
from taskmgr.task import Task
from taskmgr.taskmanager import TaskManager, TaskManagerFatalError, task_manager_name

LOOPBACK = "127.0.0.1:0"
#: Progress is reported this many times over a run's duration.
PROGRESS_STEPS = 200

#: Called with (job time in seconds, records emitted by the sources so far, None if unknown).
ProgressCallback = Callable[[float, int | None], None]
#: Asked as often as progress is reported: True ends the run now (it drains and reports).
StopCheck = Callable[[], bool]


@dataclass(frozen=True)
class ClusterConfig:
    mode: str = "sim"
    task_managers: int = 1
    slots_per_task_manager: int = 1
    network: NetworkConfig = field(default_factory=NetworkConfig)
    #: The secret every connection of the cluster proves (shuffle.transport.auth);
    #: None: a random one per cluster.
    secret: bytes | None = field(default=None, repr=False)
    #: Flink's heartbeat.interval and heartbeat.timeout (seconds).
    heartbeat_interval: float = 10.0
    heartbeat_timeout: float = 50.0

    def __post_init__(self) -> None:
        if self.mode not in kernel.MODES:
            raise ValueError(f"mode must be one of {kernel.MODES}, got {self.mode!r}")
        if self.task_managers < 1 or self.slots_per_task_manager < 1:
            raise ValueError("a cluster needs at least one TaskManager with at least one slot")


def create_transport(config: ClusterConfig) -> Transport:
    """The cluster's transport; every connection on it proves `config.secret`."""
    if config.mode == "sim":
        from shuffle.transport.sim_link import SimNetwork

        network = config.network
        transport = SimNetwork(network.link_bandwidth, network.link_latency, network.socket_window)
    else:
        from shuffle.transport.tcp import TcpTransport

        transport = TcpTransport()
    return AuthenticatedTransport(transport, config.secret)


class MiniCluster:
    """Start it in a nursery, `execute` jobs on it, `kill_task_manager` to test failures."""

    def __init__(self, config: ClusterConfig, tracer: Tracer = NULL_TRACER) -> None:
        if config.secret is None:
            config = replace(config, secret=generate_secret())
        self.config = config
        self.tracer = tracer
        self.transport = create_transport(config)
        self.jobmanager = JobManager(self.transport, "jobmanager" if config.mode == "sim" else LOOPBACK,
                                     config.heartbeat_interval, config.heartbeat_timeout, tracer)
        self.task_managers: dict[str, TaskManager] = {}
        self._scopes: dict[str, kernel.CancelScope] = {}
        self._stopped: dict[str, kernel.Event] = {}

    async def start(self, nursery: Any) -> None:
        address = await nursery.start(self.jobmanager.run)
        for i in range(self.config.task_managers):
            name = task_manager_name(i)
            shuffle_address = name if self.config.mode == "sim" else LOOPBACK
            tm = TaskManager(name, address, self.transport, self.config.network,
                             self.config.slots_per_task_manager, self.tracer, shuffle_address)
            self.task_managers[name] = tm
            await nursery.start(self._run_task_manager, tm)

    async def _run_task_manager(self, tm: TaskManager, *, task_status: Any = kernel.TASK_STATUS_IGNORED) -> None:
        self._stopped[tm.name] = kernel.Event()
        try:
            with kernel.CancelScope() as scope:
                self._scopes[tm.name] = scope
                await tm.run(task_status=task_status)
        except TaskManagerFatalError:
            pass  # its process ended (logged): as a killed one, the JobManager finds it lost
        finally:
            self._stopped[tm.name].set()

    def find_task(self, vertex: str, subtask: int) -> Task | None:
        """A running subtask of the job, wherever it runs (in-process TaskManagers only)."""
        for tm in self.task_managers.values():
            task = tm.find_task(vertex, subtask)
            if task is not None:
                return task
        return None

    def records_emitted(self) -> int:
        """Records the job's sources emitted so far (in-process TaskManagers only)."""
        return sum(tm.records_emitted() for tm in self.task_managers.values())

    def hang_task_manager(self, name: str) -> None:
        """The TaskManager stops answering heartbeats (a hung process): its connections stay open."""
        self.task_managers[name].responsive = False

    def kill_task_manager(self, name: str) -> None:
        """The TaskManager dies at once: its connections close, its tasks vanish."""
        self._scopes[name].cancel()

    async def execute(self, graph: ExecutionGraph, job: JobConfig) -> JobResult:
        return await self.jobmanager.submit_job(graph, job)

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Ask the TaskManagers to shut down and wait for them (kill those that do not)."""
        await self.jobmanager.shutdown()
        with kernel.move_on_after(timeout):
            for stopped in self._stopped.values():
                await stopped.wait()
        for scope in self._scopes.values():
            scope.cancel()


def _execution_graph(program: StreamExecutionEnvironment | ExecutionGraph) -> ExecutionGraph:
    if isinstance(program, ExecutionGraph):
        return program
    return program.get_execution_graph()


def default_timeout(job: JobConfig) -> float:
    """Longest a whole run may take: every phase at its own timeout, plus a margin."""
    return job.registration_timeout + job.duration + job.drain_timeout + 2 * job.cancel_timeout + 10.0


async def run_job(program: StreamExecutionEnvironment | ExecutionGraph, cluster: ClusterConfig, job: JobConfig,
                  tracer: Tracer = NULL_TRACER, progress: ProgressCallback | None = None,
                  should_stop: StopCheck | None = None, faults: Sequence[Fault] = ()) -> JobResult:
    """Start a cluster, run one job on it, shut it down (inside a kernel run; bounded by
    `default_timeout`, in the run's clock). `progress` is called, and `should_stop` asked,
    PROGRESS_STEPS times over the job's duration; `faults` happen at their times."""
    graph = _execution_graph(program)
    with kernel.fail_after(default_timeout(job)):
        return await _run_on_new_cluster(graph, cluster, job, tracer, progress, should_stop, faults)


async def report_progress(jobmanager: JobManager, job: JobConfig, progress: ProgressCallback | None,
                          should_stop: StopCheck | None, records_emitted: Callable[[], int | None]) -> None:
    """Call `progress` and ask `should_stop` every PROGRESS_STEPS-th of the job's duration
    (from now) until its end, exclusive; stop the JobManager's jobs early when it says so.
    The line at the end comes from the job's result (`report_end`): a tick at the end
    itself would race the job's release in realtime (the sources' counts gone: "0
    records"), or come after it and be cancelled."""
    start = kernel.current_time()
    step = job.duration / PROGRESS_STEPS
    for k in range(1, PROGRESS_STEPS):
        await kernel.sleep_until(start + k * step)
        if progress is not None:
            progress(k * step, records_emitted())
        if should_stop is not None and should_stop():
            jobmanager.stop_jobs_early()
            return


def report_end(progress: ProgressCallback | None, result: JobResult) -> None:
    """The last progress report: how long the job ran and what its sources emitted."""
    if progress is not None:
        progress(result.duration, result.records_emitted)


async def _run_on_new_cluster(graph: ExecutionGraph, cluster: ClusterConfig, job: JobConfig, tracer: Tracer,
                              progress: ProgressCallback | None = None,
                              should_stop: StopCheck | None = None, faults: Sequence[Fault] = ()) -> JobResult:
    async with kernel.open_nursery() as nursery:
        mini = MiniCluster(cluster, tracer)
        await mini.start(nursery)
        if progress is not None or should_stop is not None:
            nursery.start_soon(report_progress, mini.jobmanager, job, progress, should_stop, mini.records_emitted)
        if faults:
            nursery.start_soon(inject_faults, mini, faults)
        result = await mini.execute(graph, job)
        report_end(progress, result)
        result.task_managers = list(mini.jobmanager.registrations)
        await mini.shutdown()
        nursery.cancel_scope.cancel()
    return result


def execute(program: StreamExecutionEnvironment | ExecutionGraph, *, duration: float, mode: str = "sim",
            task_managers: int = 1, slots_per_task_manager: int = 1, network: NetworkConfig | None = None,
            seed: int = 0, sample_period: float = 1.0, tracer: Tracer = NULL_TRACER) -> JobResult:
    """Run `program` on a fresh in-process cluster (its own trio run) and return the result."""
    cluster = ClusterConfig(mode, task_managers, slots_per_task_manager, network or NetworkConfig())
    job = JobConfig(duration, seed, sample_period, task_managers)
    return kernel.run(run_job, program, cluster, job, tracer, mode=mode)
