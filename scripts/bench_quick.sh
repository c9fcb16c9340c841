#!/usr/bin/env bash
# Quick pass of the benchmark suite for CI: every benchmark in benchmarks/ runs on small sizes with one
# timed round and no warm-up, the pytest-benchmark JSON report is written, and the pass fails unless
# pytest passed AND every collected benchmark is in the report (so a benchmark silently skipped or
# never timed is caught). It does not use --benchmark-compare-fail: on a regression that option exits
# with a traceback and no pytest summary line, which CI must not depend on. `make bench` is the full run.
#
#   scripts/bench_quick.sh [REPORT.json]        (default artifacts/bench.json)
# Sizes: DGBENCH_BENCH_EDGES / DGBENCH_BENCH_ROWS (default 200000 here), DGBENCH_BENCH_QUICK=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
REPORT=${1:-artifacts/bench.json}
export DGBENCH_BENCH_QUICK=1
export DGBENCH_BENCH_EDGES=${DGBENCH_BENCH_EDGES:-200000}
export DGBENCH_BENCH_ROWS=${DGBENCH_BENCH_ROWS:-200000}
mkdir -p "$(dirname "$REPORT")"
rm -f "$REPORT"

status=0
"$PYTHON" -m pytest -q benchmarks \
  --benchmark-min-rounds=1 --benchmark-max-time=0 --benchmark-min-time=0 --benchmark-warmup=off \
  --benchmark-json="$REPORT" --junitxml="${REPORT%.json}-junit.xml" -rs || status=$?

COLLECTED=$("$PYTHON" -m pytest -q --collect-only benchmarks | grep '::' || true) \
"$PYTHON" - "$REPORT" "$status" "${REPORT%.json}-junit.xml" <<'PY'
import json, os, sys
import xml.etree.ElementTree as ET
from pathlib import Path

report, status, junit = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
collected = {line.strip() for line in os.environ["COLLECTED"].splitlines() if "::" in line}
if not report.exists():
    sys.exit(f"bench: no report at {report} (pytest exit {status})")
timed = {b["fullname"] for b in json.loads(report.read_text())["benchmarks"] if b["stats"]["rounds"] >= 1}
# A benchmark that skips itself with a reason (e.g. an optional peer library is absent) is listed, not failed.
skipped = {}
if junit.exists():
    for case in ET.parse(junit).iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            node = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
            skipped[node] = skip.get("message", "")
for name, reason in sorted(skipped.items()):
    print(f"bench: skipped: {name}: {reason}")
missing = sorted(collected - timed - set(skipped))
for name in missing:
    print(f"bench: not timed: {name}", file=sys.stderr)
print(f"bench: {len(timed)} benchmarks timed, {len(skipped)} skipped with a reason, {len(missing)} missing, "
      f"pytest exit {status}; report {report}")
sys.exit(1 if status or missing else 0)
PY
