"""End to end on generated data, as the README shows it: prepare -> run -> submit -> leaderboard.

Uses the real discrete trainer (skipped when it is absent) on a tiny store; registering that store
as official with `python -m dgbench.leaderboard.official add` moves its row to the official table.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.leaderboard.official import main as official_main
from dgbench.records import REPO_ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("dgbench.trainers.experiment") is None,
                                reason="the discrete-time trainer (dgbench.trainers.discrete) is not available")


def invoke(*args: str, command=cli) -> str:
    result = CliRunner().invoke(command, list(args))
    assert result.exit_code == 0, result.output + (result.stderr if result.stderr_bytes else "")
    return result.stdout


def test_run_submit_leaderboard_on_a_generated_store(tmp_path: Path):
    store = tmp_path / "tiny.zarr"
    invoke("--quiet", "prepare", "esdg-random", "--out", str(store), "--nodes", "48", "--snapshots", "6")
    record_path = tmp_path / "run.json"
    invoke("--quiet", "run", "--scheme", "single", "--model", "tmgcn", "--dataset", str(store), "--epochs", "6",
           "--out", str(record_path))
    board = tmp_path / "board"
    board.mkdir()
    shutil.copy(REPO_ROOT / "leaderboards" / "official_stores.json", board)

    # the shared working tree is usually dirty; the dirty rule itself is tested in test_leaderboard_submit
    accepted = invoke("submit", str(record_path), "--board", str(board), "--allow-dirty")
    assert accepted.count("accepted") == 3 and "unofficial" in accepted

    data = json.loads(invoke("leaderboard", "--board", str(board), "--format", "json"))
    unofficial = next(t for t in data["tables"]["throughput"] if t["id"] == "throughput-unofficial")["rows"]
    record = json.loads(record_path.read_text())
    assert [(row["Scheme"], row["Model"], row["World"]) for row in unofficial] == [("single", "tmgcn", 1)]
    timed = [e["throughput"] for e in record["epochs"][1:]]
    assert unofficial[0]["Throughput"] == pytest.approx(statistics.median(timed))

    invoke("add", str(store), "--command", "dgbench prepare esdg-random --nodes 48 --snapshots 6",
           "--label", "tiny", "--board", str(board), command=official_main)
    markdown = invoke("leaderboard", "--board", str(board))
    official_section = markdown.split("### Throughput — official")[1].split("###")[0]
    data = json.loads(invoke("leaderboard", "--board", str(board), "--format", "json"))
    # on a quiet host the registered row ranks and no unofficial table is rendered at all
    unofficial = next((t for t in data["tables"]["throughput"] if t["id"] == "throughput-unofficial"),
                      {"rows": []})["rows"]
    # registered: ranked officially, or (a tiny store's millisecond epochs on a shared host) listed with the
    # timing reason that keeps it from ranking (RULES.md, Clean timing)
    assert "| tiny | tmgcn | single |" in official_section or \
        [row["Not ranked"] != "" for row in unofficial] == [True]

    compared = json.loads(invoke("compare", str(record_path), str(record_path), "--format", "json"))
    assert compared["groups"][0]["figures"]["edges/s"]["ratios"] == [1.0, 1.0]
