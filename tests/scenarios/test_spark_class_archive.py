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


needs_java = pytest.mark.skipif(archive.java_executable() is None, reason="no Java: the archive is named for one")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(archive.CACHE_VARIABLE, str(tmp_path / "cache"))
    return tmp_path / "cache"


@needs_java
def test_the_archive_is_named_for_the_java_spark_and_options(cache: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = archive.archive_path(LOCAL_JVM_OPTIONS)
    assert path is not None and path.parent == cache and path.suffix == ".jsa"
    assert archive.archive_path(LOCAL_JVM_OPTIONS) == path
    assert archive.archive_path(LOCAL_JVM_OPTIONS + " -XX:+UseParallelGC") != path
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "another-spark"))
    assert archive.archive_path(LOCAL_JVM_OPTIONS) != path
    monkeypatch.delenv("SPARK_HOME")
    other_java = tmp_path / "jdk" / "bin" / "java"
    other_java.parent.mkdir(parents=True)
    other_java.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert archive.archive_path(LOCAL_JVM_OPTIONS) != path


@needs_java
def test_a_session_maps_the_archive_only_once_it_is_made(cache: Path) -> None:
    assert archive.archive_options(LOCAL_JVM_OPTIONS) == ""  # a missing one would cost the JDK's own
    path = archive.archive_path(LOCAL_JVM_OPTIONS)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert archive.archive_options(LOCAL_JVM_OPTIONS) == f" -XX:SharedArchiveFile={path}"


@needs_java
@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_an_unreadable_cache_starts_sessions_without_the_archive(cache: Path) -> None:
    cache.mkdir()
    cache.chmod(0)
    try:
        assert archive.archive_options(LOCAL_JVM_OPTIONS) == ""
    finally:
        cache.chmod(0o700)


def test_without_java_no_archive_is_made_and_the_command_says_why(cache: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert archive.archive_path(LOCAL_JVM_OPTIONS) is None and archive.archive_options(LOCAL_JVM_OPTIONS) == ""
    with pytest.raises(archive.ClassArchiveError, match="no Java found"):
        archive.make_archive(LOCAL_JVM_OPTIONS)
    assert archive.main([]) == 1
    err = capsys.readouterr().err
    assert "Spark class archive not made: no Java found" in err and "Making" not in err


def fake_recording(monkeypatch: pytest.MonkeyPatch, stdout: str, writes: bytes | None) -> list[list[str]]:
    """Replace the recording child: it prints `stdout` and (if `writes`) leaves that archive."""
    calls: list[list[str]] = []

    def run(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        if writes is not None:
            Path(command[-1]).write_bytes(writes)
        return subprocess.CompletedProcess(command, 0, stdout=stdout, stderr="")

    monkeypatch.setattr(archive.subprocess, "run", run)
    return calls


@needs_java
def test_a_recording_without_an_archive_says_what_the_jvm_said_and_leaves_nothing(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = (f"{archive._PID_LINE} 999999999\n"
              "[0.5s][error][cds] Error: non-empty directory '/etc/spark/conf'\n")
    fake_recording(monkeypatch, stdout, writes=None)
    with pytest.raises(archive.ClassArchiveError, match="non-empty directory '/etc/spark/conf'"):
        archive.make_archive(LOCAL_JVM_OPTIONS)
    assert list(cache.iterdir()) == []


@needs_java
def test_a_recording_is_moved_into_place_once_its_jvm_ended(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_recording(monkeypatch, f"{archive._PID_LINE} 999999999\n", writes=b"classes")
    made = archive.make_archive(LOCAL_JVM_OPTIONS)
    assert made.read_bytes() == b"classes" and [p.name for p in cache.iterdir()] == [made.name]


@needs_java
def test_if_missing_neither_remakes_an_archive_nor_retries_a_failure(
        cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = fake_recording(monkeypatch, "the session printed no pid\n", writes=None)
    assert archive.main([]) == 1
    assert "did not say which JVM it ran" in capsys.readouterr().err and len(calls) == 1
    assert archive.main(["--if-missing"]) == 1  # not tried again: says why, and how to retry
    err = capsys.readouterr().err
    assert "not made before: the recording session did not say which JVM it ran" in err and len(calls) == 1
    fake_recording(monkeypatch, f"{archive._PID_LINE} 999999999\n", writes=b"classes")
    assert archive.main([]) == 0  # tried again without --if-missing: made, and the failure forgotten
    assert archive.main(["--if-missing"]) == 0 and "(exists)" in capsys.readouterr().out
    assert [p.suffix for p in cache.iterdir()] == [".jsa"]


@needs_java
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
                          timeout=120).stdout


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
    assert str(path) in jvm_maps(archive.cache_dir()), \
        f"a new JVM did not map {path}: stale? make it again (python -m scenarios.spark_class_archive)"
