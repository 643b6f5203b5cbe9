"""Payloads are the same wherever the project is checked out: code travels named relative to
the project (other files by their bare name), so a job's payload, whose size is the deploy
message's time on a simulated link, and with it a run's trace do not depend on the path."""

import types

from scenarios.bench_scale import all_to_all
from taskmgr.payloads import _PROJECT_ROOT, dump_object, load_object, portable_filename

HERE = "tests/taskmgr/test_payloads.py"


def test_code_travels_named_relative_to_the_project():
    offset = 3
    payload = dump_object(lambda x: x + offset)
    assert str(_PROJECT_ROOT).encode() not in payload
    function = load_object(payload, "code")
    assert function(1) == 4
    assert function.__code__.co_filename == HERE
    assert function.__globals__["__file__"] == HERE


def test_a_job_graph_carries_no_path_of_the_checkout():
    payload = dump_object(all_to_all(4).get_job_graph())  # its key selector is a lambda
    assert str(_PROJECT_ROOT).encode() not in payload
    assert b"scenarios/bench_scale.py" in payload


def test_code_of_other_files_travels_by_its_file_name():
    path = "/home/someone/experiments/job.py"
    namespace = {"__file__": path, "__name__": "job"}
    exec(compile("def double(x):\n    return (lambda y: y * 2)(x)\n", path, "exec"), namespace)
    payload = dump_object(namespace["double"])
    assert b"/home/someone" not in payload
    double = load_object(payload, "code")
    assert double(3) == 6
    inner = next(c for c in double.__code__.co_consts if isinstance(c, types.CodeType))
    assert double.__code__.co_filename == inner.co_filename == "job.py"


def test_portable_filenames():
    assert portable_filename(str(_PROJECT_ROOT / "graph" / "x.py")) == "graph/x.py"
    assert portable_filename("/elsewhere/y.py") == "y.py"
    assert portable_filename("<string>") == "<string>"
