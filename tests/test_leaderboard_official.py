"""The repo's official-store registry matches what the generators produce today.

A generator change that alters its default store must come with `python -m dgbench.leaderboard.official
refresh`; otherwise results on the new store would silently count as unofficial.
"""
from __future__ import annotations

import json

import pytest

from dgbench.leaderboard import official
from dgbench.records import REPO_ROOT

REGISTRY = json.loads((REPO_ROOT / "leaderboards" / "official_stores.json").read_text())


def registered(label: str) -> dict:
    return next(s for s in REGISTRY["stores"] if s["label"] == label)


def check_generated(monkeypatch, keep) -> None:
    monkeypatch.setattr(official, "GENERATED", [g for g in official.GENERATED if keep(g)])
    entries = official.generated_entries()
    assert entries
    for entry in entries:
        assert entry == registered(entry["label"]), f"stale registry entry {entry['label']}: run refresh"


def test_default_generator_stores_are_registered(monkeypatch):
    check_generated(monkeypatch, lambda generator: not generator[1])


@pytest.mark.slow
def test_weak_scaling_ladder_is_registered(monkeypatch):
    check_generated(monkeypatch, lambda generator: bool(generator[1]))


def test_registry_has_one_entry_per_fingerprint_and_every_generator():
    fingerprints = [s["fingerprint"] for s in REGISTRY["stores"]]
    assert len(fingerprints) == len(set(fingerprints))
    assert {label for _, _, label in official.GENERATED} <= {s["label"] for s in REGISTRY["stores"]}


def test_refresh_keeps_dataset_entries_and_add_registers_a_store(monkeypatch, tmp_path, esdg_store):
    from click.testing import CliRunner
    board = tmp_path / "board"
    board.mkdir()
    monkeypatch.setattr(official, "GENERATED", official.GENERATED[:1])
    runner = CliRunner()
    added = runner.invoke(official.main, ["add", str(esdg_store), "--command", "dgbench prepare tiny",
                                          "--label", "tiny", "--board", str(board)])
    assert added.exit_code == 0, added.output
    refreshed = runner.invoke(official.main, ["refresh", "--board", str(board)])
    assert refreshed.exit_code == 0, refreshed.output
    stores = {s["label"]: s for s in json.loads((board / "official_stores.json").read_text())["stores"]}
    assert set(stores) == {"tiny", "esdg-random (defaults)"}
    assert stores["tiny"]["source"] == "dataset" and stores["tiny"]["num_edges"] == 64 * 3 * 8
    assert stores["esdg-random (defaults)"] == registered("esdg-random (defaults)")
