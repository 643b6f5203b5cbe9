"""The class-data archive local Spark sessions start from: named for what it fits, used
only when made, and made for real (slow: ~40 s) so that a new JVM maps it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scenarios import spark_class_archive as archive
from scenarios.spark_session import LOCAL_JVM_OPTIONS


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(archive.CACHE_VARIABLE, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_archive_is_named_for_the_java_pyspark_and_options(cache: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = archive.archive_path(LOCAL_JVM_OPTIONS)
    assert path is not None and path.parent == cache and path.suffix == ".jsa"
    assert archive.archive_path(LOCAL_JVM_OPTIONS) == path
    assert archive.archive_path(LOCAL_JVM_OPTIONS + " -XX:+UseParallelGC") != path
    other_java = tmp_path / "jdk" / "bin" / "java"
    other_java.parent.mkdir(parents=True)
    other_java.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert archive.archive_path(LOCAL_JVM_OPTIONS) != path


def test_a_session_maps_the_archive_only_once_it_is_made(cache: Path) -> None:
    assert archive.archive_options(LOCAL_JVM_OPTIONS) == ""  # a missing one would cost the JDK's own
    path = archive.archive_path(LOCAL_JVM_OPTIONS)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert archive.archive_options(LOCAL_JVM_OPTIONS) == f" -XX:SharedArchiveFile={path}"


def test_without_java_no_archive_is_made_and_the_command_says_why(cache: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert archive.archive_path(LOCAL_JVM_OPTIONS) is None and archive.archive_options(LOCAL_JVM_OPTIONS) == ""
    with pytest.raises(archive.ClassArchiveError, match="no Java found"):
        archive.make_archive(LOCAL_JVM_OPTIONS)
    assert archive.main([]) == 1
    assert "Spark class archive not made: no Java found" in capsys.readouterr().err


def test_an_unwritable_cache_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(archive.CACHE_VARIABLE, str(blocker / "cache"))
    with pytest.raises(archive.ClassArchiveError, match="cannot write to"):
        archive.make_archive(LOCAL_JVM_OPTIONS)


def jvm_maps(cache: Path) -> str:
    """In a new process (so a new JVM): start a local session, return the JVM's memory map."""
    probe = textwrap.dedent("""
        from pathlib import Path
        from scenarios.spark_session import spark_session
        spark = spark_session("local[1]")
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        print(Path(f"/proc/{pid}/maps").read_text())
        spark.stop()
    """)
    env = {**os.environ, archive.CACHE_VARIABLE: str(cache)}
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True,
                          timeout=300).stdout


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the JVM's memory map in Linux's /proc")
def test_a_made_archive_is_mapped_by_the_next_session(cache: Path) -> None:
    made = archive.make_archive(LOCAL_JVM_OPTIONS)
    assert made == archive.archive_path(LOCAL_JVM_OPTIONS) and made.stat().st_size > 1_000_000
    assert [p.name for p in cache.iterdir()] == [made.name]  # nothing of the recording left behind
    assert str(made) in jvm_maps(cache)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the JVM's memory map in Linux's /proc")
def test_a_local_session_starts_from_this_machines_archive() -> None:
    path = archive.archive_path(LOCAL_JVM_OPTIONS)
    if path is None or not path.is_file():
        pytest.skip(f"NO SPARK CLASS ARCHIVE at {path}: scripts/test.sh makes it "
                    "(python -m scenarios.spark_class_archive); local sessions start ~4 s slower without it")
    assert str(path) in jvm_maps(archive.cache_dir())
