#!/usr/bin/env bash
# dgbench as a user installs it: build the wheel from the tracked files, install it in a fresh venv outside
# the repository, and run the README's CLI tour from a scratch folder that has its own `trainers/` folder
# (a generic name a user's project may well have). Exits non-zero if any step fails.
#
#   scripts/wheel_tour.sh [SCRATCH]      (default: a new temporary folder, removed at the end)
#
# Checks, from the installed wheel in that folder: only `dgbench` in site-packages, `dgbench list` shows every
# scheme the checkout registers, the README tour runs, its records cite dgbench's version, the SIS kernel builds.
# Offline: DGBENCH_TOUR_DEPS=SITE_PACKAGES (an environment that has torch, zarr, ... installed) lends the
# dependencies to the fresh venv through a .pth line instead of `pip install` from an index; dgbench itself
# is always the wheel, installed with --no-deps --no-index.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
SCRATCH=${1:-$(mktemp -d)}
trap '[ -z "${1:-}" ] && rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/clone" "$SCRATCH/wheel" "$SCRATCH/work/trainers"
git ls-files -z | xargs -0 -I{} cp --parents {} "$SCRATCH/clone/" 2>/dev/null || true
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$SCRATCH/wheel" "$SCRATCH/clone"
"$PYTHON" -m venv "$SCRATCH/venv"
VENV_SITE=$("$SCRATCH/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -n "${DGBENCH_TOUR_DEPS:-}" ]; then
  echo "$DGBENCH_TOUR_DEPS" > "$VENV_SITE/dgbench-tour-deps.pth"
  "$SCRATCH/venv/bin/pip" install -q --no-deps --no-index "$SCRATCH"/wheel/dgbench-*.whl
else
  "$SCRATCH/venv/bin/pip" install -q "torch==$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo 2.13.0)" \
    || "$SCRATCH/venv/bin/pip" install -q torch
  "$SCRATCH/venv/bin/pip" install -q "$SCRATCH"/wheel/dgbench-*.whl
fi
stray=$(ls "$VENV_SITE" | grep -xE 'loaders|generators|trainers' || true)
[ -z "$stray" ] || { echo "wheel tour: generic top-level packages in site-packages: $stray" >&2; exit 1; }
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
schemes_of() { sed -n '/^schemes:/,/^[a-z]*:$/p' | grep '^  ' | awk '{print $1, $2}' | sort; }
expected=$(cd "$ROOT" && PYTHONPATH="$ROOT" "$SCRATCH/venv/bin/python" -m dgbench list | schemes_of)
installed=$(PATH="$SCRATCH/venv/bin:$PATH" dgbench list | schemes_of)
[ -n "$expected" ] && [ "$installed" = "$expected" ] || {
  diff <(echo "$expected") <(echo "$installed") >&2; echo "wheel tour: dgbench list lacks schemes" >&2; exit 1; }
version=$("$SCRATCH/venv/bin/python" -c 'import dgbench; print(dgbench.__version__)')
grep -qh "\"version\": \"$version\"" runs/tour/*.json \
  || { echo "wheel tour: the tour's records do not cite dgbench $version" >&2; exit 1; }
DGBENCH_SIS_BACKEND=native DGBENCH_KERNEL_CACHE="$SCRATCH/kernels" "$SCRATCH/venv/bin/python" -c '
from dgbench.trainers.continuous.tgcn.sampling import native
assert native.library() is not None, "the SIS kernel did not build"' \
  || { echo "wheel tour: the SIS kernel did not build from the installed sis_kernels.cpp" >&2; exit 1; }
echo "wheel tour: passed from the installed wheel in $SCRATCH/work ($(echo "$installed" | wc -l) schemes listed," \
     "records cite dgbench $version, SIS kernel built)"
