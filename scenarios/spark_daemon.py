"""The Python daemon of Spark's executors on a local master: pyspark's own daemon, with
shufflesim's run path imported before it forks any worker (`spark.python.daemon.module`).

Spark forks every Python worker of an executor from one daemon process. pyspark's daemon
imports only pyspark, so each worker imported shufflesim (numpy, pyarrow, plotly, the
runtime: ~1 s of CPU) before its first task; imported here once, the forked workers share
it, and `gc.freeze()` keeps those objects out of the collections every worker makes
(pyspark's worker loop runs `gc.collect()` after each task: ~0.1 s with them, ~0.02 s
without). Only local masters use it: on a cluster the project's code arrives with the tasks
(`addPyFile`), after the daemon started. Importing these modules starts no Python thread;
the native ones numpy and pyarrow start (OpenBLAS's pool, jemalloc's background thread)
reset themselves in a forked child.
"""

from __future__ import annotations

import gc

import pyspark.worker  # noqa: F401  (the daemon imports it after each fork otherwise)
import scenarios.spark_run  # noqa: F401  (a TaskManager of a distributed run)
import scenarios.sweep  # noqa: F401  (a sweep point: the whole run path, outputs, report)
from pyspark import daemon

if __name__ == "__main__":
    gc.freeze()
    daemon.manager()
