"""The Python daemon that local Spark masters fork their workers from: it must be a
process of one thread when it forks (a thread's locks would be held forever in a child)."""

import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import os
from scenarios.spark_daemon import preload
preload()
print(len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts threads in Linux's /proc")
def test_the_preloaded_daemon_has_one_thread_when_it_forks():
    env = {key: value for key, value in __import__("os").environ.items()
           if key not in ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    assert int(done.stdout) == 1
