"""Failures: a task that raises fails the job with its error; a lost TaskManager fails the
job; the other tasks are cancelled and nothing hangs (sim mode; every run is bounded by
the cluster's run timeout in virtual time)."""

from __future__ import annotations

import re

import pytest

from graph import CollectSink, DiscardingSink, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, MiniCluster, execute, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig
from taskmgr.results import JobExecutionError, JobResult, JobStatus


def explode(x: int) -> int:
    if x == 50:
        raise ValueError("boom at 50")
    return x


def test_failing_task_fails_job_with_root_cause() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 1000).map(explode).set_parallelism(2).sink_to(CollectSink("out"))
    result = execute(env, duration=30, task_managers=2)
    assert result.status is JobStatus.FAILED
    assert isinstance(result.error, ValueError) and str(result.error) == "boom at 50"
    assert result.invariants["buffers_leaked"] == 0
    with pytest.raises(JobExecutionError, match="boom at 50") as info:
        result.raise_for_status()
    assert info.value.__cause__ is result.error


def test_the_failure_names_its_task_and_task_manager_and_the_others_are_cancelled() -> None:
    """As Flink's exception history: the root cause is the first failure, of the task
    (name with subtask) on its TaskManager; the tasks the JobManager cancelled are CANCELED."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(1, 1000).rebalance().map(explode).set_parallelism(2).sink_to(CollectSink("out"))
    result = execute(env, duration=30, task_managers=2)
    # 50 goes to one of the map subtasks (rebalance from a random start): it alone fails
    [failed] = [(vertex, index) for vertex, states in result.task_states.items()
                for index, state in enumerate(states) if state == "FAILED"]
    assert failed[0] == "Map"
    assert result.failed_task == f"Map ({failed[1] + 1}/2)"
    assert result.failed_task_manager == result.placement["Map"][failed[1]]
    assert 0 < result.failed_at <= result.duration
    other = 1 - failed[1]
    # the bounded source had finished; the other map and the sink were cancelled
    assert result.task_states["Source: Sequence Source"] == ["FINISHED"]
    assert result.task_states["Map"][other] == "CANCELED" and result.task_states["Sink: Writer"] == ["CANCELED"]


def stalled(parallelism: int, task_managers: int | None = None) -> str:
    """With one buffer per subpartition the source's writer stalls on the buffer it writes
    (Flink 1.x's max-buffers-per-channel = 1): after the run the job cannot drain."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.from_generator().name("Gen").rebalance().map(cost="1ms").name("Work").sink_to(DiscardingSink())
    task_managers = task_managers or parallelism
    result = execute(env, duration=2, task_managers=task_managers, slots_per_task_manager=parallelism // task_managers,
                     network=NetworkConfig(max_buffers_per_channel=1))
    assert result.status is JobStatus.FAILED
    return str(result.error)


def test_a_job_that_cannot_drain_says_what_each_task_still_running_waits_for() -> None:
    error = stalled(1)
    assert error.startswith("the job did not drain within 30.0 s; still running:\n"
                            "  Source: Gen (1/1): waits for an output buffer: partition ds0#0@"), error
    assert "subpartition 0 at max-buffers-per-channel (1)\n" in error
    assert error.endswith("\n  Work -> Sink: Writer (1/1): waits for input: "
                          "channel 0 of gate 0: local, its subpartition holds 1 buffers (nothing readable yet)")


def test_a_stalled_remote_channel_reports_its_credit_and_buffers() -> None:
    error = stalled(2)
    assert error.count("waits for an output buffer") == 2
    assert ("  Work -> Sink: Writer (2/2): waits for input: channel 0 of gate 0: remote, 0 buffers queued, "
            "2 free buffers for the sender (2 exclusive), 0 credit not yet announced; "
            "channel 1 of gate 0: local, its subpartition holds 0 buffers (nothing readable yet)") in error


def test_a_task_that_cannot_describe_its_wait_says_so_instead_of_ending_its_task_manager() -> None:
    from taskmgr.taskmanager import _describe

    class Broken:
        def describe_wait(self) -> str:
            raise KeyError("gate 3")

    assert _describe(Broken()) == "cannot say (KeyError: 'gate 3')"  # type: ignore[arg-type]


def test_a_stall_report_says_a_task_that_ended_its_input_waits_for_its_consumers() -> None:
    """With checkpoints after tasks finish, a task whose input ended waits (taking mails,
    no timer running) until its consumers acknowledged every record; the report said
    "busy (not waiting)"."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(1.0)
    env.from_generator(count=10).name("Gen").rebalance().map(cost="1ms").name("Work").sink_to(DiscardingSink())
    result = kernel.run(run_job, env, ClusterConfig(), JobConfig(5), NULL_TRACER, None, None,
                        [Fault(0.001, "pause_task", vertex="Work", duration=1000)], mode="sim")
    assert result.status is JobStatus.FAILED
    lines = str(result.error).splitlines()
    assert lines[1].startswith("  Source: Gen (1/1): ended its input; waits until its consumers have processed "
                               "every record of partition ds0#0@"), lines
    assert lines[1].endswith(" (they acknowledge EndOfData)")


def test_without_credit_a_stalled_connection_is_named_with_the_channel_it_waits_for() -> None:
    """Pre-credit flow control reads nothing from a connection while one of its channels has
    no free buffer. A job whose stages go back and forth between two TaskManagers can then
    deadlock (a back-pressured task holds the buffers its connection waits for, and the data
    that would free them is behind that connection): the report says which channel each
    stalled connection waits for."""
    env = StreamExecutionEnvironment.get_execution_environment().set_buffer_timeout(0)
    (env.from_generator(record_size=3000, count=500).name("Gen").set_parallelism(4)
        .key_by(lambda record: record.key).map().name("A").set_parallelism(2)
        .rebalance().map(cost="1ms").name("B").set_parallelism(4)
        .rebalance().map(cost="100us").name("C").set_parallelism(2).sink_to(DiscardingSink()))
    network = NetworkConfig(buffer_size=4096, flow_control="tcp", exclusive_buffers_per_channel=1,
                            max_overdraft_buffers_per_gate=0, link_latency=0.001, link_bandwidth=10e6)
    result = execute(env, duration=60, task_managers=2, slots_per_task_manager=3, network=network)
    assert result.status is JobStatus.FAILED
    stalled = [line for line in str(result.error).splitlines() if "its connection (without credit)" in line]
    assert stalled, result.error
    assert all(re.search(r"its connection \(without credit\) reading nothing until \w+ \(\d/\d\) frees a buffer "
                         r"for its channel \d of gate 0", line) for line in stalled), stalled


def test_a_stall_report_groups_channels_in_the_same_state() -> None:
    error = stalled(4, task_managers=1)
    assert ("  Work -> Sink: Writer (4/4): waits for input: channels 0, 1, 2, 3 of gate 0: "
            "local, its subpartition holds 0 buffers (nothing readable yet)") in error


def test_not_enough_slots_fails_with_clear_message() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator().set_parallelism(3).sink_to(DiscardingSink())
    result = execute(env, duration=1, task_managers=1)
    assert result.status is JobStatus.FAILED
    assert "needs 3 slots, the cluster has 1" in str(result.error)


def run_with_killed_task_manager(env: StreamExecutionEnvironment, kill_at: float, duration: float) -> JobResult:
    async def main():
        async with kernel.open_nursery() as nursery:
            cluster = MiniCluster(ClusterConfig(task_managers=2))
            await cluster.start(nursery)

            async def kill_later():
                await kernel.sleep(kill_at)
                cluster.kill_task_manager("tm-1")

            nursery.start_soon(kill_later)
            with kernel.fail_after(120):
                result = await cluster.execute(env.get_execution_graph(),
                                               JobConfig(duration=duration, task_managers=2))
            nursery.cancel_scope.cancel()
        return result

    return kernel.run(main, mode="sim")


def test_a_killed_task_manager_fails_at_once_the_tasks_that_read_from_it() -> None:
    """Flink's consumer of a dead TaskManager's partition: its connection closes under it
    (CreditBasedPartitionRequestClientHandler.channelInactive)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(rate=1000).rebalance().map(cost="1ms").set_parallelism(2).sink_to(DiscardingSink())
    result = run_with_killed_task_manager(env, kill_at=2.0, duration=10.0)
    assert result.status is JobStatus.FAILED
    assert result.duration < 3
    assert f"{type(result.error).__name__}: {result.error}" == (
        "RemoteTransportError: Connection unexpectedly closed by remote task manager 'tm-1'. "
        "This might indicate that the remote task manager was lost.")


def test_a_killed_task_manager_nobody_reads_from_is_lost_after_two_failed_heartbeat_rpcs() -> None:
    """Flink's JobManager does not watch the connection: heartbeat RPCs to the dead TaskManager
    fail at once (FLINK-23202), and the second in a row (heartbeat.rpc-failure-threshold)
    marks it unreachable (FLINK-23209), at the heartbeat requests of 10 s and 20 s."""
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(rate=1000).rebalance().map(cost="1ms").slot_sharing_group("other")
        .sink_to(DiscardingSink()))
    result = run_with_killed_task_manager(env, kill_at=2.0, duration=60.0)
    assert result.placement["Map -> Sink: Writer"] == ["tm-1"], result.placement
    assert result.status is JobStatus.FAILED
    assert f"{type(result.error).__name__}: {result.error}" == (
        "JobMasterError: TaskManager with id tm-1 is no longer reachable.")
    assert 19.9 <= result.duration <= 20.0
    assert result.invariants["buffers_leaked"] == 0
    # Flink fails every task of the lost TaskManager with that cause; its task is the root's
    assert (result.failed_task, result.failed_task_manager) == ("Map -> Sink: Writer (1/1)", "tm-1")
    assert result.failed_at == pytest.approx(result.duration, abs=1e-6)
    assert result.task_states == {"Source: Generator": ["CANCELED"], "Map -> Sink: Writer": ["FAILED"]}


def run_with_hung_task_manager(heartbeat_interval: float, heartbeat_timeout: float, hang_at: float,
                               duration: float) -> JobResult:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(rate=100).rebalance().map(cost="1ms").set_parallelism(2).sink_to(DiscardingSink())

    async def main():
        async with kernel.open_nursery() as nursery:
            cluster = MiniCluster(ClusterConfig(task_managers=2, heartbeat_interval=heartbeat_interval,
                                                heartbeat_timeout=heartbeat_timeout))
            await cluster.start(nursery)

            async def hang_later():
                await kernel.sleep(hang_at)
                cluster.hang_task_manager("tm-1")

            nursery.start_soon(hang_later)
            result = await cluster.execute(env.get_execution_graph(), JobConfig(duration=duration, task_managers=2))
            nursery.cancel_scope.cancel()
        return result

    return kernel.run(main, mode="sim")


@pytest.mark.parametrize(("hang_at", "lost_at"), [(5.0, 50.0), (25.0, 70.0)])
def test_a_task_manager_that_stops_answering_heartbeats_is_lost_after_the_timeout(hang_at: float,
                                                                                  lost_at: float) -> None:
    """Flink's defaults: heartbeats every 10 s, lost 50 s after the last one. Its
    DefaultHeartbeatMonitor schedules the timeout at each heartbeat, so the loss comes at
    that moment, not at the next heartbeat request."""
    result = run_with_hung_task_manager(10.0, 50.0, hang_at=hang_at, duration=120)
    assert result.status is JobStatus.FAILED
    assert f"{type(result.error).__name__}: {result.error}" == (
        "TimeoutError: Heartbeat of TaskManager with id tm-1 timed out.")
    # Its last answer came at its registration (hung at 5 s) or at the request of 20 s (hung at 25 s).
    assert lost_at - 0.01 <= result.duration <= lost_at


def test_answered_heartbeats_keep_a_long_job_alive() -> None:
    result = run_with_hung_task_manager(1.0, 3.0, hang_at=1e9, duration=20)  # never hangs
    assert result.status is JobStatus.FINISHED and result.duration == 20


def test_a_task_manager_that_dies_before_its_report_ends_the_wait_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JobManager waits for each TaskManager's report after the job; one whose connection
    breaks meanwhile is unreachable, and the wait ends then, not after cancel_timeout (10 s)."""
    import taskmgr.taskmanager as taskmanager

    release = taskmanager.TaskManager._handlers[taskmanager.ReleaseJob]

    async def late_release(self, message):  # type: ignore[no-untyped-def]
        if self.name != "tm-1":
            await release(self, message)  # tm-1 never reports: it dies first

    monkeypatch.setitem(taskmanager.TaskManager._handlers, taskmanager.ReleaseJob, late_release)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(rate=1000, count=2000).rebalance().map(cost="0.5ms").set_parallelism(2).sink_to(DiscardingSink())

    async def main():
        async with kernel.open_nursery() as nursery:
            cluster = MiniCluster(ClusterConfig(task_managers=2))
            await cluster.start(nursery)

            async def kill_after_the_job():
                while not any(job.all_terminal for job in cluster.jobmanager._jobs.values()):
                    await kernel.sleep(0.01)
                await kernel.sleep(0.5)
                cluster.kill_task_manager("tm-1")

            nursery.start_soon(kill_after_the_job)
            start = kernel.current_time()
            result = await cluster.execute(env.get_execution_graph(), JobConfig(duration=30, task_managers=2))
            waited = kernel.current_time() - start - result.duration
            nursery.cancel_scope.cancel()
        return result, waited

    result, waited = kernel.run(main, mode="sim")
    assert result.status is JobStatus.FINISHED, result.error
    assert 0.5 <= waited < 1.0  # the kill, half a second after the job, ends the wait


def test_a_task_manager_lost_after_the_job_ended_is_a_missing_report_not_lost_records() -> None:
    """The TaskManagers' counts, metrics and verifications travel in their reports when the
    JobManager releases the finished job; one lost before its report arrives took its
    tasks' figures with it. The run says so, instead of "sources emitted 500 records, sinks
    received 1000" (the other TaskManager's sources were not counted)."""
    def run_killing(faults: list[Fault]) -> JobResult:
        env = StreamExecutionEnvironment.get_execution_environment()
        (env.from_generator(count=500).name("Gen").set_parallelism(2).rebalance().map().name("Work")
            .set_parallelism(2).sink_to(DiscardingSink()).name("Out"))
        cluster = ClusterConfig("sim", 2, 1, NetworkConfig(link_latency=0.02))  # the report takes 20 ms
        return kernel.run(run_job, env, cluster, JobConfig(10, task_managers=2), NULL_TRACER, None, None, faults,
                          mode="sim")

    ended = max(run_killing([]).vertex_end_times.values())
    result = run_killing([Fault(ended + 0.005, "kill_task_manager", task_manager="tm-1")])
    assert result.status is JobStatus.FINISHED
    assert result.invariants["task_managers_reported"] == 1 and result.invariants["records_match"] is None
    assert result.invariant_violations() == [
        "1 of the 2 TaskManagers that ran tasks sent no report (lost after the job ended): their tasks' records, "
        "metrics and verifications are missing"]
