"""Random jobs (tests/taskmgr/chaos_jobs.py): each seed draws a bounded, lossless job with
its network configuration, checkpointing and faults; it must finish with every record
verified, no invariant broken and, with exactly-once checkpoints, every completed
checkpoint consistent. Random programs (tests/taskmgr/chaos_programs.py) of Python
functions, union, connect, broadcast, side outputs, keyed sums and count windows must
collect what plain Python computes. A few seeds run by default, many more with `-m slow`;
a campaign over other seeds:
`SHUFFLESIM_CHAOS_SEEDS=1000:2000 .venv/bin/python -m pytest -m slow
tests/taskmgr/test_chaos_jobs.py` (a failing seed prints its job)."""

from __future__ import annotations

import os

import pytest

from taskmgr.jobmanager import JobResult, JobStatus
from tests.taskmgr.chaos_jobs import draw, run_chaos_job
from tests.taskmgr.chaos_programs import draw_program, expected, run_program, summary

DEFAULT_SEEDS = range(0, 12)
#: Seeds whose jobs found a bug, run by default too: 1394 loses a TaskManager right after the
#: job ended (its report with it); 3089 has checkpoint 13's unaligned barrier overtake 12's.
FOUND_BUGS = (1394, 3089)
SLOW_SEEDS = range(12, 400)


def _seeds() -> range:
    given = os.environ.get("SHUFFLESIM_CHAOS_SEEDS")
    if not given:
        return SLOW_SEEDS
    low, _, high = given.partition(":")
    return range(int(low), int(high or int(low) + 1))


def ran_to_its_end(seed: int, drawn: str, result: JobResult) -> str:
    """The drawn job finished before its duration; what a failing assertion shows of it."""
    where = f"seed {seed}:\n{drawn}"
    assert result.status is JobStatus.FINISHED, f"{where}\n{result.error}"
    assert result.ended_early, f"{where}\nits sources did not finish within {result.duration} s"
    return where


def check(seed: int) -> None:
    job = draw(seed)
    result = run_chaos_job(job)
    where = ran_to_its_end(seed, job.describe(), result)
    violations = result.invariant_violations()
    if job.spare_task_managers and len(violations) == 1 and "sent no report" in violations[0]:
        return  # the TaskManager was lost after the job ended, its report with it
    assert violations == [], where
    emitted = sum(source["count"] * source["parallelism"] for source in job.sources)
    report = result.verifications["chaos"]
    assert report["missing"] == 0 and report["received"] >= emitted, where
    if job.checkpoints is not None and job.checkpoints["mode"] != "at_least_once":
        inconsistent = [c for c in result.checkpoints
                        if c["status"] == "COMPLETED" and not c["exactly_once"]["ok"]]
        assert inconsistent == [], where


@pytest.mark.parametrize("seed", [*DEFAULT_SEEDS, *FOUND_BUGS])
def test_a_random_job_finishes_with_every_record_once(seed: int) -> None:
    check(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds())
def test_many_random_jobs_finish_with_every_record_once(seed: int) -> None:
    check(seed)


def check_program(seed: int, mode: str = "sim") -> None:
    program = draw_program(seed)
    result = run_program(program, mode)
    where = ran_to_its_end(seed, program.describe(), result)
    assert result.invariant_violations() == [], where
    got, want = summary(program, result.collected), expected(program)
    assert got == want, f"{where}\ncollected {got}"[:3000]


@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_a_random_program_collects_what_python_computes(seed: int) -> None:
    check_program(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds())
def test_many_random_programs_collect_what_python_computes(seed: int) -> None:
    check_program(seed)


@pytest.mark.tcp
@pytest.mark.parametrize("seed", range(0, 6))
def test_a_random_program_over_tcp_collects_what_python_computes(seed: int) -> None:
    """Realtime mode, the TaskManagers' connections over loopback TCP (not deterministic: the
    result must not depend on timing)."""
    check_program(seed, "realtime")
