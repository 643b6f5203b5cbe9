"""Checkpoints after tasks finish (FLIP-147, Flink's default since 1.15): the checkpoint
plan, checkpoints completing while part of the job has finished, a task's final
checkpoint before it ends, exactly-once with sources ending at different times, and a
restart from a checkpoint in which some tasks had finished."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph import StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import NULL_TRACER, Tracer
from taskmgr.checkpointing.checkpoint_plan import (
    NOT_ALL_REQUIRED_TASKS_RUNNING,
    CheckpointPlanError,
    DefaultCheckpointPlanCalculator,
)
from taskmgr.cluster import ClusterConfig, execute, run_job
from taskmgr.deployment import execution_id
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig, JobResult, JobStatus
from taskmgr.operators import VerifyingSink
from taskmgr.restart_strategy import RestartStrategy

INTERVAL = 0.5


def eids(graph, name: str) -> list[str]:
    return [execution_id(ev) for ev in graph.execution_vertices(graph.job_graph.vertex(name))]


# -- the plan ------------------------------------------------------------------------------------

def plan_graph():
    """A (p=2) -forward-> M (p=2) -rebalance-> S (p=1), unchained."""
    env = StreamExecutionEnvironment.get_execution_environment().disable_operator_chaining()
    (env.from_generator().name("A").set_parallelism(2).map().name("M").set_parallelism(2)
        .rebalance().sink_to(VerifyingSink("s")).name("S").set_parallelism(1))
    graph = env.get_execution_graph()
    return graph, eids(graph, "Source: A"), eids(graph, "M"), eids(graph, "S: Writer")


def test_with_every_task_running_the_sources_are_triggered_and_every_task_acknowledges():
    graph, a, m, s = plan_graph()
    plan = DefaultCheckpointPlanCalculator(graph, True).calculate_checkpoint_plan(set())
    assert plan.tasks_to_trigger == tuple(a)
    assert plan.tasks_to_wait_for == tuple(a + m + s) and plan.finished_tasks == ()


def test_after_tasks_finish_the_first_running_tasks_are_triggered_and_finished_ones_count_as_finished():
    graph, a, m, s = plan_graph()
    calculator = DefaultCheckpointPlanCalculator(graph, True)
    # a[0] finished: m[0] reads only a[0] (POINTWISE), m[1] still has a running producer;
    # S reads all of M (ALL_TO_ALL), which runs
    plan = calculator.calculate_checkpoint_plan({a[0]})
    assert plan.tasks_to_trigger == (a[1], m[0])
    assert plan.tasks_to_wait_for == (a[1], *m, *s)
    assert plan.finished_tasks == (a[0],) and plan.fully_finished_vertices == ()
    # all of A and m[0] finished: m[1] is the first running task; S waits for m[1]
    plan = calculator.calculate_checkpoint_plan({*a, m[0]})
    assert plan.tasks_to_trigger == (m[1],)
    assert plan.tasks_to_wait_for == (m[1], *s)
    assert plan.finished_tasks == (*a, m[0]) and plan.fully_finished_vertices == ("Source: A",)
    plan = calculator.calculate_checkpoint_plan({*a, *m})
    assert plan.tasks_to_trigger == plan.tasks_to_wait_for == tuple(s)


def test_with_the_option_off_no_checkpoint_is_planned_once_a_task_finished():
    graph, a, m, s = plan_graph()
    calculator = DefaultCheckpointPlanCalculator(graph, False)
    assert calculator.calculate_checkpoint_plan(set()).tasks_to_trigger == tuple(a)
    with pytest.raises(CheckpointPlanError, match=NOT_ALL_REQUIRED_TASKS_RUNNING):
        calculator.calculate_checkpoint_plan({a[0]})


# -- jobs ------------------------------------------------------------------------------------------

def two_sources(after_tasks_finish: bool = True, unaligned: bool = False, early: int = 2000,
                late: int = 8000, rate: float = 2000, map_p: int = 2) -> StreamExecutionEnvironment:
    """Early (ends after early/rate s) and Late (late/rate s) -> union -> Work -> verifying sink."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(INTERVAL)
    config = env.get_checkpoint_config().enable_checkpoints_after_tasks_finish(after_tasks_finish)
    if unaligned:
        config.enable_unaligned_checkpoints()
    first = env.from_generator(rate=rate, count=early).name("Early")
    second = env.from_generator(rate=rate, count=late).name("Late")
    (first.union(second).rebalance().map(cost="0.2ms").name("Work").set_parallelism(map_p)
        .rebalance().sink_to(VerifyingSink("check")).name("Check"))
    return env


def triggered_tasks(tracer: Tracer) -> dict[int, list[str]]:
    return {e["checkpoint"]: e["tasks"] for e in tracer.events if e["event"] == "checkpoint_triggered"}


def test_checkpoints_go_on_after_one_source_finished_and_are_triggered_at_the_running_one():
    env = two_sources()
    graph = env.get_execution_graph()
    tracer = Tracer()
    result = execute(env, duration=30, task_managers=3, slots_per_task_manager=2, tracer=tracer).raise_for_status()
    early_end = result.vertex_end_times["Source: Early"]
    assert 1.0 < early_end < 2.0 and result.vertex_end_times["Source: Late"] > 4.0
    triggered = triggered_tasks(tracer)
    after = [c for c in result.checkpoints if c["trigger_s"] > early_end + 0.01]
    assert len(after) >= 4
    for checkpoint in after:
        assert checkpoint["status"] == "COMPLETED", checkpoint
        assert checkpoint["finished_tasks"] == 1 and checkpoint["acknowledged"] == 5
        assert triggered[checkpoint["id"]] == eids(graph, "Source: Late")
        assert checkpoint["exactly_once"]["ok"] and checkpoint["exactly_once"]["expected"] > 0
    before = [c for c in result.checkpoints if c["trigger_s"] < 1.0]
    assert all(triggered[c["id"]] == eids(graph, "Source: Early") + eids(graph, "Source: Late") for c in before)
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == 10000


def test_a_task_whose_predecessors_finished_is_triggered_itself():
    """Gen ends at once; Fast has passed everything on but waits until Slow has processed
    it (seconds): checkpoints in between start at Fast, persisting its output queue."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(INTERVAL)
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    (env.from_generator(count=5000).name("Gen").rebalance().map().name("Fast").slot_sharing_group("m")
        .rebalance().map(cost="1ms").name("Slow").slot_sharing_group("s").sink_to(VerifyingSink("check")))
    graph = env.get_execution_graph()
    tracer = Tracer()
    result = execute(env, duration=30, task_managers=3, tracer=tracer).raise_for_status()
    triggered = triggered_tasks(tracer)
    at_fast = [c for c in result.checkpoints if triggered[c["id"]] == eids(graph, "Fast")]
    assert len(at_fast) >= 5
    assert all(c["status"] == "COMPLETED" and c["finished_tasks"] == 1 and c["exactly_once"]["ok"] for c in at_fast)
    assert sum(c["persisted_bytes"] for c in at_fast) > 0  # Fast's queue to Slow, overtaken
    assert result.vertex_end_times["Source: Gen"] < 1.0 < result.vertex_end_times["Fast"]


def test_a_bounded_job_ends_after_its_final_checkpoint_and_ends_at_once_with_the_option_off():
    tracer_on, tracer_off = Tracer(), Tracer()
    on = execute(two_sources(early=2000, late=2000), duration=30, task_managers=3, slots_per_task_manager=2,
                 tracer=tracer_on).raise_for_status()
    off = execute(two_sources(False, early=2000, late=2000), duration=30, task_managers=3, slots_per_task_manager=2,
                  tracer=tracer_off).raise_for_status()
    for result in (on, off):
        assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == 4000
    data_end = 1.0  # 2,000 records at 2,000/s
    # off: the tasks end with their data; on: at the end of the first checkpoint after it
    assert data_end < off.duration < data_end + 0.05
    final = min((c for c in on.checkpoints if c["trigger_s"] > data_end), key=lambda c: c["trigger_s"])
    final_end = final["trigger_s"] + final["duration_ms"] / 1000
    assert final["status"] == "COMPLETED" and final["finished_tasks"] == 0
    assert final_end < on.duration < final_end + 0.01
    assert all(end >= final_end for end in on.vertex_end_times.values())
    assert on.duration - off.duration == pytest.approx(final_end - off.duration, abs=0.01)
    # off keeps today's behaviour: no checkpoint completes after a task finished
    assert all(c["trigger_s"] < data_end for c in off.checkpoints if c["status"] == "COMPLETED")


def test_with_the_option_off_checkpoints_fail_once_a_source_finished():
    result = execute(two_sources(False), duration=30, task_managers=3, slots_per_task_manager=2).raise_for_status()
    early_end = result.vertex_end_times["Source: Early"]
    assert early_end == pytest.approx(1.0, abs=0.01)  # no final checkpoint to wait for
    after = [c for c in result.checkpoints if c["trigger_s"] > early_end]
    assert after and all(c["status"] == "FAILED" and c["failure"].startswith(NOT_ALL_REQUIRED_TASKS_RUNNING)
                         for c in after)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(unaligned=st.booleans(), early=st.integers(200, 2000), gap=st.sampled_from([0, 1500, 2500]),
       map_p=st.integers(1, 3))
def test_every_checkpoint_accounts_for_every_record_exactly_once_while_sources_finish(unaligned, early, gap, map_p):
    late = early + gap
    env = two_sources(unaligned=unaligned, early=early, late=late, rate=1000, map_p=map_p)
    result = execute(env, duration=30, task_managers=3, slots_per_task_manager=3).raise_for_status()
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert completed and all(c["exactly_once"]["ok"] for c in completed), result.checkpoints
    if gap:  # Late runs on for more than two intervals after Early finished
        assert any(c["finished_tasks"] for c in completed)
    assert result.duration < 30  # ended by itself
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == early + late


def test_a_restart_restores_a_finished_source_as_finished():
    """Work fails after Early finished: the job restarts from a checkpoint in which Early
    was finished; Early comes back at its end (it emits nothing, sends EndOfData and
    waits for a final checkpoint again) and every record is counted once."""
    job = JobConfig(30, task_managers=3, restart=RestartStrategy("fixed_delay", attempts=1, delay=0.5))
    result: JobResult = kernel.run(run_job, two_sources(), ClusterConfig(task_managers=3, slots_per_task_manager=2),
                                   job, NULL_TRACER, None, None,
                                   (Fault(2.3, "fail_task", vertex="Work", subtask=0, message="bad"),), mode="sim")
    assert result.status is JobStatus.FINISHED, result.error
    [restart] = result.restart_history
    restored = max((c for c in result.checkpoints if c["status"] == "COMPLETED" and c["trigger_s"] < 2.3),
                   key=lambda c: c["id"])
    assert restored["finished_tasks"] == 1
    # only Late's records after the checkpoint come again (under a checkpoint interval's worth)
    assert 0 < restart.records_replayed <= INTERVAL * 2000 + 200
    assert result.verifications["check"] == {"received": 10000, "out_of_order": 0, "duplicates": 0,
                                             "missing": 0, "ok": True}
    assert result.records_emitted == result.records_received == 10000
    after_restart = [c for c in result.checkpoints if c["trigger_s"] > restart.restarted_at_s]
    assert after_restart and all(c["exactly_once"]["ok"] for c in after_restart if c["status"] == "COMPLETED")
    # the restored Early finishes again (after its final checkpoint in the new attempt)
    assert result.vertex_end_times["Source: Early"] > restart.restarted_at_s


@pytest.mark.parametrize("after_tasks_finish", [True, False])
def test_a_finished_task_sends_end_of_data_before_end_of_partition_whatever_the_option(after_tasks_finish):
    """Flink's `endData` broadcasts EndOfData on every output whether or not checkpoints go on
    after tasks finish: each remote channel of a bounded job carries two events at its end."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.get_checkpoint_config().enable_checkpoints_after_tasks_finish(after_tasks_finish)
    env.from_generator(count=500).name("Gen").rebalance().sink_to(VerifyingSink("check")).name("Check")
    tracer = Tracer()
    result = execute(env, duration=10, task_managers=2, slots_per_task_manager=1, tracer=tracer).raise_for_status()
    assert result.verifications["check"]["ok"] and result.verifications["check"]["received"] == 1000
    events: dict[str, int] = {}
    for e in tracer.of("buffer_sent"):
        if e["data_type"] == "EVENT_BUFFER":
            events[e["channel"]] = events.get(e["channel"], 0) + 1
    assert events and set(events.values()) == {2}


def test_a_source_waiting_for_its_final_checkpoint_counts_as_busy_as_in_flink():
    """At END_OF_INPUT Flink suspends the default action without a timer and runs the mailbox
    until the final checkpoint: no idle or back-pressure timer runs, so the wait shows as
    busy time (busyTimeMsPerSecond = 1000 - idle - back-pressured)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(4.0)
    env.get_checkpoint_config().set_min_pause_between_checkpoints(3.9)  # the first at 3.9-4 s
    env.from_generator(count=200).name("Gen").rebalance().map().name("M").sink_to(VerifyingSink("check"))
    cluster = ClusterConfig(task_managers=2)
    job = JobConfig(30, sample_period=0.5, task_managers=2)
    result = kernel.run(run_job, env, cluster, job, NULL_TRACER, mode="sim").raise_for_status()
    source_end = result.vertex_end_times["Source: Gen"]
    assert source_end > 3.9  # data ends at once; the final checkpoint comes seconds later
    rows = [r for r in result.metrics.to_pylist()
            if r["vertex"] == "Source: Gen" and 0.5 <= r["t"] <= source_end - 0.5]
    busy = [r["value"] for r in rows if r["metric"] == "busyTimeMsPerSecond"]
    idle = [r["value"] for r in rows if r["metric"] == "idleTimeMsPerSecond"]
    assert len(busy) >= 6 and all(b == 1000 for b in busy) and all(i == 0 for i in idle)
