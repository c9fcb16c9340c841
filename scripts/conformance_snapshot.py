"""Every conformance case's exact per-epoch losses and per-tag bytes, written to JSON, and two such files
compared: the check that a refactor changed no number (docs/adding-a-scheme.md).

    python scripts/conformance_snapshot.py write OUT.json [discrete|continuous]  # from the repository root; P = 1, 2
    python scripts/conformance_snapshot.py compare A.json B.json
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COUNTED = ("bytes", "elements", "calls")


def write(out: Path, only: str | None = None) -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import torch
    import test_conformance as conformance
    from dgbench.generators.esdg_random import build as snapshots
    from dgbench.generators.stream import build as stream
    torch.set_num_threads(1)
    scratch = Path(tempfile.mkdtemp())
    snap = snapshots(out=scratch / "snapshots.zarr", nodes=48, snapshots=9, edge_factor=3.0, seed=11)
    events = stream(out=scratch / "stream.zarr", users=60, items=50, events=1400, edge_dim=4, seed=5)
    cases: dict[str, Any] = {}
    for world in (1, 2):
        for family, store, base, extra in (("discrete", snap, conformance.DISCRETE, None),
                                           ("continuous", events, conformance.CONTINUOUS,
                                            {"dtype": "float64", "prefetch": 2})):
            if only not in (None, family):
                continue
            for (scheme, model, options), record in conformance._train(family, store, world, base, extra).items():
                cases[f"{family}|{scheme}|{model}|{options}|P{world}"] = {
                    "losses": [e["loss"] for e in record["epochs"]],
                    "batch_losses": record["extra"].get("batch_losses_last_epoch"),
                    "comm": [[{tag: {k: s[k] for k in COUNTED} for tag, s in sorted(rank["comm_by_tag"].items())}
                              for rank in e["per_rank"]] for e in record["epochs"]],
                    "microbatches": record["extra"].get("microbatches")}
    out.write_text(json.dumps(cases, indent=1, sort_keys=True, default=str))
    print(f"{len(cases)} cases -> {out}")


def compare(a: Path, b: Path) -> int:
    before, after = json.loads(a.read_text()), json.loads(b.read_text())
    problems = [f"only in one file: {key}" for key in sorted(set(before) ^ set(after))]
    for key in sorted(set(before) & set(after)):
        x, y = before[key], after[key]
        if (x["losses"], x["batch_losses"]) != (y["losses"], y["batch_losses"]):
            problems.append(f"{key}: losses differ")
        elif x["comm"] != y["comm"]:
            n = (x.get("microbatches") or {}).get("n"), (y.get("microbatches") or {}).get("n")
            why = f" (Eq. 12 chose n = {n[0]} and {n[1]} from the measured link)" if n[0] != n[1] else ""
            problems.append(f"{key}: counted communication differs{why}")
    print("\n".join(problems) or f"{len(before)} cases: losses and counted communication identical")
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["write"] and len(sys.argv) in (3, 4):
        write(Path(sys.argv[2]), *sys.argv[3:])
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
