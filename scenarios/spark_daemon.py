"""The Python daemon of Spark's executors on a local master: pyspark's own daemon, with
shufflesim's run path imported before it forks any worker (`spark.python.daemon.module`).

Spark forks every Python worker of an executor from one daemon process. pyspark's daemon
imports only pyspark, so each worker imported shufflesim (numpy, pyarrow, plotly, the
runtime: ~1 s of CPU) before its first task; imported here once, the forked workers share
it, and `gc.freeze()` keeps those objects out of the collections every worker makes
(pyspark's worker loop runs `gc.collect()` after each task: ~0.1 s with them, ~0.02 s
without). Only local masters use it: on a cluster the project's code arrives with the tasks
(`addPyFile`), after the daemon started. A local session started a zygote beside its JVM
that has done these imports already (scenarios/spark_zygote.py): the daemon hands its work
to it, and does the work itself only if no zygote takes it.

Spark puts pyspark's own `pyspark.zip` and `py4j-*-src.zip` first on the daemon's path. Those
zips hold sources only, so every daemon compiled pyspark before its first task (~0.7 s of
CPU, on the first job's critical path); `prefer_installed_pyspark` lets the installed copy
beside them, the same release with its bytecode caches, win instead.

Forking is only safe from a process with one thread. Importing these modules starts no
Python thread, but numpy and pyarrow would start native ones (OpenBLAS's pool, Arrow's
jemalloc background thread): `preload` makes two settings before the imports that keep them
from starting (a sim run is single-threaded; each worker has a core of its own).
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """`path` with the zips of an installed pyspark (`<dir>/pyspark/python/lib/*.zip`, `<dir>`
    also on `path`) moved to its end: imports then find that installed pyspark and py4j."""
    def resolved(entry: str) -> Path | None:
        try:
            return Path(entry).resolve()
        except (OSError, RuntimeError):  # a symlink loop: left where it is
            return None

    entries = {str(located) for located in map(resolved, path) if located is not None}

    def bundled(entry: str) -> bool:
        located = resolved(entry)
        return (located is not None and located.suffix == ".zip"
                and located.parent.parts[-3:] == ("pyspark", "python", "lib") and str(located.parents[3]) in entries)

    return [entry for entry in path if not bundled(entry)] + [entry for entry in path if bundled(entry)]


#: Settings that keep numpy's and pyarrow's native libraries from starting threads.
SINGLE_THREADED_NATIVE = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}


def keep_native_libraries_single_threaded() -> None:
    """Set `SINGLE_THREADED_NATIVE` where the environment does not say otherwise."""
    for key, value in SINGLE_THREADED_NATIVE.items():
        os.environ.setdefault(key, value)


def preload() -> None:
    """Keep native libraries single-threaded, then import what the workers run."""
    keep_native_libraries_single_threaded()
    import pyspark.worker  # noqa: F401  (the daemon imports it after each fork otherwise)
    import scenarios.spark_run  # noqa: F401  (a TaskManager of a distributed run)
    import scenarios.sweep  # noqa: F401  (a sweep point: the whole run path, outputs, report)


if __name__ == "__main__":
    from scenarios.spark_zygote import ZYGOTE_VARIABLE, hand_over

    if os.environ.get(ZYGOTE_VARIABLE) and hand_over(os.environ[ZYGOTE_VARIABLE]) is not None:
        sys.exit(0)  # the zygote was the daemon, and has ended
    sys.path[:] = prefer_installed_pyspark(sys.path)
    preload()
    from pyspark import daemon

    gc.freeze()
    daemon.manager()
