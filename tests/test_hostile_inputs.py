"""Hostile inputs: crafted files and environments must be refused with one line, never executed, hung
on, or allowed to lose a finished run (docs/ for each format; leaderboards/RULES.md for what is checked)."""
from __future__ import annotations

import pickle
from pathlib import Path

from click.testing import CliRunner

from dgbench.cli import cli as main

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
