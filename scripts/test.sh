#!/usr/bin/env bash
# Installs what the tests need into .venv, then runs the test suite (slow tests excluded;
# pass `-m slow` to run only those, or any other pytest arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
