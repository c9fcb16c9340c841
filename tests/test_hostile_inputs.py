"""Hostile inputs: crafted files and environments must be refused with one line, never executed, hung
on, or allowed to lose a finished run (docs/ for each format; leaderboards/RULES.md for what is checked)."""
from __future__ import annotations

import pickle
import re
from pathlib import Path

from click.testing import CliRunner

from dgbench.cli import cli as main
from dgbench.leaderboard.board import submit
from dgbench.leaderboard.render import render
from leaderboard_records import make_record, reseal, unofficial_dataset, write

MARK = "dgbench-test-marker"


class _Planted:
    """Unpickling this writes a marker file: proof a crafted pickle ran code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, MARK))


# --------------------------------------------------------------------------- code execution

def test_price_never_unpickles_a_crafted_file(tmp_path):
    marker, crafted = tmp_path / "ran", tmp_path / "dry.pkl"
    crafted.write_bytes(pickle.dumps(_Planted(marker)))
    result = CliRunner().invoke(main, ["project", "price", str(crafted), "--mode", "strong", "--profile", "esdg-aimos"])
    assert not marker.exists(), "a crafted pickle ran code"
    assert result.exit_code == 1
    assert str(crafted) in result.output and len(result.output.strip().splitlines()) == 1


# --------------------------------------------------------------------------- board integrity

HOSTILE_TEXT = ("evil\n# Injected heading\r\n<img src=x onerror=alert(1)> [click](javascript:alert(1)) "
                "![pixel](https://evil.example/p.png) | cell `code")


def test_board_markdown_escapes_every_record_string(tmp_path):
    board = tmp_path / "board"
    board.mkdir()
    for seed in (0, 1, 2):
        record = make_record(dataset={**unofficial_dataset(), "name": HOSTILE_TEXT}, seed=seed)
        record["hyperparameters"]["cost_model"] = HOSTILE_TEXT if seed else "plain"
        submit(write(reseal(record), tmp_path / f"hostile{seed}.json"), board)
    markdown = render(board, "md")
    assert "evil" in markdown  # the rows are there ...
    assert not any(line.startswith("# Injected") for line in markdown.splitlines())  # ... but inject nothing
    assert "<img" not in markdown and "onerror" in markdown  # shown as text, never as HTML
    hostile = [line for line in markdown.splitlines() if "javascript:" in line or "evil.example" in line]
    assert hostile and not any(re.search(r"(?<!\\)[\[\]`]", line) for line in hostile)  # no link, image or code
    tables = [block.splitlines() for block in markdown.split("\n\n") if block.startswith("| ")]
    assert any("evil" in line for table in tables for line in table)
    for table in tables:  # every row has its header's cells: no record string broke out of its cell
        assert {line.replace("\\|", "").count("|") for line in table} == {table[0].count("|")}
