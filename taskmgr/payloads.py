"""The serialized payloads of RPC messages: code and objects by cloudpickle, tables by Arrow IPC.

The JobManager and the TaskManagers may live in different processes (Spark executors),
so what a message carries beyond plain fields is serialized: the job's JobGraph with
its user functions, failure causes and job reports with cloudpickle (which pyspark
ships; functions of importable modules travel by reference, lambdas and closures by
value), metric tables as an Arrow IPC stream. A payload that does not load is the
peer's protocol error (`RpcError`). Code travels named relative to the project (or by its
file's bare name), so payloads, and the runs they time, do not depend on where the project
is checked out.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from types import CodeType
from typing import Any

import pyarrow as pa

from taskmgr.rpc import RpcError


#: Pickle recurses through the object graph: the JobGraph of a pipeline of 300 vertices
#: (vertex -> data set -> edge -> vertex ...) needs more than Python's default 1,000 levels.
RECURSION_LIMIT = 20_000


@contextmanager
def _deep_recursion() -> Iterator[None]:
    """Python's recursion limit raised to RECURSION_LIMIT meanwhile (the pickle is the same)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


#: Where the project's packages are: code of files under it is named relative to it.
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


def portable_filename(filename: str) -> str:
    """The name a code object travels with: relative to the project for its own files, the
    bare file name for others. A payload (its size is a message's time on a simulated link)
    is then the same wherever the project is checked out, and so is a run's trace."""
    path = Path(filename)
    if not path.is_absolute():
        return filename
    try:
        return path.relative_to(_PROJECT_ROOT).as_posix()
    except ValueError:
        return path.name


def _same(code: CodeType) -> CodeType:
    """Loads a renamed code object (pickled as `_same(code)`: the code is its own value)."""
    return code


@lru_cache(maxsize=1)
def _pickler() -> type:
    """cloudpickle's pickler, naming code by `portable_filename` (pyspark loads lazily)."""
    from pyspark import cloudpickle

    class PortablePickler(cloudpickle.CloudPickler):
        def reducer_override(self, obj: Any) -> Any:
            if type(obj) is CodeType and Path(obj.co_filename).is_absolute():
                return _same, (obj.replace(co_filename=portable_filename(obj.co_filename)),)
            return super().reducer_override(obj)

        def _function_getnewargs(self, func: Any) -> Any:
            # the module attributes a function by value takes along (its globals' base)
            code, base_globals, *rest = super()._function_getnewargs(func)
            if isinstance(base_globals.get("__file__"), str):
                base_globals["__file__"] = portable_filename(base_globals["__file__"])
            if isinstance(base_globals.get("__path__"), list):
                base_globals["__path__"] = [portable_filename(path) for path in base_globals["__path__"]]
            return (code, base_globals, *rest)

    return PortablePickler


def dump_object(obj: Any) -> bytes:
    """`obj` (code included) as bytes; raises what pickling raises for what cannot travel."""
    from pyspark import cloudpickle

    out = io.BytesIO()
    with _deep_recursion():
        _pickler()(out, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    return out.getvalue()


def load_object(data: bytes, what: str) -> Any:
    """The object `dump_object` gave `data` for; `RpcError` naming `what` if it does not load."""
    from pyspark import cloudpickle

    try:
        with _deep_recursion():
            return cloudpickle.loads(data)
    except Exception as exc:
        raise RpcError(f"cannot load the {what} payload: {type(exc).__name__}: {exc}") from None


def dump_exception(exc: BaseException) -> bytes | None:
    """`exc` as bytes, or None if it does not pickle (its text still travels)."""
    try:
        return dump_object(exc)
    except Exception:
        return None


def dump_table(table: pa.Table) -> bytes:
    """`table` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def load_table(data: bytes) -> pa.Table:
    """The table of an Arrow IPC stream; `RpcError` if it is not one."""
    try:
        return pa.ipc.open_stream(data).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise RpcError(f"cannot load a metrics table payload: {exc}") from None
