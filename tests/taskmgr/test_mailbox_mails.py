"""Mails a Flink task gets without any checkpoint, and what they do to its back-pressure
periods: each mail ends a soft back-pressured (or idle) period, and the task waits again
after it (Flink's MailboxProcessor pauses the suspension timer around every mail). So
Flink's `maxSoftBackPressureTimeMs` of a task back-pressured for seconds on end reads
the gap between two mails: 1,001 ms (the mailbox latency measurement's timer, 1,000 ms
ahead of the millisecond clock, fires a millisecond late), and ~200 ms for a streaming
job's source (its periodic watermark emission, `pipeline.auto-watermark-interval`).
Real Flink 2.3 on slow-sink: source 201-204 ms, maps 1,001-1,002 ms."""

from __future__ import annotations

import pytest

from graph import DiscardingSink, RuntimeExecutionMode, StreamExecutionEnvironment
from shuffle import kernel
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import ClusterConfig, execute, run_job
from taskmgr.faults import Fault
from taskmgr.jobmanager import JobConfig


def behind_a_slow_sink(batch: bool = False) -> StreamExecutionEnvironment:
    """A source and a cheap map, each behind a rebalance, before a sink of 20 ms a record:
    a 32 KiB buffer of ~480 records frees every ~9.6 s, so both wait for seconds at a time."""
    env = StreamExecutionEnvironment.get_execution_environment()
    if batch:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    (env.from_generator(count=10**6 if batch else None).name("Seq").rebalance()
        .map(cost="0.1ms").name("Map").rebalance()
        .map(cost="20ms").name("Slow").sink_to(DiscardingSink()))
    return env


def longest_waits(batch: bool) -> tuple[float, float]:
    result = execute(behind_a_slow_sink(batch), duration=20, task_managers=3 if batch else 1,
                     seed=7).raise_for_status()
    source, cheap = result.vertex_summary("Source: Seq"), result.vertex_summary("Map")
    for vertex in (source, cheap):
        assert vertex["metrics"]["softBackPressuredTimeMsPerSecond"] > 990
    return source["metrics"]["maxSoftBackPressureTimeMs"], cheap["metrics"]["maxSoftBackPressureTimeMs"]


def test_mails_end_every_back_pressured_period_as_in_flink():
    source, cheap = longest_waits(batch=False)
    assert source == pytest.approx(200, abs=0.5)  # the watermark mail, every 200 ms
    assert cheap == pytest.approx(1001, abs=0.5)  # the mailbox latency mail, every 1,001 ms


def test_a_batch_jobs_source_emits_no_periodic_watermarks():
    source, cheap = longest_waits(batch=True)
    assert source == pytest.approx(1001, abs=0.5)  # only the mailbox latency mail splits its waits
    assert cheap == pytest.approx(1001, abs=0.5)


def test_mailbox_mails_per_second_counts_the_timer_mails():
    """Flink's `mailboxMailsPerSecond`: a streaming source's 5 watermark mails and 1 latency
    mail a second, another task's latency mail (1,001 ms apart); with unaligned checkpoints
    every 500 ms, three more a checkpoint: its completion and subsumption notifications
    (TaskExecutor.confirmCheckpoint sends both), and the source's trigger or the other
    task's "process priority event" mail for the barrier (a checkpoint's synchronous part
    is no mail of its own). Real Flink 2.3 on checkpoints-slow-map (every 3 s): map 1.98-2.0. The steady state's last sample, cut at the end
    of the run, may miss one."""
    for interval, per_second in ((None, 0), (0.5, 2)):
        env = behind_a_slow_sink()
        if interval:  # unaligned: barriers overtake the queued buffers, every checkpoint completes
            env.enable_checkpointing(interval).get_checkpoint_config().enable_unaligned_checkpoints()
        result = execute(env, duration=20, task_managers=1, seed=7).raise_for_status()
        source, cheap = result.vertex_summary("Source: Seq"), result.vertex_summary("Map")
        latency_mails = 1000 / 1001
        assert source["metrics"]["mailboxMailsPerSecond"] == pytest.approx(5 + latency_mails + 3 * per_second, abs=0.1)
        assert cheap["metrics"]["mailboxMailsPerSecond"] == pytest.approx(latency_mails + 3 * per_second, abs=0.1)


def test_an_idle_task_woken_by_data_takes_a_resume_mail_each_time():
    """Data that ends a wait comes from another thread in Flink (Netty's), which resumes the
    task's suspended default action with a control mail: a map fed 10 records a second, each
    flushed on its own, takes 10 of them a second besides its latency mail."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_buffer_timeout(0)
    (env.from_generator(rate=10).name("Seq").rebalance().map(cost="1ms").name("Map")
        .sink_to(DiscardingSink()))
    result = execute(env, duration=20, task_managers=1, seed=7).raise_for_status()
    assert result.vertex_summary("Map")["metrics"]["mailboxMailsPerSecond"] == pytest.approx(10 + 1000 / 1001, abs=0.1)


def test_an_injected_pause_is_no_mail():
    """A `pause_task` fault runs in the task's mailbox but stands for a stall (a GC pause, say),
    which Flink's mailbox does not count: a pause of the back-pressured map while its output
    stays unavailable leaves its mails as they were."""
    def mails(*faults: Fault) -> float:
        result = kernel.run(run_job, behind_a_slow_sink(), ClusterConfig(), JobConfig(20, seed=7), NULL_TRACER,
                            None, None, faults, mode="sim").raise_for_status()
        return result.vertex_summary("Map")["metrics"]["mailboxMails"]

    assert mails(Fault(5.0005, "pause_task", vertex="Map", duration=0.001)) == mails() > 0


def test_the_sources_of_a_job_flush_together_and_wake_an_idle_map_once_a_cycle():
    """Flink's output flushers start with their tasks, so a job's flush within ms of each
    other: two sources' buffers (10 records each per 100 ms flush) reach the idle map at
    once, one resume mail per cycle, not two (skewed-keys on Flink 2.3: 13.5-13.8)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(rate=100).name("Seq").set_parallelism(2).rebalance().map(cost="1ms").name("Map") \
        .sink_to(DiscardingSink())
    result = execute(env, duration=20, task_managers=3, seed=7).raise_for_status()
    assert result.vertex_summary("Map")["metrics"]["mailboxMailsPerSecond"] == pytest.approx(10 + 1000 / 1001, abs=0.2)
