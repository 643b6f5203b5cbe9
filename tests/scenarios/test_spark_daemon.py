"""The Python daemon that local Spark masters fork their workers from: it must be a
process of one thread when it forks (a thread's locks would be held forever in a child)."""

import subprocess
import sys
from pathlib import Path

import pytest

from scenarios.spark_daemon import prefer_installed_pyspark

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
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True,
                          timeout=60)
    assert int(done.stdout) == 1


def test_the_zips_of_an_installed_pyspark_go_last(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    bundled = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    other_zip = str(tmp_path / "deps.zip")  # a user's own zip stays where it is
    path = ["", *bundled, other_zip, str(tmp_path / "userFiles"), str(site)]
    assert prefer_installed_pyspark(path) == ["", other_zip, str(tmp_path / "userFiles"), str(site), *bundled]


def test_the_zips_stay_first_when_no_installed_pyspark_is_on_the_path(tmp_path: Path) -> None:
    lib = tmp_path / "spark-home" / "pyspark" / "python" / "lib"
    path = [str(lib / "pyspark.zip"), str(tmp_path / "elsewhere")]
    assert prefer_installed_pyspark(path) == path


def test_a_path_entry_that_cannot_be_resolved_stays_where_it_is(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)  # resolving it raises
    site = tmp_path / "site-packages"
    bundled = str(site / "pyspark" / "python" / "lib" / "pyspark.zip")
    assert prefer_installed_pyspark([str(loop), bundled, str(site)]) == [str(loop), str(site), bundled]
