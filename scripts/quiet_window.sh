#!/usr/bin/env bash
# The timing window whose ratios docs/performance.md quotes ("Quiet-host measurements"): each benchmark step alone
# under one lock file, the host's load average and 1-thread GEMM rate printed beside every step, refused when
# the host is busy. Run it with nothing else of yours on the machine; a job that must run meanwhile takes the
# same lock (`flock $LOCK CMD`), so it waits between steps instead of sharing a step's cores.
#
#   scripts/quiet_window.sh [LOG]       (default artifacts/quiet-window-HHMM.log)
#   DGBENCH_WINDOW_STEPS=models,store-io scripts/quiet_window.sh   (only those steps; keys beside STEPS below)
# Needs the peers extra (`make peers`), the shared real data (DGBENCH_SHARED_DATA, default ../shared/data) and,
# for the DyGLib steps, a DyGLib checkout (DGBENCH_DYGLIB_SRC; those steps are skipped without it).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
LOCK=${DGBENCH_TIMING_LOCK:-/tmp/dgbench-timing.lock}
export DGBENCH_SHARED_DATA=${DGBENCH_SHARED_DATA:-$(cd .. && pwd)/shared/data}
LOG=${1:-artifacts/quiet-window-$(date -u +%H%M).log}
mkdir -p "$(dirname "$LOG")"
exec > >(tee "$LOG") 2>&1
echo "commit $(git rev-parse HEAD) dirty=$(git status --porcelain | wc -l) $(date -u +%FT%TZ)"
$PY -m dgbench.timing quiet-check || { echo "host not quiet: no window"; exit 1; }
NOISE='epoch/s\|it/s\|snap/s\|^$\|Warning\|warn(\|if p.grad\|ev/s'
STEPS=${DGBENCH_WINDOW_STEPS:-all}  # comma list of step keys to run (default all): models dyglib efficiency peer-lastfm
                                    # peer-wiki peer-paper epoch-scale store-io
step() {  # step KEY TITLE TIMEOUT ENV... -- PYTEST-ARGS...
  local key=$1 title=$2 limit=$3; shift 3
  case ",$STEPS," in *",all,"*|*",$key,"*) ;; *) echo; echo "== $key skipped (DGBENCH_WINDOW_STEPS=$STEPS)"; return;; esac
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  echo; echo "== $title  (load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%T)) $($PY -m dgbench.timing gemm-probe)"
  flock "$LOCK" timeout "$limit" env "${envs[@]}" "$PY" -m pytest -q -p no:cacheprovider --benchmark-disable -s "$@" \
    2>&1 | grep -v "$NOISE"
}
step models "WD-GCN against PyG parts, T-GCN against PGT (1 thread a side, 3 alternating rounds)" 420 DGBENCH_PEER_ROUNDS=3 -- \
  benchmarks/test_models_bench.py::test_wdgcn_against_pytorch_geometric \
  benchmarks/test_models_bench.py::test_tgcn_against_pytorch_geometric_temporal
if [ -n "${DGBENCH_DYGLIB_SRC:-}" ]; then
  for data in lastfm wikipedia; do
    step dyglib "DyGLib TGN, $data first 50k" 900 DGBENCH_PEER_EVENTS=50000 DGBENCH_PEER_ROUNDS=3 \
      DGBENCH_PEER_DYGLIB_MODELS=tgn DGBENCH_PEER_DYGLIB_DATA=$data -- benchmarks/test_peer_dyglib.py
  done
else
  echo; echo "== DyGLib steps skipped: DGBENCH_DYGLIB_SRC is not set"
fi
step efficiency "continuous cost per unit of work (Wikipedia first 20k events, 3 rounds)" 600 DGBENCH_EFFICIENCY_EVENTS=20000 \
  DGBENCH_EFFICIENCY_ROUNDS=3 -- benchmarks/test_continuous_efficiency.py
step peer-lastfm "TGN against PyG's, both protocols, LastFM 50k, speed only (example peer)" 900 DGBENCH_PEER_TGN_DATA=lastfm \
  DGBENCH_PEER_TGN_EVENTS=50000 -- benchmarks/test_peer_tgn.py -k "not time_to"
step peer-wiki "TGN against PyG's, both protocols (Wikipedia 10k), with time-to-AP over the three peer forms" 600 \
  DGBENCH_PEER_TGN_DATA=wikipedia DGBENCH_PEER_TGN_EVENTS=10000 -- benchmarks/test_peer_tgn.py
step peer-paper "TGN against PyG's paper-form peer, Wikipedia 10k, speed only" 600 DGBENCH_PEER_TGN_FORM=paper \
  DGBENCH_PEER_TGN_DATA=wikipedia DGBENCH_PEER_TGN_EVENTS=10000 -- benchmarks/test_peer_tgn.py -k "not time_to"
step epoch-scale "TGN epoch per training event at 25k / 100k / 400k events, in memory and streamed" 900 \
  DGBENCH_BENCH_EPOCH_EVENTS=25000,100000,400000 -- benchmarks/test_scale_bench.py -k tgn_epoch_scale
step store-io "store I/O: prepare (TGL, 20M rows) vs pyarrow read_csv, its slope, verified full read vs np.fromfile" 1500 \
  DGBENCH_BENCH_ROWS=20000000 DGBENCH_IO_ROUNDS=3 -- benchmarks/test_store_io.py \
  -k "prepare_vs_read_csv or prepare_time_slope or store_read_vs_fromfile"
echo; echo "load after: $(cat /proc/loadavg) $(date -u +%T) $($PY -m dgbench.timing gemm-probe)"
