"""Hostile inputs: crafted files and environments must be refused with one line, never executed, hung
on, or allowed to lose a finished run (docs/ for each format; leaderboards/RULES.md for what is checked)."""
from __future__ import annotations

import os
import pickle
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli as main
from dgbench.leaderboard.board import submit
from dgbench.leaderboard.render import render
from leaderboard_records import make_record, reseal, unofficial_dataset, write

REPO = Path(__file__).resolve().parents[1]
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


# --------------------------------------------------------------------------- hangs and exhaustion

PYTHON = sys.executable
GUARD_S = 60  # a hang shows up as a timeout, not as a test run that never ends


def _limited_memory() -> None:
    """A child that reads without bound dies of MemoryError instead of exhausting the shared machine."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _dgbench(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    command = [PYTHON, "-c", code, *args] if code else [PYTHON, "-m", "dgbench", *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=GUARD_S, preexec_fn=_limited_memory,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {GUARD_S} s: {args}")


READ_EVERY_EVENT = "import sys; from dgbench.store import open_store; open_store(sys.argv[1]).events()"


def _replace_chunk(store: Path, make: str) -> Path:
    chunk = store / "src" / "c" / "0"
    chunk.unlink()
    if make == "fifo":
        os.mkfifo(chunk)
    else:
        chunk.symlink_to("/dev/zero")
    return chunk


@pytest.mark.parametrize("make", ["fifo", "dev-zero"])
def test_validate_names_a_chunk_that_is_not_a_regular_file(stream_store, make):
    _replace_chunk(stream_store, make)
    result = _dgbench("validate", str(stream_store))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "src/c/0" in result.stdout + result.stderr and "not a regular file" in result.stdout + result.stderr


@pytest.mark.parametrize("make", ["fifo", "dev-zero"])
def test_reading_a_store_refuses_a_chunk_that_is_not_a_regular_file(stream_store, make):
    _replace_chunk(stream_store, make)
    result = _dgbench(str(stream_store), code=READ_EVERY_EVENT)
    assert result.returncode != 0 and "MemoryError" not in result.stderr
    assert "src/c/0" in result.stderr and "not a regular file" in result.stderr


def test_reading_a_store_is_bounded_by_the_chunk_size_it_declares(stream_store):
    chunk = stream_store / "src" / "c" / "0"
    with open(chunk, "ab") as grown:  # 4 GiB, sparse: a read without a bound runs out of memory
        grown.truncate(4 << 30)
    result = _dgbench(str(stream_store), code=READ_EVERY_EVENT)
    assert result.returncode != 0 and "MemoryError" not in result.stderr
    assert "src/c/0" in result.stderr and "larger than" in result.stderr
