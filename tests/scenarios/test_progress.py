"""Progress during a run: the runtime reports virtual time and records; the printer draws it."""

import io

from graph import DiscardingSink, StreamExecutionEnvironment
from scenarios.progress import ProgressPrinter, StatusLine
from shuffle import kernel
from shuffle.trace import NULL_TRACER
from taskmgr.cluster import PROGRESS_STEPS, ClusterConfig, run_job
from taskmgr.jobmanager import JobConfig


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_runtime_reports_progress_over_the_whole_duration():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(rate=1000).name("Gen").sink_to(DiscardingSink())
    seen = []
    outcome = kernel.run(run_job, env, ClusterConfig(), JobConfig(duration=2.0), NULL_TRACER,
                         lambda job_time, records: seen.append((job_time, records)), mode="sim")
    assert len(seen) == PROGRESS_STEPS and seen[-1][0] == 2.0
    times, records = zip(*seen)
    assert list(times) == sorted(times) and list(records) == sorted(records)
    assert 1900 <= records[-1] <= outcome.records_emitted


def test_the_last_report_is_the_jobs_end():
    """It used to be the last tick before the end: in realtime that tick raced the job's
    release (every CLI run of the library with --set mode=realtime ended its progress on a
    line before the end, or on "6.0/6 s  0 records"); a job that ends early stopped the
    ticks before its last records."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(rate=1000, count=500).name("Gen").sink_to(DiscardingSink())
    seen = []
    outcome = kernel.run(run_job, env, ClusterConfig(), JobConfig(duration=2.0), NULL_TRACER,
                         lambda job_time, records: seen.append((job_time, records)), mode="sim")
    assert outcome.records_emitted == 500 and outcome.duration < 1.0
    assert seen[-1] == (outcome.duration, 500)


def test_a_log_gets_plain_lines_and_a_terminal_a_redrawn_bar():
    log = io.StringIO()
    printer = ProgressPrinter("job", 10.0, log)
    printer(1.0, 100)  # within PLAIN_INTERVAL of the start: not printed
    printer(10.0, 1000)  # the end is always printed
    printer.close()
    (line,) = log.getvalue().splitlines()
    assert line.startswith("job: 10.0/10 s  1,000 records")
    terminal = Terminal()
    printer = ProgressPrinter("job", 10.0, terminal)
    printer._last_print -= 1  # the redraw interval has passed
    printer(5.0, 500)
    printer.close()
    assert terminal.getvalue().startswith("\r[" + "#" * 12 + "." * 12 + "] job: 5.0/10 s  500 records")
    assert terminal.getvalue().endswith("\n")


def test_a_status_line_is_erased_before_other_output_on_a_terminal():
    terminal = Terminal()
    status = StatusLine(terminal)
    status.clear()  # nothing drawn: nothing to erase
    status.show("bench: scale (4/6)...")
    status.clear()
    assert terminal.getvalue() == "\rbench: scale (4/6)...\x1b[K\r\x1b[K"
    log = io.StringIO()
    status = StatusLine(log)
    status.show("bench: scale (4/6)...")
    status.clear()
    assert log.getvalue() == "bench: scale (4/6)...\n"  # a log keeps its lines
