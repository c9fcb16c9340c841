#!/usr/bin/env bash
# Reference rows of the repository's leaderboard: every scheme on the official generated stores, and accuracy
# rows (three seeds, baselines beside the models) on the demo's default and on real data; then every official
# throughput and scaling row is reproduced once with `dgbench verify`, so the board's Reproduced column is filled.
#
#   scripts/seed_board.sh [BOARD]        (default: leaderboards; run from a clean checkout on a quiet host)
#
# Each run writes a sealed record under runs/seed/ and is submitted without --allow-dirty, so the
# board cites the commit that produced it. The records are CPU baselines (hardware class in every
# row); they show the harness end to end, not the papers' GPU numbers.
#
# Clean timing (leaderboards/RULES.md): the script refuses to start, in one line, when the host is loaded
# beyond the rule's bound (`python -m dgbench.timing quiet-check`), and refuses a second copy of itself (one
# job at a time: the runs below go one after another, never in parallel). Before each run it waits up to
# QUIET_WAIT_S seconds (default 120) for the host to be quiet again; a run that still comes out contended is
# filed but listed unranked with its reason. Throughput and scaling runs train 6 epochs (1 warm-up + 5 timed).
#
# SEED_TRACKS=timing re-seeds only what the throughput and scaling tracks rank (every scheme once, the models'
# single runs with seed 0) and keeps the board's accuracy rows: the accuracy seeds and real-data rows are skipped.
set -euo pipefail
BOARD=${1:-leaderboards}
BIN=${BIN:-.venv/bin}
RUNS=runs/seed
QUIET_WAIT_S=${QUIET_WAIT_S:-120}
SEED_TRACKS=${SEED_TRACKS:-all}
ACCURACY_SEEDS="0 1 2"
[ "$SEED_TRACKS" = timing ] && ACCURACY_SEEDS="0"
export DGBENCH_QUIET=1

exec 9>"${TMPDIR:-/tmp}/dgbench-seed-board.lock"
if ! flock -n 9; then
  echo "refused: another scripts/seed_board.sh is running (one job at a time)" >&2
  exit 1
fi
"$BIN/python" -m dgbench.timing quiet-check || exit 1

wait_quiet() {  # up to QUIET_WAIT_S seconds for the host to be quiet; then run anyway (the record says how it went)
  local waited=0
  until "$BIN/python" -m dgbench.timing quiet-check --seconds 2 >/dev/null 2>&1; do
    waited=$((waited + 2))
    if [ "$waited" -ge "$QUIET_WAIT_S" ]; then
      echo "note: host still loaded after ${QUIET_WAIT_S}s; running anyway (a contended record is not ranked)" >&2
      return 0
    fi
  done
}

"$BIN/dgbench" prepare esdg-random --overwrite --out stores/esdg-random.zarr
"$BIN/dgbench" prepare esdg-random --nodes 2048 --overwrite --out stores/esdg-random-n2048.zarr
"$BIN/dgbench" prepare stream --overwrite --out stores/stream.zarr
rm -rf "$RUNS"

run() { wait_quiet; "$BIN/dgbench" run --epochs 6 --out "$RUNS/" "$@" | tail -1; }

# Discrete time (ESDG): accuracy over three seeds, then every scheme and the weak-scaling ladder.
for model in tmgcn evolvegcn-o cdgcn; do
  for seed in $ACCURACY_SEEDS; do run --scheme single --model "$model" --dataset stores/esdg-random.zarr --seed "$seed"; done
done
run --scheme checkpoint --model tmgcn --dataset stores/esdg-random.zarr --nb 4
run --scheme checkpoint --model tmgcn --dataset stores/esdg-random.zarr --nb 4 --transfer gd
for scheme in snapshot vertex; do  # one rank, then two: strong (same store) and weak (N grows with P)
  run --scheme "$scheme" --model tmgcn --dataset stores/esdg-random.zarr --nproc 1
  run --scheme "$scheme" --model tmgcn --dataset stores/esdg-random.zarr --nproc 2
  run --scheme "$scheme" --model tmgcn --dataset stores/esdg-random-n2048.zarr --nproc 2
done

# The DGC/BLAD model zoo under single, DGC's schemes (PSS, PTS, PGC) beside snapshot (DGC's PSS-TS) on T-GCN, and
# BLAD (snapshot groups; its own group protocol) beside snapshot and vertex under the same group protocol on WD-GCN.
for model in tgcn wdgcn mpnn-lstm dysat; do
  run --scheme single --model "$model" --dataset stores/esdg-random.zarr
done
for scheme in snapshot pss pts dgc; do
  run --scheme "$scheme" --model tgcn --dataset stores/esdg-random.zarr --nproc 2
done
for scheme in blad blad-nm snapshot vertex; do
  run --scheme "$scheme" --model wdgcn --dataset stores/esdg-random.zarr --nproc 2 --group-length 4
done
# Continuous time (Sven): accuracy over three seeds, then the four schemes at two ranks.
for model in tgn jodie apan; do
  for seed in $ACCURACY_SEEDS; do run --scheme single --model "$model" --dataset stores/stream.zarr --seed "$seed"; done
done
for scheme in depcache depcomm sven; do
  run --scheme "$scheme" --model tgn --dataset stores/stream.zarr --nproc 2
done
# Streaming T-GCN: DyGNN batch-parallel under single, and the grid scheme on two ranks.
run --scheme single --model dygnn --dataset stores/stream.zarr
run --scheme tgcn --model dygnn --dataset stores/stream.zarr --nproc 2

if [ "$SEED_TRACKS" != timing ]; then
# Accuracy track on data with structure to learn (three seeds each; every seed scores the store's official
# evaluation sets, dgbench/tasks): the demo's generated default, and the baselines beside the models.
"$BIN/dgbench" prepare communities --overwrite --out stores/communities.zarr
for model in tmgcn evolvegcn-o cdgcn persistence; do
  run --scheme single --model "$model" --dataset stores/communities.zarr --seeds 0,1,2 --extra-negatives historical
done

# Real data (../shared/data beside the checkout, or $DGBENCH_SHARED_DATA; skipped when absent), prepared with the
# commands of docs/datasets/. What fits CI time on 2 cores: the snapshot models on CollegeMsg (daily) and EdgeBank
# on Wikipedia. TGN, JODIE and APAN on Wikipedia take 15-50 min per epoch and evaluation on 2 shared cores; their
# reference rows come from `dgbench run --scheme single --model tgn --dataset stores/wikipedia.zarr --epochs 3
# --seeds 0,1,2 --extra-negatives historical,inductive` on a larger machine.
DATA=${DGBENCH_SHARED_DATA:-../shared/data}
if [ -d "$DATA/jodie_wikipedia_tgn" ] && [ -d "$DATA/snap_CollegeMsg" ]; then
  "$BIN/dgbench" prepare file --format jodie --raw "$DATA/jodie_wikipedia_tgn/wikipedia.csv" --overwrite --out stores/wikipedia.zarr
  "$BIN/dgbench" prepare file --format snap --raw "$DATA/snap_CollegeMsg/CollegeMsg.txt" --overwrite --out stores/collegemsg.zarr
  for bank in unlimited time-window; do
    run --scheme single --model edgebank --bank "$bank" --dataset stores/wikipedia.zarr --seeds 0,1,2 \
      --extra-negatives historical,inductive
  done
  for model in persistence tmgcn evolvegcn-o cdgcn; do
    run --scheme single --model "$model" --dataset stores/collegemsg.zarr --seeds 0,1,2 --extra-negatives historical
  done
else
  echo "note: $DATA not found; the real-data reference rows are skipped" >&2
fi

fi  # SEED_TRACKS

"$BIN/dgbench" submit "$RUNS"/*.json --board "$BOARD"

# Reproduce every official throughput and scaling row once (RULES.md, Trust): one re-run at a time, on the same
# host, so timing is checked; a row that does not reproduce within the tolerances leaves the official ranking.
reproduced=0 failed=0
while IFS= read -r record; do
  wait_quiet
  if "$BIN/dgbench" verify "$record" --board "$BOARD" | tail -1; then
    reproduced=$((reproduced + 1))
  else
    failed=$((failed + 1))
  fi
done < <("$BIN/python" -m dgbench.leaderboard.official timed-records --unverified --board "$BOARD")
echo "verify: $reproduced reproduced, $failed not reproduced (those leave the official ranking)"
"$BIN/dgbench" leaderboard --board "$BOARD" --update
