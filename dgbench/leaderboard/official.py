"""The registry of official stores (leaderboards/official_stores.json) and how it is (re)built.

A store is official when the official loader or generator prepared it with default options; its
fingerprint is then listed here and records on it rank in the official tables. Generators are
deterministic, so their entries are recomputed (``refresh``); the esdg-random weak-scaling ladder
(N = 1024·p vertices for p ranks, ESDG §6.1) is official too, so weak-scaling curves can be. Real
datasets are added with ``add`` once their loader has prepared the store with default options.

    python -m dgbench.leaderboard.official refresh [--board DIR]
    python -m dgbench.leaderboard.official add STORE --command "dgbench prepare NAME" [--target-ap A] [--board DIR]
    python -m dgbench.leaderboard.official timed-records [--unverified] [--board DIR]   # what seed_board.sh verifies

Each entry also lists the store's official evaluation sets (``evaluation_sets``: name -> fingerprint; the
accuracy track ranks officially only records that scored one of them, dgbench/leaderboard/evaluation.py)
and, where set, the validation AP its time-to-quality view times runs to (``quality_target``).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click

from dgbench.files import write_atomic
from dgbench.leaderboard.board import OFFICIAL_STORES, default_board

REGISTRY_SCHEMA = "dgbench.official-stores"
# (generator, options beyond the defaults, label); the ladder doubles N per doubling of ranks.
GENERATED: list[tuple[str, dict[str, Any], str]] = [
    ("esdg-random", {}, "esdg-random (defaults)"),
    ("nonuniform", {}, "nonuniform (defaults)"),
    ("static-to-dynamic", {}, "static-to-dynamic (defaults)"),
    ("stream", {}, "stream (defaults)"),
    ("communities", {}, "communities (defaults)"),
    *[("esdg-random", {"nodes": 1024 * p}, f"esdg-random weak p={p}") for p in (2, 4, 8)],
]


# validation AP targets of the time-to-quality view, by label (ESDG's uniform graphs have none: AP 0.5)
QUALITY_TARGETS: dict[str, float] = {"communities (defaults)": 0.6}


def store_entry(path: Path, command: str, label: str, source: str, options: dict[str, Any],
                target_ap: float | None = None) -> dict[str, Any]:
    """The registry entry of ``path``, after validating it in full: the fingerprint registered is the one
    recomputed from the store's content, so a store relabelled with another's fingerprint is refused."""
    from dgbench.errors import DgbenchError
    from dgbench.leaderboard.evaluation import official_evaluation_sets
    from dgbench.records import dataset_entry
    from dgbench.store import open_store
    from dgbench.store.validate import validate_store
    problems = validate_store(path)
    if problems:
        raise DgbenchError(f"{path}: not registered, the store is invalid ({problems[0]})")
    dataset = dataset_entry(open_store(path))
    entry = {"fingerprint": dataset["fingerprint"], "name": dataset["name"], "label": label, "source": source,
             "command": command, "options": options,
             **{k: dataset[k] for k in ("kind", "num_nodes", "num_edges", "num_snapshots") if k in dataset},
             "evaluation_sets": official_evaluation_sets(path)}
    target = target_ap if target_ap is not None else QUALITY_TARGETS.get(label)
    if target is not None:
        entry["quality_target"] = {"split": "val", "metric": "ap", "value": target}
    return entry


def generated_entries() -> list[dict[str, Any]]:
    """Build each official generated store in a temporary folder and describe it."""
    from dgbench.registry import PREPARERS, load_plugins
    load_plugins()
    entries = []
    with tempfile.TemporaryDirectory(prefix="dgbench-official-") as tmp:
        for index, (name, options, label) in enumerate(GENERATED):
            path = PREPARERS[name].build(out=Path(tmp) / f"{index}.zarr", **options)
            flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in options.items())
            entries.append(store_entry(path, f"dgbench prepare {name} {flags}".strip(), label, "generator", options))
    return entries


def read_registry(board: Path) -> list[dict[str, Any]]:
    path = board / OFFICIAL_STORES
    return json.loads(path.read_text())["stores"] if path.exists() else []


def write_registry(board: Path, stores: list[dict[str, Any]]) -> Path:
    registry = {"schema": REGISTRY_SCHEMA, "version": 1,
                "about": "Stores whose records rank as official; see leaderboards/RULES.md. Generated entries: "
                         "python -m dgbench.leaderboard.official refresh; datasets: ... add STORE.",
                "stores": sorted(stores, key=lambda s: (s["source"], s["name"], s["num_edges"]))}
    return write_atomic(board / OFFICIAL_STORES, json.dumps(registry, indent=2, sort_keys=True) + "\n")


@click.group()
def main() -> None:
    """Maintain the official-store registry of a board."""


@main.command()
@click.option("--board", type=click.Path(file_okay=False, path_type=Path), default=None)
def refresh(board: Path | None) -> None:
    """Recompute the generated stores' entries (keeps dataset entries)."""
    board = board or default_board()
    kept = [s for s in read_registry(board) if s["source"] != "generator"]
    click.echo(f"wrote {write_registry(board, kept + generated_entries())}")


@main.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--command", "command", required=True, help="The default-options command that prepared STORE.")
@click.option("--label", default=None, help="Name shown in tables (default: the store's dataset name).")
@click.option("--target-ap", type=click.FloatRange(0, 1), default=None,
              help="Validation AP the time-to-quality view times runs to.")
@click.option("--board", type=click.Path(file_okay=False, path_type=Path), default=None)
def add(store: Path, command: str, label: str | None, target_ap: float | None, board: Path | None) -> None:
    """Register a dataset store prepared by its official loader with default options."""
    board = board or default_board()
    entry = store_entry(store, command, label or "", "dataset", {}, target_ap)
    entry["label"] = label or entry["name"]
    stores = [s for s in read_registry(board) if s["fingerprint"] != entry["fingerprint"]]
    click.echo(f"wrote {write_registry(board, stores + [entry])}  ({entry['label']}: {entry['fingerprint'][:16]})")


def timed_records(board: Path, unverified: bool = False) -> list[Path]:
    """One file per record on a registered store filed on the throughput or scaling track (a record on both
    tracks has one content hash: it is verified once); with ``unverified``, only those without a filed
    reproduction."""
    from dgbench.leaderboard.board import load_board
    from dgbench.leaderboard.tracks import TIMED_TRACKS
    from dgbench.leaderboard.verify import reproduction_path
    registered = {entry["fingerprint"] for entry in read_registry(board)} or \
        {entry["fingerprint"] for entry in read_registry(default_board())}
    chosen: dict[str, Path] = {}
    for entry in load_board(board):
        if entry.track in TIMED_TRACKS and entry.record["dataset"]["fingerprint"] in registered \
                and not (unverified and reproduction_path(board, entry.digest).exists()):
            chosen.setdefault(entry.digest, entry.path)
    return sorted(chosen.values())


@main.command(name="timed-records")
@click.option("--board", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--unverified", is_flag=True, help="Only records without a filed reproduction.")
def timed_records_command(board: Path | None, unverified: bool) -> None:
    """Print the throughput and scaling records on registered stores, one path a line (for `dgbench verify`)."""
    for path in timed_records(board or default_board(), unverified):
        click.echo(str(path))


if __name__ == "__main__":
    main()
