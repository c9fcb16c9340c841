"""What a new user trips on (issue 18): global options in either place, errors that say what is wrong."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench import progress
from dgbench.cli import cli

TINY_STREAM = ["prepare", "stream", "--events", "200", "--users", "20", "--items", "0", "--edge-dim", "2"]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(autouse=True)
def _restore_quiet():
    before = progress.is_quiet()
    yield
    progress.set_quiet(before)


@pytest.mark.parametrize("command", ["info", "validate"])
def test_missing_store_path_says_it_does_not_exist(runner: CliRunner, tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nowhere.zarr"
    result = runner.invoke(cli, [command, str(missing)])
    assert result.exit_code == 1
    message = (result.stderr + result.stdout).strip()
    assert "does not exist" in message and "no zarr.json" not in message, message


def test_a_file_is_not_a_store(runner: CliRunner, tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("x")
    result = runner.invoke(cli, ["info", str(file)])
    assert result.exit_code == 1 and "a file; a store is a folder" in result.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_and_debug_work_before_and_after_the_subcommand(runner: CliRunner, tmp_path: Path,
                                                               monkeypatch, where: str) -> None:
    monkeypatch.delenv("DGBENCH_QUIET", raising=False)
    progress.set_quiet(False)
    args = [*TINY_STREAM, "-o", str(tmp_path / "s.zarr")]
    result = runner.invoke(cli, ["--quiet", *args] if where == "before" else [*args, "--quiet"])
    assert result.exit_code == 0, result.output
    assert progress.is_quiet()
    assert "DGBENCH_QUIET" not in os.environ  # no process-wide side effect on later commands

    missing = str(tmp_path / "nowhere.zarr")
    debug = runner.invoke(cli, ["--debug", "info", missing] if where == "before" else ["info", missing, "--debug"])
    assert debug.exit_code == 1
    assert debug.exception is not None and "does not exist" in str(debug.exception)  # raised, not one line


def test_flags_after_a_double_dash_are_left_to_the_command() -> None:
    from dgbench.cli import hoist_global_flags
    assert hoist_global_flags(["run", "--x", "1", "--quiet", "--", "--debug"]) == \
        ["--quiet", "run", "--x", "1", "--", "--debug"]


def test_submit_says_per_track_why_a_record_was_not_entered(tmp_path: Path) -> None:
    import shutil

    from dgbench.records import REPO_ROOT
    from leaderboard_records import make_record, write
    board = tmp_path / "board"
    board.mkdir()
    shutil.copy(REPO_ROOT / "leaderboards" / "official_stores.json", board)
    short = write(make_record(epochs=3), tmp_path / "short.json")  # 3 epochs: below 1 warm-up + 3 timed
    result = CliRunner().invoke(cli, ["submit", str(short), "--board", str(board)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert sum(line.startswith(f"accepted {short} -> ") for line in lines) == 1  # accuracy only
    skipped = sorted(line for line in lines if line.startswith("not entered on "))
    needs = "epochs: has 3 epochs; the {} track needs at least 4 (1 warm-up + 3 timed)"
    assert skipped == [f"not entered on scaling: {short}: {needs.format('scaling')}",
                       f"not entered on throughput: {short}: {needs.format('throughput')}"]

