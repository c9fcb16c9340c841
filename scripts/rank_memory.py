"""Per-rank memory of the discrete family's `snapshot` and `vertex` schemes at P = 1, 2, 4 (docs/discrete-schemes.md,
"Per-rank data").

Generates an esdg-random snapshot store (default N = 65,536, T = 16, 3 edges per vertex per snapshot: 3.1M
edges), trains one epoch of cdgcn per (scheme, P) in a fresh `dgbench run` and prints each rank's peak RSS
(the record's ``extra.rank_data``) above a baseline, and the ratio of the largest rank to P = 1's.

Baseline: the peak RSS of a fresh interpreter that imported what a rank imports, resolved the run, built the
model and the loop's optimiser (no data, no store read; measured once the store's evaluation sets exist, which the
first resolve on a fresh store writes): what every rank pays whatever its share. Building the Adam optimiser
imports torch._dynamo (and sympy with it) on its first call, ≈ 69 MiB of RSS in every rank at every P: an import,
not data. Each rank's own floor: its resident set just before it
built any data (the record's ``rss_before_data_bytes``: a spawned rank also holds its process group's
buffers). Memory figures are valid on a loaded host; the wall seconds printed are not timings for publication.

    PYTHONPATH=$PWD .venv/bin/python scripts/rank_memory.py --nodes 65536 --schemes snapshot,vertex --worlds 1,2,4
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {2: 0.55, 4: 0.30}


def baseline_rss(model: str) -> int:
    """Peak RSS of an interpreter that imported a rank's modules and built the model (see the docstring)."""
    code = ("import torch, zarr, dgbench.trainers.experiment, dgbench.trainers.discrete.family\n"
            "from dgbench.trainers.experiment import resolve\n"
            "from dgbench.trainers.config import RunConfig\n"
            "from dgbench.memory import peak_rss_bytes\n"
            f"run = resolve(RunConfig('single', {model!r}, {os.environ['RANK_MEMORY_STORE']!r}))\n"
            "model = run.model.build(run.model_options, in_features=2, hidden=6)\n"
            "torch.optim.Adam(model.parameters(), lr=0.01, foreach=True)  # as the loop builds it: imports\n"
            "print(peak_rss_bytes())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def train(store: Path, scheme: str, model: str, world: int, out: Path, extra: list[str]) -> dict:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dgbench", "--quiet", "run", "--scheme", scheme, "--model", model,
                    "--dataset", str(store), "--nproc", str(world), "--epochs", "1", "--out", str(out), *extra],
                   check=True, capture_output=True, env={**os.environ, "DGBENCH_QUIET": "1"})
    record = json.loads(out.read_text())
    return {"wall_s": time.perf_counter() - started, "ranks": record["extra"]["rank_data"],
            "loss": record["epochs"][-1]["loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=65_536)
    parser.add_argument("--snapshots", type=int, default=16)
    parser.add_argument("--edge-factor", type=float, default=3.0)
    parser.add_argument("--schemes", default="snapshot,vertex")
    parser.add_argument("--worlds", default="1,2,4", help="rank counts, in order; the first is the ratios' "
                        "reference; repeat one to see the spread (1,2,4,4)")
    parser.add_argument("--model", default="cdgcn")
    parser.add_argument("--store", type=Path, help="an existing snapshot store (default: generate one)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("extra", nargs="*", help="more `dgbench run` options (after --)")
    args = parser.parse_args()
    from dgbench.generators.esdg_random import build
    work = Path(tempfile.mkdtemp(prefix="rank-memory-"))
    store = args.store or build(out=work / "s.zarr", nodes=args.nodes, snapshots=args.snapshots,
                                edge_factor=args.edge_factor, seed=0)
    os.environ["RANK_MEMORY_STORE"] = str(store)
    baseline_rss(args.model)  # the first call on a fresh store writes its evaluation sets beside it (O(N·T))
    floor = baseline_rss(args.model)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"store {store}: N = {args.nodes}, T = {args.snapshots}, f = {args.edge_factor}; "
          f"baseline (imports, model, optimiser) {floor / 2**20:.0f} MiB; load {load}")
    print(f"{'scheme':<9} {'P':>2} {'wall s':>7}  {'above baseline per rank, MiB':<30} {'ratio':>5} "
          f"{'above own floor per rank, MiB':<30} {'ratio':>5} {'goal':>5} {'read MiB':>8} {'loss':>10}")
    rows = []
    for scheme in args.schemes.split(","):
        alone: list[float] = []
        for run, world in enumerate(map(int, args.worlds.split(","))):  # a world may repeat (the spread)
            row = train(store, scheme, args.model, world, work / f"{scheme}-{world}-{run}.json", args.extra)
            above = [max(rank["peak_rss_bytes"] - floor, 1) / 2**20 for rank in row["ranks"]]
            own = [max(rank["peak_rss_bytes"] - rank.get("rss_before_data_bytes", floor), 1) / 2**20
                   for rank in row["ranks"]]
            alone = alone or [max(above), max(own)]
            ratios = [max(above) / alone[0], max(own) / alone[1]]
            read = max(rank["store_bytes_read"] for rank in row["ranks"]) / 2**20
            print(f"{scheme:<9} {world:>2} {row['wall_s']:>7.1f}  {' '.join(f'{a:.0f}' for a in above):<30} "
                  f"{ratios[0]:>5.2f} {' '.join(f'{a:.0f}' for a in own):<30} {ratios[1]:>5.2f} "
                  f"{GOALS.get(world, 1.0):>5.2f} {read:>8.1f} {row['loss']:>10.6f}", flush=True)
            rows.append({"scheme": scheme, "world": world, "above_mib": above, "above_own_floor_mib": own,
                         "ratios": ratios, **row})
    print(f"load after: {open('/proc/loadavg').read().split()[:3]}")
    if args.json:
        args.json.write_text(json.dumps({"baseline_rss_bytes": floor, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
