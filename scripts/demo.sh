#!/usr/bin/env bash
# Installs shufflesim into .venv, then runs the main job: the slow-map scenario (the
# backpressure case every Flink user knows), printing its per-vertex report and writing
# its outputs (plan.json, metrics.parquet, summary.json, trace.jsonl, report.html) to
# out/slow-map; the last line it prints is the path of report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/shufflesim run scenarios/library/slow-map.toml --out out/slow-map --trace "$@"
