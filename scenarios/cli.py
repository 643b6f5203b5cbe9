"""The `shufflesim` command: run, plan, sweep, report, compare, trace, bench, fuzz, flink-reference.

User mistakes (a missing file, a bad key or value, an unknown program) print one line
`shufflesim: error: ...` and exit with code 2; a job that fails prints its root cause and
exits with code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from graph import (
    IllegalArgumentException,
    IllegalStateException,
    JobException,
    StreamExecutionEnvironment,
    UnsupportedOperationException,
    plan_json,
    render_plan,
    to_dot,
)
from scenarios.build import build_program, call_program, compile_errors_named, load_program
from scenarios.channels import TraceFileError
from scenarios.outputs import RunFolderError, steady_state_window
from scenarios.interrupt import stop_on_signals, terminate_as_interrupt
from scenarios.progress import ProgressPrinter, StatusLine
from scenarios.scenario_file import Scenario, ScenarioError, load_scenario, stage_key

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: `--master serial`: a sweep's points one by one in this process, without Spark.
SERIAL = "serial"


class UserError(Exception):
    """A mistake on the command line or in the files it names."""


def _path(text: str) -> str:
    """A file or folder argument: not empty (an empty --out would write into the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return text


def _out_file(text: str) -> str:
    """An output file argument: a path, not an existing folder."""
    if Path(_path(text)).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shufflesim")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shufflesim", description="Simulate Flink's network data exchange.")
    parser.add_argument("--version", action="version", version=f"shufflesim {_version()}",
                        help="print shufflesim's version")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a scenario and write its outputs",
                              description="Run a scenario file; write plan.json, metrics.parquet, summary.json, "
                                          "report.html (and trace.jsonl with --trace) into --out, print a "
                                          "per-vertex table.",
                              epilog="Ctrl-C (or SIGTERM) stops the run early and writes complete outputs that "
                                     "say so; a second one aborts without outputs. Exit codes: 0 done, 1 the job "
                                     "failed or an invariant broke, 2 a mistake in the command or the scenario, "
                                     "130 stopped by Ctrl-C.")
    run.add_argument("scenario", type=_path, metavar="SCENARIO", help="scenario file (.toml)")
    run.add_argument("--out", type=_path, required=True, metavar="DIR", help="output folder")
    run.add_argument("--trace", action="store_true", help="also write trace.jsonl (network events)")
    run.add_argument("--quiet", action="store_true", help="no progress while the run goes on")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario key, e.g. network.buffer_timeout=10ms (repeatable)")
    run.add_argument("--engine", choices=("local", "spark"), default="local",
                     help="local: everything in this process (default); spark: the JobManager here, each "
                          "TaskManager in a Spark executor task (realtime mode)")
    run.add_argument("--master", metavar="URL",
                     help="Spark master for --engine spark: local[*] (default), local[N], spark://HOST:PORT, yarn, "
                          "k8s://...")
    run.add_argument("--verbose", action="store_true",
                     help="show Spark's own log (also: SHUFFLESIM_SPARK_VERBOSE=1)")

    plan = commands.add_parser("plan", help="print the compiled graphs of a program or scenario",
                               description="Print the StreamGraph, JobGraph and ExecutionGraph of a DataStream "
                                           "program ('module:function' taking a StreamExecutionEnvironment) "
                                           "or of a scenario file; for a scenario also where the run will place "
                                           "each subtask and which of its channels are local or remote.")
    plan.add_argument("program", type=_path, metavar="PROGRAM_OR_SCENARIO",
                      help="a scenario file (.toml), or a program 'module:function' (the module is looked up "
                           "from the current folder)")
    output = plan.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print plan.json's content instead")
    output.add_argument("--dot", action="store_true", help="print the JobGraph in Graphviz DOT instead")
    plan.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="override a scenario key (scenario files only)")

    report = commands.add_parser("report", help="(re)make a run's report.html from its files",
                                 description="Write report.html (plots of the run) into a run folder.")
    report.add_argument("run_dir", type=_path, metavar="RUN_DIR", help="the --out folder of a run")
    report.add_argument("--out", type=_out_file, metavar="FILE", help="write here instead of RUN_DIR/report.html")

    compare = commands.add_parser("compare", help="what differs between runs (settings, steady state)",
                                  description="Print the settings and steady-state results that differ between "
                                              "runs (changes against the first); write an HTML page with the "
                                              "runs' plots overlaid.")
    compare.add_argument("run_dirs", type=_path, nargs="+", metavar="RUN_DIR",
                         help="--out folders of runs (two or more)")
    compare.add_argument("--out", type=_out_file, default="compare.html", metavar="FILE",
                         help="the HTML comparison (default: compare.html in the current folder)")

    trace = commands.add_parser("trace", help="write a run's Perfetto / Chrome trace (trace.perfetto.json)",
                                description="Convert a run's metrics.parquet (task states) and trace.jsonl "
                                            "(channels, with --trace) into trace-event JSON for ui.perfetto.dev.")
    trace.add_argument("run_dir", type=_path, metavar="RUN_DIR", help="the --out folder of a run")
    trace.add_argument("--out", type=_out_file, metavar="FILE",
                       help="write here instead of RUN_DIR/trace.perfetto.json")
    sweep = commands.add_parser("sweep", help="run every point of a sweep file (on Spark) and collect the results",
                                description="Run each point of a sweep file (a scenario and a grid of overrides) as "
                                            "one sim run in a Spark task; write DIR/results.parquet (one row per "
                                            "point and vertex), DIR/points/<point>/ (each run's files) and "
                                            "DIR/sweep.png; print a table. Exit code 1 if a point failed, 2 for a mistake in "
                                            "the command or the sweep file; Ctrl-C (or SIGTERM) cancels the points "
                                            "running, writes no results, says which points are done and exits "
                                            "with 130.")
    sweep.add_argument("sweep", type=_path, metavar="SWEEP", help="sweep file (.toml)")
    sweep.add_argument("--out", type=_path, required=True, metavar="DIR", help="output folder")
    sweep.add_argument("--master", default="local[*]", metavar="URL",
                       help="Spark master: local[*] (default), local[N], spark://HOST:PORT, yarn, k8s://...; "
                            f"'{SERIAL}' runs the points one by one in this process, without Spark")
    sweep.add_argument("--quiet", action="store_true", help="print no progress")

    bench = commands.add_parser("bench", help="print performance figures as JSON lines",
                                description="Compute performance figures; one JSON object per line on stdout, "
                                            "which figure is being computed on stderr.")
    bench.add_argument("figures", nargs="*", metavar="FIGURE",
                       help="figures to compute (default: all; an unknown name lists them)")
    bench.add_argument("--quiet", action="store_true", help="print no progress (on stderr)")

    reference = commands.add_parser(
        "flink-reference", help="run a scenario's job on real Flink 2.3 and read its metrics",
        description="Run the scenario's job (a generator source, maps, filters, flat_maps and key_by_reduces, a sink; each with its "
                    "cost) "
                    "on real Flink 2.3 in a local MiniCluster and read its metrics over REST, one reading a "
                    "second after a warm-up; write DIR/flink.json (readings, per-subtask means, checkpoint "
                    "statistics) and DIR/flink.log, print the means (beside a shufflesim run's steady state "
                    "with --compare). Needs a JDK 17+; installs Flink from PyPI (apache-flink-libraries, "
                    "~330 MB) into ~/.cache/shufflesim on first use ($SHUFFLESIM_FLINK_HOME elsewhere).")
    reference.add_argument("scenario", type=_path, metavar="SCENARIO", help="scenario file (.toml)")
    reference.add_argument("--out", type=_path, required=True, metavar="DIR", help="output folder")
    reference.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                           help="override a scenario key (repeatable)")
    reference.add_argument("--warmup", type=float, default=60.0, metavar="S",
                           help="seconds before the first reading (default 60: Flink's rates are 60 s meters)")
    reference.add_argument("--seconds", type=float, default=30.0, metavar="S",
                           help="seconds of readings, one a second (default 30)")
    reference.add_argument("--jvm-warm-up", type=int, default=0, metavar="N",
                           help="first run the job bounded to N records, without costs, in the same JVM "
                                "(default 0: none): the job then starts in a warm JVM")
    reference.add_argument("--flink-log", choices=("error", "info", "debug"), default="info",
                           help="what Flink writes to DIR/flink.log: info (default: task states, deployment, "
                                "checkpoints), debug (also its network stack's partition requests, each task's "
                                "barriers and checkpoint steps), error")
    reference.add_argument("--compare", type=_path, metavar="RUN_DIR",
                           help="a shufflesim run of the scenario (its --out folder) to print beside Flink's means")
    reference.add_argument("--quiet", action="store_true", help="print no progress")

    fuzz = commands.add_parser("fuzz", help="fuzz the Netty and RPC decoders with mutated frames",
                               description="Feed mutated valid frames and random bytes to the decoders of peer "
                                           "bytes; exit 1 if one raises anything but its protocol's error.")
    fuzz.add_argument("--inputs", type=int, metavar="N", help="inputs in total (default: 100000 unless --seconds)")
    fuzz.add_argument("--seconds", type=float, metavar="S", help="stop after S seconds")
    fuzz.add_argument("--seed", type=int, default=0, help="seed of the mutations (default 0)")
    fuzz.add_argument("--out", type=_path, default="fuzz-findings", metavar="DIR",
                      help="where inputs that raised another exception are saved (default fuzz-findings)")
    fuzz.add_argument("--replay", type=_path, metavar="FILE",
                      help="decode one saved input (a .bin in --out) again and show what it raises; "
                           "takes no --inputs or --seconds")
    for command in commands.choices.values():  # for its own usage errors after parsing
        command.set_defaults(command_parser=command)
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line. Arguments nothing takes are the command's usage error, with a hint
    where they are likely the rest of a `--set` value the shell split at a space."""
    args, extra = _parser().parse_known_args(argv)
    if extra:
        split = getattr(args, "overrides", None) and not any(arg.startswith("-") for arg in extra)
        hint = " (a --set value with a space goes in quotes: --set 'KEY=10 ms')" if split else ""
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def _load_target(target: str, overrides: Sequence[str]) -> tuple[Scenario | None, StreamExecutionEnvironment]:
    """The scenario (None for a `module:function`) and its program."""
    module_file, _, function_name = target.partition(":")
    if module_file.endswith(".py"):
        module = Path(module_file).stem
        raise UserError(f"{target}: a Python file; give the program as 'module:function', e.g. "
                        f"{module}:{function_name or 'build'} (the module is looked up from the current folder)")
    if target.endswith(".toml") or Path(target).is_file():
        scenario = load_scenario(target, overrides)
        return scenario, build_program(scenario)
    if overrides:
        raise UserError("--set applies to scenario files only")
    module_name, sep, function_name = target.partition(":")
    if not sep or not module_name or not function_name:
        raise UserError(f"{target}: not a scenario file, nor a program 'module:function'")
    if not all(part.isidentifier() for part in module_name.split(".")):  # a path, not a (dotted) module
        raise UserError(f"{target}: no such file")
    function = load_program(target, target, str(Path.cwd()))
    env = StreamExecutionEnvironment.get_execution_environment()
    call_program(function, env, target)
    return None, env


def _plan(args: argparse.Namespace) -> int:
    from scenarios.placement import plan_placement, scenario_plan_json

    scenario, env = _load_target(args.program, args.overrides)
    with compile_errors_named(args.program):
        if args.json:
            plan = json.dumps(plan_json(env) if scenario is None else scenario_plan_json(scenario, env), indent=2)
        elif args.dot:
            plan = to_dot(env.get_job_graph())
        else:
            plan = render_plan(env)
            if scenario is not None:
                plan += "\n\n" + plan_placement(scenario, env.get_execution_graph()).render()
    print(plan)
    return 0


def _run(args: argparse.Namespace) -> int:
    from scenarios.report import REPORT_FILE
    from scenarios.outputs import failure_origin
    from scenarios.run import OutputDirError, format_checkpoints, format_restarts, format_table, run_scenario

    scenario = load_scenario(args.scenario, args.overrides)
    _warn_of_late_events(scenario)
    _warn_of_unused_settings(scenario)
    if args.engine == "local" and args.master is not None:
        raise UserError(f"--master {args.master} needs --engine spark")
    if args.engine == "local" and args.verbose:
        raise UserError("--verbose shows Spark's log: it needs --engine spark")
    args.master = args.master or "local[*]"
    _check_master(args.master)
    engine = _spark_engine(args, scenario) if args.engine == "spark" else None
    progress = None if args.quiet else ProgressPrinter(scenario.name, scenario.duration, sys.stderr)
    try:
        with stop_on_signals() as stop:
            try:
                outcome = run_scenario(scenario, Path(args.out), trace=args.trace, progress=progress,
                                       should_stop=stop, engine=engine)
            except Exception:
                if stop.aborted:  # the error of a simulation torn by the second signal
                    raise KeyboardInterrupt from None
                raise
    except OutputDirError as e:
        raise UserError(str(e)) from None
    finally:
        if progress is not None:
            progress.close()
        if engine is not None:
            engine.spark.stop()
    for folder in outcome.stale_removed:
        print(f"shufflesim: removed {folder}: the unfinished outputs of an earlier run that was killed "
              "(its process is gone)", file=sys.stderr)
    summary = outcome.summary
    where = "" if engine is None else f", {len(summary['cluster']['task_managers'])} TaskManagers on Spark {args.master}"
    print(f"{scenario.name}: {summary['status']} after {summary['duration_s']:.3f} s ({scenario.mode} mode{where})")
    if "interrupted" in summary:
        print(f"stopped early at t = {summary['interrupted']['at_s']:.3f} s: the outputs cover the run until then")
    print(format_table(summary))
    if "steady_state_from_s" in summary:
        print(f"steady state (this table, latency_ms): {steady_state_window(summary)}")
    checkpoints = format_checkpoints(summary)
    if checkpoints is not None:
        print(checkpoints)
    records = summary["records"]
    print(f"records emitted {records['emitted']}, received {records['received']}")
    restarts = format_restarts(summary)
    if restarts is not None:
        print(restarts)
    origin = failure_origin(summary["failure"]) if "failure" in summary else ""
    if origin:
        print(f"failed{origin}")
    for violation in summary["invariants"]["violations"]:
        print(f"invariant broken: {violation}")
    print(f"outputs in {args.out}")
    print(f"report {Path(args.out) / REPORT_FILE}")
    if "error" in summary:
        print(f"shufflesim: job failed: {summary['error']}", file=sys.stderr)
        return EXIT_FAILED
    if "interrupted" in summary:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if summary["invariants"]["violations"] else 0


def _warn_of_late_events(scenario: Any) -> None:
    """A fault or cost change at or after the end of the run never happens: likely a shortened `duration`."""
    timed = [(f"faults[{i}] at", fault.at) for i, fault in enumerate(scenario.faults)]
    timed += [(f"{stage_key(i, stage.name)}.cost_changes[{j}] from", change.start)
              for i, stage in enumerate(scenario.job.stages) for j, change in enumerate(stage.cost_changes)]
    for what, at in timed:
        if at >= scenario.duration:
            print(f"shufflesim: warning: {scenario.source_path}: {what} {at:g} s is not before the end "
                  f"of the run ({scenario.duration:g} s): it will not happen", file=sys.stderr)


def _warn_of_unused_settings(scenario: Any) -> None:
    """A setting of the simulated link in a realtime run does nothing: likely a sim scenario run with mode=realtime."""
    for key in scenario.unused_settings():
        print(f"shufflesim: warning: {scenario.source_path}: {key} is for sim mode: a {scenario.mode} run sends "
              "over real TCP and does not use it", file=sys.stderr)


def _spark_engine(args: argparse.Namespace, scenario: Any) -> Any:
    """A SparkEngine for `run --engine spark`, once the scenario is known to run on it."""
    from scenarios.spark_run import SparkEngine, SparkSlotsError, check_runnable_on_spark, check_slots

    check_runnable_on_spark(scenario, args.trace)
    if not args.quiet:
        print(f"starting Spark ({args.master}) ...", file=sys.stderr, flush=True)
    spark = _start_spark(args.master, args.verbose)
    try:
        check_slots(spark, args.master, scenario.cluster.task_managers)
    except SparkSlotsError as e:
        spark.stop()
        raise UserError(str(e)) from None
    return SparkEngine(spark, args.master)


def _written(write: Callable[[], Path]) -> Path:
    """The file `write` wrote; a folder or file it cannot write is the user's mistake."""
    try:
        return write()
    except OSError as e:
        raise UserError(f"{e.filename or 'output'}: cannot write: {e.strerror}") from None


def _report(args: argparse.Namespace) -> int:
    from scenarios.report import write_report

    print(f"report {_written(lambda: write_report(args.run_dir, args.out))}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from scenarios.compare import compare_runs, format_comparison, write_comparison

    if len(args.run_dirs) < 2:
        raise UserError("compare needs two or more run folders")
    comparison = compare_runs(args.run_dirs)
    print(format_comparison(comparison))
    print(f"\ncomparison {_written(lambda: write_comparison(comparison, args.out))}")
    return 0


def _trace(args: argparse.Namespace) -> int:
    from scenarios.perfetto import write_perfetto

    path = _written(lambda: write_perfetto(args.run_dir, args.out))
    print(f"trace {path} (open it in ui.perfetto.dev)")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from scenarios.run import OutputDirError, make_out_dir
    from scenarios.sweep import POINTS_DIR, run_sweep
    from scenarios.sweep_file import load_sweep
    from scenarios.sweep_report import SweepProgress, format_results_table

    _check_master(args.master, serial_ok=True)
    sweep = load_sweep(args.sweep)
    try:
        make_out_dir(Path(args.out))
    except OutputDirError as e:
        raise UserError(str(e)) from None
    if not args.quiet:
        print(f"{args.sweep}: {len(sweep.points)} points of {sweep.scenario_path}", flush=True)
    with terminate_as_interrupt():
        spark = None
        if args.master != SERIAL:
            if not args.quiet:
                print(f"starting Spark ({args.master}) ...", flush=True)
            spark = _start_spark(args.master)
        progress = None if args.quiet else SweepProgress()
        try:
            outcome = run_sweep(sweep, Path(args.out), spark, progress)
        except KeyboardInterrupt:
            if progress is not None:
                progress.close()
            print(f"shufflesim: interrupted: {_points_left(Path(args.out), len(sweep.points))}", file=sys.stderr)
            return EXIT_INTERRUPTED
        finally:
            if progress is not None:
                progress.close()
            if spark is not None:
                spark.stop()
    print(format_results_table(outcome.results, sweep.keys))
    points = outcome.out_dir / POINTS_DIR
    ran = points.is_dir() and any(points.iterdir())
    print(f"results in {outcome.results_path}" + (f", each point's run in {points}" if ran else
                                                  " (no point ran: no run folders)"))
    if outcome.failed:
        print(f"shufflesim: {len(outcome.failed)} of {len(outcome.results)} points failed:", file=sys.stderr)
        for result in outcome.failed:
            print(f"  {result.point}: {result.status}: {result.error}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _points_left(out: Path, total: int) -> str:
    """What an interrupted sweep leaves: which points are done and where, that it has no results."""
    from scenarios.sweep import POINTS_DIR, RESULTS_FILE, points_done

    done = points_done(out)
    if not done:
        return f"no point of {total} was done; no {RESULTS_FILE} (a sweep writes it once every point has run)"
    shown = ", ".join(done[:10]) + (f", ... ({len(done) - 10} more)" if len(done) > 10 else "")
    return (f"{len(done)} of {total} points done ({shown}), their runs in {out.resolve() / POINTS_DIR}; "
            f"no {RESULTS_FILE} (a sweep writes it once every point has run)")


def _check_master(master: str, serial_ok: bool = False) -> None:
    """A --master Spark would refuse (after seconds of starting, with a Java stack trace) is refused here."""
    if master == "yarn" or master.startswith(("local", "spark://", "k8s://")) or (serial_ok and master == SERIAL):
        return
    forms = "local[*], local[N], spark://HOST:PORT, yarn, k8s://..." + (f" or '{SERIAL}'" if serial_ok else "")
    raise UserError(f"--master {master}: not a Spark master ({forms})")


def _start_spark(master: str, verbose: bool = False) -> Any:
    """A SparkSession on `master`; a master Spark cannot start on (or that does not answer) is the user's mistake."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from scenarios.spark_master import unreachable_master
    from scenarios.spark_session import root_cause, spark_session

    problem = unreachable_master(master)
    if problem is not None:
        raise UserError(f"--master {master}: {problem}")
    try:
        return spark_session(master, verbose=verbose)
    except (Py4JError, PySparkException, RuntimeError) as e:
        raise UserError(f"--master {master}: Spark did not start: {root_cause(e)}") from None


def _bench(args: argparse.Namespace) -> int:
    from scenarios.bench import run_figures

    status = StatusLine(sys.stderr)

    def starting(name: str, k: int, n: int) -> None:
        if not args.quiet:
            status.show(f"bench: {name} ({k}/{n})...")

    try:
        for figure in run_figures(args.figures or None, starting):
            status.clear()
            print(json.dumps(figure), flush=True)
    except KeyError as e:
        raise UserError(e.args[0]) from None
    finally:
        status.clear()
    return 0


def _fuzz(args: argparse.Namespace) -> int:
    import time

    from scenarios.fuzz import ReplayError, format_report, fuzz, replay

    if args.replay:
        if args.inputs is not None or args.seconds is not None:
            raise UserError("--replay decodes one saved input: it takes no --inputs or --seconds")
        try:
            decoded, outcome = replay(Path(args.replay))
        except ReplayError as e:
            raise UserError(str(e)) from None
        print(f"{args.replay}: {decoded} messages decoded, then {outcome}")
        return 0
    if (args.inputs is not None and args.inputs < 1) or (args.seconds is not None and args.seconds <= 0):
        raise UserError("--inputs and --seconds must be positive")
    inputs = 100_000 if args.inputs is None and args.seconds is None else args.inputs
    start = time.monotonic()
    reports = fuzz(inputs, args.seconds, args.seed, Path(args.out))
    print(format_report(reports, time.monotonic() - start))
    return EXIT_FAILED if any(r.findings for r in reports.values()) else 0


def _flink_reference(args: argparse.Namespace) -> int:
    import math
    import time

    import trio

    from scenarios.flink_reference.compare import format_table
    from scenarios.flink_reference.job_args import latency_operator, reference_args
    from scenarios.flink_reference.runner import FlinkReferenceError, run_reference
    from scenarios.progress import PLAIN_INTERVAL
    from scenarios.report.data import load_summary
    from scenarios.run import check_runnable

    if args.warmup < 0 or args.seconds <= 0:
        raise UserError("--warmup must be >= 0 and --seconds positive")
    if args.jvm_warm_up < 0:
        raise UserError("--jvm-warm-up must be >= 0")
    scenario = load_scenario(args.scenario, args.overrides)
    job_args = reference_args(scenario) + [f"warmUpRecords={args.jvm_warm_up}"]
    with compile_errors_named(scenario.source_path):
        check_runnable(scenario, build_program(scenario).get_execution_graph())
    summary = None if args.compare is None else load_summary(args.compare)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: not a folder")
    out.mkdir(parents=True, exist_ok=True)
    status = StatusLine(sys.stderr)
    shown_at = -math.inf

    def say(text: str) -> None:
        """Progress: redrawn on a terminal, else a line at most every PLAIN_INTERVAL seconds."""
        nonlocal shown_at
        now = time.monotonic()
        if not args.quiet and (status.on_terminal or now - shown_at >= PLAIN_INTERVAL):
            status.show(f"{scenario.name}: {text}")
            shown_at = now

    try:
        result = trio.run(run_reference, job_args, latency_operator(job_args), args.warmup, args.seconds,
                          out / "flink.log", say, args.flink_log)
    except FlinkReferenceError as e:
        raise UserError(str(e)) from None
    finally:
        status.close()
    (out / "flink.json").write_text(json.dumps({"scenario": str(scenario.source_path), **result}, indent=1))
    print(format_table(result["subtasks"], summary))
    for vertex, task_managers in result["placement"].items():
        print(f"Flink placed {vertex} on {', '.join(task_managers)}")
    print(f"outputs in {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    command = {"run": _run, "plan": _plan, "sweep": _sweep, "report": _report, "compare": _compare,
               "trace": _trace, "bench": _bench, "fuzz": _fuzz, "flink-reference": _flink_reference}[args.command]
    try:
        return command(args)
    except (UserError, ScenarioError, RunFolderError, TraceFileError, UnsupportedOperationException,
            IllegalStateException, IllegalArgumentException, JobException) as e:
        print(f"shufflesim: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("shufflesim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (`shufflesim plan ... | head`): not an error.
        sys.stdout = open(os.devnull, "w")
        return 0


if __name__ == "__main__":
    sys.exit(main())
