"""The hidden folder a run writes its outputs into before it moves them into --out.

It is named `.partial-<host>-<pid>-<random>` after the process writing it. A run ended
outright (kill -9, a crash) leaves it behind; a later run into the same folder removes it
once that process is gone. A folder of a process still alive (another run into the same
folder) or of another host (a shared file system) is left alone, as is one that does not
carry a process in its name.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

PREFIX = ".partial-"


def make_staging(out_dir: Path) -> Path:
    """A new staging folder in `out_dir`, named after this process."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{socket.gethostname()}-{os.getpid()}-", dir=out_dir))


def _writer_pid(folder: Path) -> int | None:
    """The process of this host that made `folder` (None: another host's, or not named after one)."""
    host, _, rest = folder.name.removeprefix(PREFIX).rpartition("-")[0].rpartition("-")
    return int(rest) if host == socket.gethostname() and rest.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_staging(out_dir: Path) -> list[Path]:
    """Remove the staging folders in `out_dir` whose process is gone; returns them."""
    removed = []
    for folder in sorted(Path(out_dir).glob(f"{PREFIX}*")):
        pid = _writer_pid(folder)
        if folder.is_dir() and pid is not None and not _alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
