"""`dgbench run` as a new user meets it (issue 18): it says what it is doing, what it did, and what is
wrong with a store of the other family; its default epochs satisfy every board track."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dgbench import progress
from dgbench.cli import cli


def test_a_scheme_of_the_other_family_says_what_the_store_is(stream_store: Path, esdg_store: Path, tmp_path: Path):
    result = CliRunner().invoke(cli, ["--quiet", "run", "--scheme", "snapshot", "--model", "tgn", "--dataset",
                                      str(stream_store), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1
    assert "is an edge-stream store; 'snapshot' is a discrete-time scheme" in result.stderr, result.stderr
    assert "dgbench convert" in result.stderr and "unknown" not in result.stderr
    result = CliRunner().invoke(cli, ["--quiet", "run", "--scheme", "single", "--model", "tgn", "--dataset",
                                      str(esdg_store), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1 and "is a snapshot store; 'tgn' is a continuous-time model" in result.stderr
    result = CliRunner().invoke(cli, ["--quiet", "run", "--scheme", "singel", "--model", "tmgcn", "--dataset",
                                      str(esdg_store), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1 and "unknown discrete-time scheme 'singel' (known: " in result.stderr
    assert not (tmp_path / "runs").exists()


def test_run_shows_progress_and_a_summary_line_with_throughput(esdg_store: Path, tmp_path: Path, monkeypatch):
    monkeypatch.delenv("DGBENCH_QUIET", raising=False)
    before = progress.is_quiet()
    try:
        result = CliRunner().invoke(cli, ["run", "--scheme", "single", "--model", "tmgcn", "--dataset",
                                          str(esdg_store), "--epochs", "2", "--out", str(tmp_path / "runs")])
    finally:
        progress.set_quiet(before)
    assert result.exit_code == 0, result.output
    assert "single/tmgcn epoch 1/2: loss" in result.stderr and "edges/s" in result.stderr  # per epoch, on stderr
    summary = result.stdout.splitlines()[0]
    assert summary.startswith("wrote ") and "edges/s" in summary and "test ap" in summary, summary
    quiet = CliRunner().invoke(cli, ["run", "--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store),
                                     "--epochs", "2", "--out", str(tmp_path / "quiet"), "--quiet"])
    assert quiet.exit_code == 0 and "epoch 1/2" not in quiet.stderr


def test_the_default_epochs_satisfy_every_track(esdg_store: Path, tmp_path: Path):
    result = CliRunner().invoke(cli, ["--quiet", "run", "--scheme", "single", "--model", "tmgcn", "--dataset",
                                      str(esdg_store), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    record = next((tmp_path / "runs").glob("*.json"))
    assert len(json.loads(record.read_text())["epochs"]) == 4
    board = tmp_path / "board"
    submitted = CliRunner().invoke(cli, ["--quiet", "submit", str(record), "--board", str(board), "--allow-dirty"])
    assert submitted.exit_code == 0, submitted.output
    assert "not entered" not in submitted.output + submitted.stderr, submitted.output
