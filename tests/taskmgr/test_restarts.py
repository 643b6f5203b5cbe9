"""Restart strategies: a failed task restarts the whole job as a new attempt (from the
beginning without checkpoints; tests/taskmgr/test_restarts_from_checkpoints.py restores
them), or fails it with the root cause; no buffer is leaked."""

from __future__ import annotations

import pytest

from graph import StreamExecutionEnvironment
from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobResult, JobStatus
from taskmgr.operators import VerifyingSink
from taskmgr.restart_strategy import RestartStrategy

RECORDS = 8000


def pipeline() -> StreamExecutionEnvironment:
    """8000 records at 1000/s to two map subtasks (one remote), then a verifying sink."""
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_generator(rate=1000, count=RECORDS).name("Gen").rebalance()
        .map(cost="0.5ms").name("Work").set_parallelism(2)
        .rebalance().sink_to(VerifyingSink("check")).name("Check"))
    return env


def run(restart: RestartStrategy, *faults: Fault, duration: float = 20.0, task_managers: int = 2,
        task_cancellation_timeout: float = 180.0) -> JobResult:
    job = JobConfig(duration, task_managers=task_managers, restart=restart,
                    task_cancellation_timeout=task_cancellation_timeout)
    return kernel.run(run_job, pipeline(), ClusterConfig(task_managers=task_managers), job,
                      NULL_TRACER, None, None, faults, mode="sim")


def fail_work(at: float, message: str = "bad record") -> Fault:
    return Fault(at, "fail_task", vertex="Work", subtask=1, message=message)


def test_fixed_delay_restarts_the_job_and_its_last_attempt_counts_every_record_once() -> None:
    result = run(RestartStrategy("fixed_delay", attempts=2, delay=1.0), fail_work(2.0))
    assert result.status is JobStatus.FINISHED, result.error
    assert result.invariant_violations() == []
    assert result.verifications["check"] == {"received": RECORDS, "out_of_order": 0, "duplicates": 0,
                                             "missing": 0, "ok": True}
    assert result.records_emitted == result.records_received == RECORDS
    assert result.invariants["buffers_leaked"] == 0
    [restart] = result.restart_history
    assert restart.attempt == 0
    assert restart.failed_at_s == pytest.approx(2.0, abs=0.01)
    assert restart.cause == "InjectedFailure: bad record"
    assert (restart.task, restart.task_manager) == ("Work (2/2)", result.placement["Work"][1])
    # Cancelling takes a few link round trips, then the 1 s delay.
    assert 1000 <= restart.downtime_ms < 1050
    assert restart.restarted_at_s == pytest.approx(restart.failed_at_s + restart.downtime_ms / 1000)
    # The first attempt emitted ~2 s of records: all are emitted again.
    assert restart.records_replayed == pytest.approx(2000, rel=0.02)
    # The restarted source paces itself from its own start: 8 s of records after the restart.
    assert result.duration == pytest.approx(restart.restarted_at_s + RECORDS / 1000, abs=0.2)


UNREACHABLE = ("RecipientUnreachableError: Could not send message [submitTask] from sender [jobmanager] to "
               "recipient [tm-1], because the recipient is unreachable. This can either mean that the recipient has been terminated or that the "
               "remote RpcService is currently not reachable.")


def test_after_a_lost_task_manager_the_job_restarts_on_the_slots_left() -> None:
    """The killed TaskManager stays registered, its slots too, until two heartbeat RPCs in a
    row failed (at 10 s and 20 s): until then every restart deploys into its slot again and
    fails at once (as in Flink: FLINK-24706's review), after it the job runs on tm-0 and tm-2."""
    result = run(RestartStrategy("fixed_delay", attempts=30, delay=1.0),
                 Fault(2.0, "kill_task_manager", task_manager="tm-1"), task_managers=3, duration=40.0)
    assert result.status is JobStatus.FINISHED, result.error
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == RECORDS
    assert result.placement["Work"] == ["tm-0", "tm-2"]
    assert result.invariants["buffers_leaked"] == 0 and result.invariants["task_managers_reported"] == 2
    first, *redeployed = result.restart_history
    assert first.cause.startswith("RemoteTransportError: Connection unexpectedly closed by remote task manager 'tm-1'")
    assert [r.cause for r in redeployed] == [UNREACHABLE] * 17  # the restarts at 3 s, 4 s, ... 19 s
    assert result.restart_history[-1].restarted_at_s == pytest.approx(20.0, abs=0.01)


def test_a_restart_into_the_dead_task_managers_slot_counts_as_an_attempt() -> None:
    result = run(RestartStrategy("fixed_delay", delay=1.0), Fault(2.0, "kill_task_manager", task_manager="tm-1"),
                 task_managers=3)
    assert result.status is JobStatus.FAILED
    assert f"{type(result.error).__name__}: {result.error}" == UNREACHABLE
    assert result.recovery_suppressed_by == ("FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=1, "
                                             "backoffTimeMS=1000)")
    assert len(result.restart_history) == 1 and result.duration == pytest.approx(3.0, abs=0.01)
    assert result.invariants["buffers_leaked"] == 0


def test_a_restart_without_enough_slots_fails_the_job() -> None:
    result = run(RestartStrategy("fixed_delay", attempts=30, delay=1.0),
                 Fault(2.0, "kill_task_manager", task_manager="tm-1"), duration=40.0)
    assert result.status is JobStatus.FAILED
    assert "NoResourceAvailableError: Could not acquire the minimum required resources" in (
        f"{type(result.error).__name__}: {result.error}")
    # the restart after the deployment into tm-1's slot failed at 19 s comes after tm-1 is
    # lost (20 s), to a cluster of one slot (Flink would wait slot.request.timeout: README)
    assert f"{type(result.error.__cause__).__name__}: {result.error.__cause__}" == UNREACHABLE
    assert result.duration == pytest.approx(20.0, abs=0.01)
    assert result.invariants["buffers_leaked"] == 0


def test_without_restarts_the_job_fails_with_the_root_cause() -> None:
    result = run(RestartStrategy("none"), fail_work(2.0))
    assert result.status is JobStatus.FAILED
    assert f"{type(result.error).__name__}: {result.error}" == "InjectedFailure: bad record"
    assert result.restart_history == []
    assert result.recovery_suppressed_by == "NoRestartBackoffTimeStrategy"
    assert result.duration < 2.5
    assert result.invariants["buffers_leaked"] == 0


def test_a_failure_beyond_the_attempts_fails_the_job_with_its_cause() -> None:
    result = run(RestartStrategy("fixed_delay", attempts=1, delay=0.5),
                 fail_work(2.0, "first"), fail_work(4.0, "second"))
    assert result.status is JobStatus.FAILED
    assert f"{type(result.error).__name__}: {result.error}" == "InjectedFailure: second"
    assert [r.cause for r in result.restart_history] == ["InjectedFailure: first"]
    assert result.recovery_suppressed_by == ("FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=1, "
                                             "backoffTimeMS=500)")
    assert result.duration < 4.5
    assert result.invariants["buffers_leaked"] == 0


def test_failure_rate_restarts_until_more_failures_than_its_maximum_fall_in_its_interval() -> None:
    two_failures = (fail_work(2.0, "first"), fail_work(4.0, "second"))
    # Flink's defaults: at most 1 failure per minute; the second, 2 s after the first, fails the job
    result = run(RestartStrategy("failure_rate"), *two_failures)
    assert result.status is JobStatus.FAILED
    assert f"{type(result.error).__name__}: {result.error}" == "InjectedFailure: second"
    assert [r.cause for r in result.restart_history] == ["InjectedFailure: first"]
    assert result.restart_history[0].downtime_ms == pytest.approx(1000, abs=50)
    assert result.recovery_suppressed_by == (
        "FailureRateRestartBackoffTimeStrategy(FailureRateRestartBackoffTimeStrategy(failuresIntervalMS=60000,"
        "backoffTimeMS=1000,maxFailuresPerInterval=1)")
    assert result.invariants["buffers_leaked"] == 0
    # at most 1 per second: the failures are 2 s apart, the job restarts after each
    result = run(RestartStrategy("failure_rate", failure_rate_interval=1.0, delay=0.5), *two_failures)
    assert result.status is JobStatus.FINISHED, result.error
    assert [r.cause for r in result.restart_history] == ["InjectedFailure: first", "InjectedFailure: second"]
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == RECORDS


def block_work(at: float, duration: float) -> Fault:
    """Work (1/2)'s user function blocks, ignoring interrupts (on tm-0, with the source)."""
    return Fault(at, "block_task", vertex="Work", subtask=0, duration=duration)


def test_a_restart_waits_for_a_task_stuck_in_user_code() -> None:
    """Flink's scheduler restarts once every task it cancelled has ended: a task whose user
    code ignores the interrupt ends only when that code returns (here 7 s, 4 s after the
    failure), so the downtime is that, not the 0.5 s delay."""
    result = run(RestartStrategy("fixed_delay", delay=0.5), block_work(2.0, 5.0), fail_work(3.0))
    assert result.status is JobStatus.FINISHED, result.error
    [restart] = result.restart_history
    assert (restart.failed_at_s, restart.task) == (pytest.approx(3.0, abs=0.01), "Work (2/2)")
    assert restart.restarted_at_s == pytest.approx(7.0, abs=0.01)
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == RECORDS
    assert result.invariants["buffers_leaked"] == 0


def test_a_task_stuck_past_the_cancellation_timeout_ends_its_task_manager() -> None:
    """task.cancellation.timeout (5 s here) after the cancellation, Flink's watchdog makes
    the stuck task's TaskManager a fatal error: its process ends, the JobManager finds it
    lost after two failed heartbeat RPCs (20 s), and the job restarts on the others."""
    result = run(RestartStrategy("fixed_delay", delay=0.5), block_work(2.0, 100.0), fail_work(3.0),
                 task_managers=3, duration=40.0, task_cancellation_timeout=5.0)
    assert result.status is JobStatus.FINISHED, result.error
    [restart] = result.restart_history
    assert restart.restarted_at_s == pytest.approx(20.0, abs=0.01)  # tm-0 died at 8 s, lost at 20 s
    assert "tm-0" not in {tm for tms in result.placement.values() for tm in tms}
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == RECORDS
    assert result.invariants["task_managers_reported"] == 2


def test_a_task_stuck_when_the_job_fails_is_left_cancelling() -> None:
    """No restart: the job fails; the stuck task has not ended when the run ends (Flink
    reports it CANCELING until it does), holding its buffer."""
    result = run(RestartStrategy("none"), block_work(2.0, 100.0), fail_work(3.0))
    assert result.status is JobStatus.FAILED and result.failed_task == "Work (2/2)"
    assert result.task_states["Work"] == ["CANCELING", "FAILED"]
    assert result.task_states["Source: Gen"] == result.task_states["Check: Writer"] == ["CANCELED"]


def test_each_restart_deploys_new_partition_ids() -> None:
    """A new attempt's partitions carry new random attempt ids: the old ones name nothing."""
    seen: list[set[str]] = []

    async def scenario() -> JobResult:
        from taskmgr.cluster import MiniCluster

        async with kernel.open_nursery() as nursery:
            mini = MiniCluster(ClusterConfig(task_managers=2))
            await mini.start(nursery)

            async def watch() -> None:
                for at in (1.5, 4.5):
                    await kernel.sleep_until(at)
                    seen.append({p.partition_id for tm in mini.task_managers.values()
                                 for p in tm.env.partition_manager.partitions})

            nursery.start_soon(watch)
            nursery.start_soon(_fail_at, mini, 2.0)
            result = await mini.execute(pipeline().get_execution_graph(),
                                        JobConfig(10.0, task_managers=2,
                                                  restart=RestartStrategy("fixed_delay", delay=1.0)))
            await mini.shutdown()
            nursery.cancel_scope.cancel()
        return result

    result = kernel.run(scenario, mode="sim")
    assert len(result.restart_history) == 1
    before, after = seen
    assert len(before) == len(after) == 3  # Gen, and Work's two subtasks
    assert before.isdisjoint(after)


async def _fail_at(mini, at: float) -> None:  # type: ignore[no-untyped-def]
    from taskmgr.faults import inject_faults

    await inject_faults(mini, [fail_work(at)])


def test_an_iteration_that_takes_checkpoints_and_may_restart_is_refused() -> None:
    """Records on a feedback edge are in no checkpoint (as in Flink): no exactly-once restore."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(1.0, force=True)  # Flink refuses iterations with checkpoints otherwise
    iteration = env.from_sequence(1, 10).iterate(max_wait_time="1s")
    iteration.close_with(iteration.map(lambda x: x - 1).filter(lambda x: x > 0))
    job = JobConfig(5.0, task_managers=1, restart=RestartStrategy("fixed_delay"))
    result = kernel.run(run_job, env, ClusterConfig(task_managers=1), job, mode="sim")
    assert result.status is JobStatus.FAILED
    assert "is an iteration" in str(result.error) and result.duration == 0.0


@pytest.mark.parametrize("checkpoints", [False, True])
def test_buffers_the_failed_attempt_left_on_the_link_do_not_reach_the_restarted_channel(checkpoints: bool) -> None:
    """A restarted consumer's channels have new ids (Flink's `InputChannelID`, drawn per
    channel): the old producer's buffers still on a slow link when the new attempt asks for
    its partition are dropped by the consumer's client (it cancels their receiver), not taken
    as the new channel's (which failed the restarted job with a BufferReorderingError)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    if checkpoints:
        env.enable_checkpointing(1.0)
    # Without credit ("tcp") the producer fills the 20 ms, 10 MB/s link with 3 KB records.
    (env.from_generator(record_size=3000, count=3000).name("Gen")
        .rebalance().map(cost="1ms").name("Work").slot_sharing_group("work")
        .sink_to(VerifyingSink("check")).name("Check"))
    network = NetworkConfig(link_latency=0.02, link_bandwidth=10e6, flow_control="tcp")
    job = JobConfig(60, task_managers=2, restart=RestartStrategy("fixed_delay", attempts=1, delay=0.0))
    result = kernel.run(run_job, env, ClusterConfig("sim", 2, 1, network), job, NULL_TRACER, None, None,
                        [Fault(1.0, "fail_task", vertex="Work")], mode="sim")
    assert result.status is JobStatus.FINISHED, result.error
    assert result.invariant_violations() == []
    assert result.verifications["check"]["received"] == 3000
    assert len(result.restart_history) == 1
