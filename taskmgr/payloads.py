"""The serialized payloads of RPC messages: code and objects by cloudpickle, tables by Arrow IPC.

The JobManager and the TaskManagers may live in different processes (Spark executors),
so what a message carries beyond plain fields is serialized: the job's JobGraph with
its user functions, failure causes and job reports with cloudpickle (which pyspark
ships; functions of importable modules travel by reference, lambdas and closures by
value), metric tables as an Arrow IPC stream. A payload that does not load is the
peer's protocol error (`RpcError`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


def dump_object(obj: Any) -> bytes:
    """`obj` (code included) as bytes; raises what pickling raises for what cannot travel."""
    from pyspark import cloudpickle

    with _deep_recursion():
        return cloudpickle.dumps(obj)


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
