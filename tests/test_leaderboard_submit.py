"""`dgbench submit`: what is accepted, where it is filed, and each named reason for refusing."""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError
from dgbench.leaderboard.board import Rejected, load_board, submit
from dgbench.leaderboard.render import render
from dgbench.records import REPO_ROOT, content_hash
from leaderboard_records import make_record, reseal, unofficial_dataset, write


@pytest.fixture
def board(tmp_path: Path) -> Path:
    """An empty board with the repo's official-store registry."""
    root = tmp_path / "board"
    root.mkdir()
    shutil.copy(REPO_ROOT / "leaderboards" / "official_stores.json", root)
    return root


def reasons(caught: pytest.ExceptionInfo) -> list[str]:
    return [str(p) for p in caught.value.problems]


def test_accepted_record_is_filed_by_content_hash_under_each_qualifying_track(board, tmp_path):
    record = make_record(epochs=6)  # 6: the throughput and scaling tracks rank 5 timed epochs
    result = submit(write(record, tmp_path / "r.json"), board)
    digest = content_hash(record)
    assert sorted(p.relative_to(board).as_posix() for p in result.paths) == [
        f"tracks/{t}/{digest}.json" for t in ("accuracy", "scaling", "throughput")]
    assert all(json.loads(p.read_text()) == record for p in result.paths)
    assert result.official["label"] == "esdg-random (defaults)"
    entries = load_board(board)
    assert {e.track for e in entries} == {"throughput", "scaling", "accuracy"} and all(e.official for e in entries)


def test_too_few_epochs_for_a_track(board, tmp_path):
    path = write(make_record(epochs=3), tmp_path / "r.json")
    with pytest.raises(Rejected) as caught:
        submit(path, board, tracks=["throughput"])
    assert reasons(caught) == ["epochs: has 3 epochs; the throughput track needs at least 4 (1 warm-up + 3 timed)"]
    assert [p.parent.name for p in submit(path, board).paths] == ["accuracy"]  # auto: only where it qualifies


def test_a_bounded_probe_fits_no_track(board, tmp_path):
    record = make_record(epochs=6)
    record["hyperparameters"]["max_batches"] = 20
    path = write(reseal(record), tmp_path / "r.json")
    with pytest.raises(Rejected) as caught:
        submit(path, board)
    assert set(reasons(caught)) == {
        "hyperparameters.max_batches: is 20: a bounded probe (each pass cut after 20 batches) is not a whole epoch "
        "(so it fits no track)"}
    assert not any((board / "tracks").glob("*/*.json"))


def test_duplicate_is_refused(board, tmp_path):
    path = write(make_record(), tmp_path / "r.json")
    submit(path, board)
    with pytest.raises(Rejected) as caught:
        submit(path, board)
    assert all(r.startswith("(record): duplicate: already on the board as tracks/") for r in reasons(caught))


@pytest.mark.parametrize("dirty, commit, field", [(True, "0" * 40, "code.dirty"), (None, "0" * 40, "code.dirty"),
                                                  (False, None, "code.commit")])
def test_dirty_or_unknown_code_needs_allow_dirty(board, tmp_path, dirty, commit, field):
    path = write(make_record(dirty=dirty, commit=commit), tmp_path / "r.json")
    with pytest.raises(Rejected) as caught:
        submit(path, board)
    assert [p.field for p in caught.value.problems] == [field] and "--allow-dirty" in reasons(caught)[0]
    assert submit(path, board, allow_dirty=True).paths


def test_changed_fingerprint_is_refused_and_a_resealed_unknown_one_is_unofficial(board, tmp_path):
    record = make_record()
    record["dataset"]["fingerprint"] = "e" * 64
    with pytest.raises(Rejected) as caught:
        submit(write(record, tmp_path / "edited.json"), board)
    assert [p.field for p in caught.value.problems] == ["seal"]
    result = submit(write(reseal(record), tmp_path / "resealed.json"), board)
    assert result.official is None
    assert all(entry.official is None for entry in load_board(board))


def test_official_fingerprint_with_another_store_shape_is_refused(board, tmp_path):
    record = make_record()
    record["dataset"]["num_edges"] += 1
    with pytest.raises(Rejected) as caught:
        submit(write(reseal(record), tmp_path / "r.json"), board)
    assert reasons(caught) == [f"dataset.num_edges: is 98305 but official store esdg-random "
                               f"({record['dataset']['fingerprint'][:12]}) has 98304"]


def test_cli_prints_one_line_per_reason_and_exits_1(board, tmp_path):
    record = make_record(dirty=True)
    record["final_metrics"]["test"]["auc"] = 1.2
    del record["backend"]
    bad = write(reseal(record), tmp_path / "bad.json")
    version = make_record()
    version["schema_version"] = 99
    unknown = write(reseal(version), tmp_path / "v99.json")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("cos\nsystem\n(S'echo pwned'\ntR.")  # a pickle: never unpickled, just not JSON
    good = write(make_record(seed=5), tmp_path / "good.json")
    result = CliRunner().invoke(cli, ["submit", str(bad), str(unknown), str(garbage), str(good), "--board", str(board)])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[:2] == [f"rejected {bad}: backend: missing",
                         f"rejected {bad}: final_metrics.test.auc: is 1.2, must be <= 1"]
    assert lines[2] == f"rejected {unknown}: schema_version: unknown version 99 (this dgbench reads [1])"
    assert lines[3].startswith(f"rejected {garbage}: (file): not valid JSON")
    assert len(lines) == 4
    assert result.stdout.count(f"accepted {good} -> ") == 3 and "(official: esdg-random (defaults))" in result.stdout


def test_concurrent_submissions_never_overwrite(board, tmp_path):
    paths = [write(make_record(seed=seed), tmp_path / f"r{seed}.json") for seed in range(4)]
    same = [paths[0]] * 4
    outcomes: list[str] = []

    def go(path: Path) -> None:
        try:
            submit(path, board, tracks=["accuracy"])
            outcomes.append("accepted")
        except Rejected:
            outcomes.append("rejected")

    threads = [threading.Thread(target=go, args=(p,)) for p in paths[1:] + same]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("accepted") == 4  # three distinct records + exactly one of the four identical
    assert len(list((board / "tracks" / "accuracy").glob("*.json"))) == 4
    assert not [p for p in (board / "tracks" / "accuracy").iterdir() if p.name.startswith(".")]


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          capture_output=True, text=True, check=False)


def test_git_merge_of_two_boards_is_conflict_free(board, tmp_path):
    assert git(board, "init", "-q", "-b", "main").returncode == 0
    git(board, "add", "-A")
    git(board, "commit", "-q", "-m", "registry")
    for branch, seed in (("alice", 1), ("bob", 2)):
        git(board, "checkout", "-q", "-b", branch, "main")
        submit(write(make_record(seed=seed), tmp_path / f"{branch}.json"), board)
        git(board, "add", "-A")
        git(board, "commit", "-q", "-m", branch)
    git(board, "checkout", "-q", "alice")
    merged = git(board, "merge", "-q", "--no-edit", "bob")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    seeds = sorted(e.record["hyperparameters"]["seed"] for e in load_board(board) if e.track == "accuracy")
    assert seeds == [1, 2]


def test_a_filed_record_edited_later_stops_the_board(board, tmp_path):
    result = submit(write(make_record(), tmp_path / "r.json"), board, tracks=["throughput"])
    filed = result.paths[0]
    record = json.loads(filed.read_text())
    record["epochs"][1]["throughput"] *= 2
    filed.write_text(json.dumps(reseal(record)))
    with pytest.raises(DgbenchError, match="content does not match its name"):
        load_board(board)


def test_unofficial_store_is_accepted_but_not_official(board, tmp_path):
    result = submit(write(make_record(dataset=unofficial_dataset()), tmp_path / "u.json"), board)
    assert result.official is None and len(result.paths) == 3


def test_a_scratch_board_without_a_registry_uses_the_repos(tmp_path):
    scratch = tmp_path / "demo-board"  # does not exist yet: submit creates it
    result = submit(write(make_record(), tmp_path / "r.json"), scratch)
    assert result.official["label"] == "esdg-random (defaults)"
    assert all(entry.official for entry in load_board(scratch))


def test_an_overflowing_number_is_refused_and_the_board_still_renders(board, tmp_path):
    # 1e400 parses to inf; filed, it would be written as Infinity and stop every later render.
    path = write(reseal(make_record()), tmp_path / "r.json")
    path.write_text(path.read_text().replace('"lr": 0.01', '"lr": 1e400'))
    assert "1e400" in path.read_text()
    with pytest.raises(Rejected) as caught:
        submit(path, board)
    assert [p.field for p in caught.value.problems] == ["(file)"]
    assert "not a finite double" in reasons(caught)[0]
    submit(write(make_record(), tmp_path / "good.json"), board)
    assert "| esdg-random" in render(board, "md")


def test_a_failure_while_filing_leaves_no_track_half_filed(board, tmp_path, monkeypatch):
    import dgbench.leaderboard.board as board_module
    from dgbench.leaderboard.schema import Problem
    real, calls = board_module._file_new, []

    def second_track_races(path, record, source):
        calls.append(path)
        if len(calls) == 2:  # another submission filed the same record under this track meanwhile
            raise Rejected(source, [Problem("(record)", f"duplicate: {path.name} appeared while submitting")])
        return real(path, record, source)

    monkeypatch.setattr(board_module, "_file_new", second_track_races)
    path = write(make_record(), tmp_path / "r.json")
    with pytest.raises(Rejected):
        submit(path, board)
    assert list((board / "tracks").rglob("*.json")) == []
    monkeypatch.undo()
    assert len(submit(path, board).paths) == 3  # nothing left over blocks the resubmission


def test_code_state_counts_untracked_files_but_not_ignored_ones(tmp_path):
    from dgbench.records import git_state
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (("init", "-q"), ("config", "user.email", "t@t"), ("config", "user.name", "t")):
        git(repo, *args)
    (repo / ".gitignore").write_text("runs/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "init")
    assert git_state(repo)["dirty"] is False
    (repo / "runs").mkdir()
    (repo / "runs" / "r.json").write_text("{}")
    assert git_state(repo)["dirty"] is False  # ignored output does not make the code dirty
    (repo / "scheme.py").write_text("# a module the run may have imported\n")
    assert git_state(repo)["dirty"] is True
