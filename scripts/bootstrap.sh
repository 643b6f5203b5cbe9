#!/usr/bin/env bash
# Creates .venv (if needed) and installs shufflesim into it with its test extras.
# Re-running is cheap: pip only reinstalls when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
# Byte-compile the project's own modules: an editable install leaves them as sources, and
# where PYTHONDONTWRITEBYTECODE is set (as on the machines we develop on) every process compiled them
# again: ~0.25 s of each command's, test process's and Spark daemon's start. Only changed
# files are compiled again.
.venv/bin/python -m compileall -q -j 0 graph shuffle taskmgr scenarios \
  || echo "some modules were not byte-compiled (above); they are compiled as they are imported" >&2
