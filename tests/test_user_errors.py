"""What a new user trips on (issue 18): global options in either place, errors that say what is wrong."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench import progress
from dgbench.cli import cli

TINY_STREAM = ["prepare", "stream", "--events", "200", "--nodes", "20", "--edge-dim", "2"]


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
