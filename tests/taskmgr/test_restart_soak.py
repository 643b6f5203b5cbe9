"""Soak (issue 11): a keyed job takes a checkpoint every 10 s and suffers a fault every 5
minutes for a virtual hour, restarting from its last checkpoint each time; at the end every
record is counted once, every buffer is back and every completed checkpoint accounts for
every record exactly once. A two-minute version runs in the default suite."""

from __future__ import annotations

import itertools

import pytest

from graph import StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobResult, JobStatus
from taskmgr.operators import VerifyingSink
from taskmgr.restart_strategy import RestartStrategy

#: What goes wrong, in turn: user code in the map and in the sink, the connection
#: between the two TaskManagers the job spans, a frame corrupted on it.
FAULTS = (
    lambda at: Fault(at, "fail_task", vertex="Work", subtask=0, message="bad record"),
    lambda at: Fault(at, "drop_connection", between=("tm-0", "tm-1")),
    lambda at: Fault(at, "fail_task", vertex="Check", subtask=0, message="sink error"),
    lambda at: Fault(at, "corrupt_frame", between=("tm-0", "tm-1")),
)


def soak(duration: float, checkpoint_interval: float, fault_every: float, unaligned: bool,
         map_cost: str = "1ms", sample_period: float = 1.0) -> JobResult:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(checkpoint_interval)
    if unaligned:
        env.get_checkpoint_config().enable_unaligned_checkpoints()
    # unthrottled sources, back-pressured by the map (two subtasks of `map_cost` a record)
    (env.from_generator().name("Gen").set_parallelism(2).key_by(lambda r: r.key)
        .map(cost=map_cost).name("Work").set_parallelism(2).slot_sharing_group("work")
        .rebalance().sink_to(VerifyingSink("check")).name("Check"))
    kinds = itertools.cycle(FAULTS)
    faults = [next(kinds)(at) for at in range(int(fault_every), int(duration), int(fault_every))]
    job = JobConfig(duration, task_managers=2, sample_period=sample_period,
                    restart=RestartStrategy("fixed_delay", attempts=len(faults), delay=1.0))
    return kernel.run(run_job, env, ClusterConfig(task_managers=2, slots_per_task_manager=2), job,
                      NULL_TRACER, None, None, faults, mode="sim")


def check_soak(result: JobResult, faults: int) -> None:
    assert result.status is JobStatus.FINISHED, result.error
    assert result.invariant_violations() == []
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] > 0
    assert result.invariants["buffers_leaked"] == 0
    assert len(result.restart_history) == faults
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert completed and all(c["exactly_once"]["ok"] for c in completed)
    print(f"\nsoak: {len(result.restart_history)} restarts, {len(completed)} of {len(result.checkpoints)} "
          f"checkpoints completed, {result.verifications['check']['received']} records, replayed "
          f"{sum(r.records_replayed for r in result.restart_history)}, downtime "
          f"{sum(r.downtime_ms for r in result.restart_history):.0f} ms")


@pytest.mark.parametrize("unaligned", [False, True])
def test_two_minutes_of_faults_every_thirty_seconds(unaligned: bool) -> None:
    check_soak(soak(120, 10, 30, unaligned), faults=3)


@pytest.mark.slow
@pytest.mark.parametrize("unaligned", [False, True])
def test_a_virtual_hour_of_checkpoints_every_10_s_and_a_fault_every_5_minutes(unaligned: bool) -> None:
    # 200 records/s and metrics every 10 s: the verifying sink's state (every sequence
    # number it received) travels in each acknowledgement, and an hour of metrics in the
    # final report; both must stay under the RPC's 10 MiB frame
    check_soak(soak(3600, 10, 300, unaligned, map_cost="10ms", sample_period=10.0), faults=11)
