"""The README's CLI tour, run exactly as written, in order, as on a fresh checkout: it works, and what it
prints reads in a terminal (no line wider than WIDEST_LINE, no warnings, no JSON dumps).

The ```bash block under "A short tour of the CLI" is extracted and run by bash with ``set -euo
pipefail`` in an empty folder standing for the checkout's root (its ``.venv/bin/activate`` puts the
environment running the tests on PATH). The tour must make every store it reads, and file its records
on a scratch board under runs/, never on the repository's board. Sizes in the README are kept small:
the whole tour is one of the default tests.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from dgbench.records import REPO_ROOT

TOUR_HEADING = "## A short tour of the CLI"
SCRATCH = ("stores/tour/", "runs/tour")
WIDEST_LINE = 160  # characters: what the tour prints reads in a terminal without wrapping into noise


def tour_block() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index(TOUR_HEADING):]
    found = re.search(r"```bash\n(.*?)```", section, re.S)
    assert found, "the README's tour has no ```bash block"
    return found.group(1)


def commands(block: str) -> list[list[str]]:
    """Each command line of the block as words (comments dropped)."""
    return [shlex.split(line, comments=True) for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def expected_schemes(block: str) -> list[str]:
    """One record per `dgbench run` of the block (one per seed of --seeds), by scheme."""
    out = []
    for words in commands(block):
        if words[:2] != ["dgbench", "run"]:
            continue
        scheme = words[words.index("--scheme") + 1]
        seeds = words[words.index("--seeds") + 1].split(",") if "--seeds" in words else [None]
        out += [scheme] * len(seeds)
    return sorted(out)


def multi_rank_runs(block: str) -> list[list[str]]:
    """The block's `dgbench run` commands that start more than one rank."""
    return [words for words in commands(block)
            if words[:2] == ["dgbench", "run"] and "--nproc" in words and int(words[words.index("--nproc") + 1]) > 1]


def board_files() -> list[str]:
    return sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "leaderboards").rglob("*") if p.is_file())


def test_the_tour_writes_only_its_own_scratch_stores_and_board() -> None:
    lines = commands(tour_block())
    for words in lines:
        for flag in ("-o", "--out", "--board"):
            if flag in words:
                target = words[words.index(flag) + 1]
                assert target.startswith(SCRATCH), f"{' '.join(words)}: writes {target}, outside the tour's scratch"
        if words[:2] == ["dgbench", "submit"] or words[:3] == ["dgbench", "leaderboard", "--update"] \
                or (words[:2] == ["dgbench", "leaderboard"] and "--update" in words):
            assert "--board" in words, f"{' '.join(words)}: would write the repository's board"
        if words[:2] == ["dgbench", "prepare"]:
            assert "-o" in words or "--out" in words, f"{' '.join(words)}: writes a default store path"
    read = [words[words.index(flag) + 1] for words in lines for flag in ("--dataset", "--static") if flag in words]
    written = {words[words.index(flag) + 1] for words in lines for flag in ("-o", "--out") if flag in words}
    assert read and set(read) <= written, "the tour reads a store it does not make"


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    block = tour_block()
    activate = tmp_path / ".venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n')
    script = tmp_path / "tour.sh"
    script.write_text("set -euo pipefail\nexport DGBENCH_QUIET=1\n" + block)
    board_before = board_files()

    result = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"the tour failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"

    records = sorted((tmp_path / "runs" / "tour").glob("*.json"))
    assert sorted(json.loads(r.read_text())["scheme"] for r in records) == expected_schemes(block)
    board = tmp_path / "runs" / "tour-board"
    assert (board / "README.md").is_file() and (board / "index.html").is_file()
    filed = {p.parent.name for p in (board / "tracks").glob("*/*.json")}
    assert filed == {"throughput", "scaling", "accuracy"}, "the tour's default epochs should enter every track"
    assert "(ratio = value / first run)" in result.stdout  # compare found comparable runs among the records
    assert "no two runs share a setup" not in result.stdout
    assert "leaked semaphore" not in result.stderr and "already exists" not in result.stderr
    # multi-rank runs end without a traceback from ranks stopped in their exit-time finalizers (the check
    # tests/test_launch_faults.py makes on one such run, kept there under -m slow)
    assert multi_rank_runs(block), "the tour has no `dgbench run --nproc 2+`: move the check back to test_launch_faults"
    assert "Traceback" not in result.stderr and "SystemExit" not in result.stderr, result.stderr[-3000:]
    for stream in (result.stdout, result.stderr):
        widest = max(stream.splitlines(), key=len, default="")
        assert len(widest) <= WIDEST_LINE, f"a tour line is {len(widest)} characters wide: {widest}"
    assert board_files() == board_before, "the tour wrote into the repository's board"
