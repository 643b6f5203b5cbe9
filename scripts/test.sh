#!/usr/bin/env bash
# Installs what the tests need into .venv, then runs the test suite (slow tests excluded;
# pass `-m slow` to run only those, or any other pytest arguments).
# The report tests render report.html in headless Chromium: when no browser is found and
# apt-get can be used (as root), Debian's `chromium` package is installed first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
    && [ -z "${SHUFFLESIM_CHROMIUM:-}" ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing Debian's chromium for the report tests" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
      || echo "could not install chromium: the report tests will fail and say how to install it" >&2
  else
    echo "no chromium: the report tests will fail; install it (apt-get install -y chromium) as root" >&2
  fi
fi
# Local Spark sessions start from a class archive of Spark's classes (~3 s instead of 7-8 s);
# made once per machine (~40 s), kept in ~/.cache/shufflesim. Without it the tests still run;
# a failed attempt is not repeated here (it says why).
.venv/bin/python -m scenarios.spark_class_archive --if-missing \
  || echo "the Spark tests will start their sessions without the class archive" >&2
exec .venv/bin/python -m pytest "$@"
