#!/usr/bin/env bash
# dgbench as a user installs it: build the wheel from the tracked files, install it in a fresh venv outside
# the repository, and run the README's CLI tour from a scratch folder that has its own `trainers/` folder
# (a generic name a user's project may well have). Exits non-zero if any step fails.
#
#   scripts/wheel_tour.sh [SCRATCH]      (default: a new temporary folder, removed at the end)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
SCRATCH=${1:-$(mktemp -d)}
trap '[ -z "${1:-}" ] && rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/clone" "$SCRATCH/wheel" "$SCRATCH/work/trainers"
git ls-files -z | xargs -0 -I{} cp --parents {} "$SCRATCH/clone/" 2>/dev/null || true
"$PYTHON" -m pip wheel -q --no-deps -w "$SCRATCH/wheel" "$SCRATCH/clone"
"$PYTHON" -m venv "$SCRATCH/venv"
"$SCRATCH/venv/bin/pip" install -q "torch==$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo 2.13.0)" \
  || "$SCRATCH/venv/bin/pip" install -q torch
"$SCRATCH/venv/bin/pip" install -q "$SCRATCH"/wheel/dgbench-*.whl
echo "# a user's own folder named like one of dgbench's packages" > "$SCRATCH/work/trainers/__init__.py"
# (the README's code block that holds `dgbench list`, without its `source .venv/bin/activate` line)
"$PYTHON" - "$ROOT/README.md" > "$SCRATCH/tour.sh" <<'PY'
import re, sys
blocks = re.findall(r"```bash\n(.*?)```", open(sys.argv[1]).read(), re.S)
print("\n".join(line for line in next(b for b in blocks if "dgbench list" in b).splitlines()
                if not line.startswith("source ")))
PY
grep -q 'dgbench list' "$SCRATCH/tour.sh" || { echo "wheel tour: no tour block found in README.md" >&2; exit 1; }
cd "$SCRATCH/work"
PATH="$SCRATCH/venv/bin:$PATH" DGBENCH_QUIET=1 bash -euo pipefail "$SCRATCH/tour.sh" > "$SCRATCH/tour.log" 2>&1 \
  || { tail -20 "$SCRATCH/tour.log" >&2; echo "wheel tour: the README tour failed from the installed wheel" >&2; exit 1; }
schemes=$(PATH="$SCRATCH/venv/bin:$PATH" dgbench list | grep -c . || true)
version=$(grep -h '"version"' runs/tour/*.json | head -1 || true)
echo "wheel tour: README tour passed from the installed wheel in $SCRATCH/work ($schemes lines of dgbench list; $version)"
