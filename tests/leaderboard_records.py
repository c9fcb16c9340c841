"""Realistic result records for the leaderboard tests, built the way trainers build them.

Per-rank epoch figures go through dgbench.trainers.epochs.merge_rank_epochs and dgbench.records.build_record,
so a change to the record's real shape shows up here. The code block is set to a clean commit
(the shared working tree is usually dirty) unless a test asks otherwise.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dgbench.records import REPO_ROOT, build_record, seal_record, utc_now
from dgbench.trainers.epochs import merge_rank_epochs

CLEAN_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def official_dataset(label: str = "esdg-random (defaults)") -> dict[str, Any]:
    """The dataset block of a record trained on an official store of the repo's registry."""
    registry = json.loads((REPO_ROOT / "leaderboards" / "official_stores.json").read_text())
    entry = next(s for s in registry["stores"] if s["label"] == label)
    dataset = {k: entry[k] for k in ("name", "fingerprint", "kind", "num_nodes", "num_edges") if k in entry}
    if "num_snapshots" in entry:
        dataset["num_snapshots"] = entry["num_snapshots"]
    return {**dataset, "path": f"stores/{entry['name']}.zarr", "transforms": []}


def unofficial_dataset() -> dict[str, Any]:
    return {"name": "esdg-random", "fingerprint": "f" * 64, "kind": "snapshots", "num_nodes": 64,
            "num_edges": 1536, "num_snapshots": 8, "path": "/tmp/x.zarr", "transforms": []}


def quiet_evidence(seconds: float, threads: int = 1, cores: int = 2) -> dict[str, Any]:
    """The timing evidence (dgbench/timing.py) of an epoch on a quiet host: the rank had its core."""
    return {"wall_s": seconds, "cpu_s": 0.97 * seconds * threads, "threads": threads, "cores": cores,
            "run_delay_s": 0.001 * seconds, "host_busy_s": 0.98 * seconds * threads, "host_steal_s": 0.0,
            "load_1m": 0.5}


def rank_epoch(epoch: int, rank: int, seconds: float, work: int, comm_bytes: int) -> dict[str, Any]:
    transfer, communication = 0.1 * seconds, 0.25 * seconds
    return {"epoch": epoch, "loss": 0.7 - 0.05 * epoch, "time_s": seconds, "transfer_s": transfer,
            "communication_s": communication, "compute_s": seconds - transfer - communication,
            "comm_bytes": comm_bytes, "comm_elements": comm_bytes // 4,
            "comm_by_tag": {"activations:forward": {"bytes": comm_bytes}}, "work": work,
            "throughput": work / seconds, "metrics": {"val": {"accuracy": 0.6, "ap": 0.65, "auc": 0.7}},
            "phases": {"transfer": transfer}, "peak_rss_bytes": 200_000_000 + rank,
            "busy_s": seconds - communication, "wait_s": 0.05 * seconds, "collective_transfer_s": 0.2 * seconds,
            "probes": 4, "probe_floor_s": 1e-4, "evidence": quiet_evidence(seconds)}


def make_record(*, scheme: str = "snapshot", model: str = "tmgcn", world_size: int = 1, epochs: int = 6,
                epoch_seconds: float = 2.0, seed: int = 0, test_ap: float = 0.8,
                dataset: dict[str, Any] | None = None, dirty: bool | None = False,
                commit: str | None = CLEAN_COMMIT, hidden: int = 6) -> dict[str, Any]:
    """A sealed record; ``epoch_seconds`` is the slowest rank's time of each timed epoch."""
    dataset = dataset or official_dataset()
    work = dataset["num_edges"]
    per_rank = [[rank_epoch(e, r, epoch_seconds * (1.5 if e == 0 else 1.0) * (1 - 0.01 * r) * (1 + 0.001 * e),
                            work, 0 if world_size == 1 else 1_000_000 * world_size)
                 for e in range(epochs)] for r in range(world_size)]
    record = build_record(
        family="discrete", task="link_prediction", scheme=scheme, model=model, dataset=dataset,
        hyperparameters={"seed": seed, "lr": 0.01, "hidden": hidden, "window": 3, "epochs": epochs},
        world_size=world_size, backend="gloo", device=torch.device("cpu"), epochs=merge_rank_epochs(per_rank),
        final_metrics={"test": {"accuracy": test_ap - 0.05, "ap": test_ap, "auc": test_ap + 0.02},
                       "val": {"accuracy": 0.7, "ap": 0.75, "auc": 0.77}},
        started_at=utc_now(), command=["dgbench", "run", "--scheme", scheme, "--model", model])
    record["code"] = {"commit": commit, "dirty": dirty}
    record["evaluation"] = evaluation_block(dataset)
    return seal_record(record)


def evaluation_block(dataset: dict[str, Any], name: str = "link-prediction-random-k9") -> dict[str, Any]:
    """The ``evaluation`` block a run writes: the registry's official set of that name for an official
    store (so its accuracy rows rank officially), a made-up one elsewhere."""
    registry = json.loads((REPO_ROOT / "leaderboards" / "official_stores.json").read_text())
    entry = next((s for s in registry["stores"] if s["fingerprint"] == dataset["fingerprint"]), {})
    fingerprint = entry.get("evaluation_sets", {}).get(name, "e" * 64)
    return {"task": "link-prediction", "fingerprint": fingerprint,
            "sets": [{"name": name, "fingerprint": fingerprint, "task": "link-prediction", "strategy": "random",
                      "negatives": 9, "seed": 0}]}


def write(record: dict[str, Any], path: Path) -> Path:
    """Write ``record`` exactly as it is (write_record would reseal it, hiding a tampered seal)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def reseal(record: dict[str, Any]) -> dict[str, Any]:
    return seal_record({k: v for k, v in record.items() if k != "seal"})


def populate_board(board: Path, staging: Path) -> list[dict[str, Any]]:
    """A board with every kind of row: strong and weak scaling series for two schemes, accuracy over
    three seeds and one pending, and an unofficial run. Returns the submitted records."""
    from dgbench.leaderboard.board import submit
    records = []
    for scheme, exponent in (("snapshot", 0.8), ("vertex", 0.6)):
        for world in (1, 2, 4):
            records.append(make_record(scheme=scheme, world_size=world, epoch_seconds=2.0 / world ** exponent,
                                       seed=world))
        for world in (2, 4, 8):
            records.append(make_record(scheme=scheme, world_size=world,
                                       dataset=official_dataset(f"esdg-random weak p={world}"),
                                       epoch_seconds=2.0 * (1 + 0.1 * world), seed=world))
    records += [make_record(scheme="snapshot", world_size=1, seed=seed, test_ap=0.8 + 0.02 * seed, epochs=3)
                for seed in (0, 1, 2)]  # ranked accuracy row: AP 0.82 ± 0.02
    records.append(make_record(scheme="vertex", world_size=1, seed=7, test_ap=0.9, epochs=3))  # pending accuracy
    records.append(make_record(scheme="snapshot", dataset=unofficial_dataset(), epoch_seconds=0.5))
    for index, record in enumerate(records):
        submit(write(record, staging / f"{index}.json"), board)
    return records
