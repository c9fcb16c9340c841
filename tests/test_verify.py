"""Issue 19, the trust model: `dgbench verify` re-runs a record on its store and compares; the board
shows which rows were reproduced; a relabelled store, a forged figure or an edited reproduction is caught.

One real record is made by `dgbench run` in a subprocess (so its command is a `dgbench run`) and
re-run once by `verify`; the other cases reuse that reproduction.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dgbench.leaderboard.verify as verify_module
from dgbench.errors import DgbenchError
from dgbench.leaderboard.board import load_board, submit
from dgbench.leaderboard.verify import check_store, compare_runs, run_arguments, verify
from dgbench.records import REPO_ROOT, content_hash
from leaderboard_records import reseal, write

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def verified(tmp_path_factory) -> dict:
    """A store, a record run on it, a board holding the record, and verify's outcome filed on that board."""
    folder = tmp_path_factory.mktemp("verify")
    from dgbench.generators.esdg_random import build
    store = build(out=folder / "s.zarr", nodes=64, snapshots=4, edge_factor=3.0, seed=3)
    record_path = folder / "record.json"
    done = subprocess.run([sys.executable, "-m", "dgbench", "--quiet", "run", "--scheme", "single", "--model",
                           "tmgcn", "--dataset", str(store), "--epochs", "4", "--out", str(record_path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    board = folder / "board"
    board.mkdir()
    shutil.copy(REPO_ROOT / "leaderboards" / "official_stores.json", board)
    submit(record_path, board, allow_dirty=True)
    tolerance = verify_module.THROUGHPUT_TOLERANCE
    verify_module.THROUGHPUT_TOLERANCE = 1e6  # a shared CI machine's timing says little: only gross claims fail
    try:
        document = verify(record_path, store, board)
        yield {"store": store, "record": json.loads(record_path.read_text()), "record_path": record_path,
               "board": board, "document": document, "folder": folder}
    finally:
        verify_module.THROUGHPUT_TOLERANCE = tolerance


def test_an_honest_record_is_reproduced_and_the_board_shows_it(verified):
    document = verified["document"]
    assert document["verdict"] == "reproduced", [c for c in document["checks"] if not c["ok"]]
    assert {"epochs[3].work", "final_metrics.test.ap", "dataset.fingerprint"} <= {c["name"] for c in document["checks"]}
    entries = load_board(verified["board"])
    assert entries and all(e.reproduction is not None and e.reproduction["verdict"] == "reproduced" for e in entries)
    assert verify_module.reproduced_label(entries[0].reproduction) in ("yes", "yes (untimed)")


@pytest.mark.parametrize("forge, failed", [
    (lambda r: r["final_metrics"]["test"].update(ap=min(1.0, r["final_metrics"]["test"]["ap"] + 0.3)),
     "final_metrics.test.ap"),
    (lambda r: [e.update(work=e["work"] - 1, throughput=(e["work"] - 1) / e["time_s"]) for e in r["epochs"]],
     "epochs[0].work"),
    (lambda r: r["hyperparameters"].update(seed=r["hyperparameters"]["seed"] + 1), "hyperparameters"),
    # 1e9: above the fixture's 1e6 tolerance by more than this tiny store's epoch-time spread between the record's
    # median and the reproduction's best epoch, which reached 10x on 2 cores shared by two test workers (1e7 passed)
    (lambda r: [e.update(throughput=e["throughput"] * 1e9) for e in r["epochs"]],
     "throughput (claimed median vs reproduced best timed epoch)"),
])
def test_a_forged_figure_is_not_reproduced(verified, forge, failed):
    claimed = json.loads(json.dumps(verified["record"]))
    forge(claimed)
    reproduced = verified["document"]["reproduction"]
    checks, timed = compare_runs(claimed, reproduced)
    assert timed  # same machine
    assert failed in [c.name for c in checks if not c.ok]


def test_an_option_added_after_the_claim_is_not_a_mismatch(verified):
    """A record made before an option existed lacks its key; its re-run records the default. A key the claim
    has stays compared, whatever the reproduction adds."""
    claimed = json.loads(json.dumps(verified["record"]))
    reproduced = json.loads(json.dumps(verified["document"]["reproduction"]))
    reproduced["hyperparameters"]["an_option_added_later"] = "its default"
    checks, _ = compare_runs(claimed, reproduced)
    assert "hyperparameters" not in [c.name for c in checks if not c.ok]
    claimed["hyperparameters"]["an_option_added_later"] = "another value"
    checks, _ = compare_runs(claimed, reproduced)
    assert "hyperparameters" in [c.name for c in checks if not c.ok]


def test_a_relabelled_store_is_caught_before_anything_runs(verified, tmp_path):
    from dgbench.generators.esdg_random import build
    other = build(out=tmp_path / "other.zarr", nodes=64, snapshots=4, edge_factor=3.0, seed=4)
    meta = other / "zarr.json"
    doc = json.loads(meta.read_text())
    original = json.loads((verified["store"] / "zarr.json").read_text())["attributes"]
    doc["attributes"]["fingerprint"] = original["fingerprint"]  # relabelled: attributes only
    meta.write_text(json.dumps(doc))
    with pytest.raises(DgbenchError, match="not a valid store .fingerprint: stored"):
        check_store(other, verified["record"])
    doc["attributes"].update({k: original[k] for k in ("arrays", "num_edges", "file_digests",
                                                                 "file_checksums")})  # and the hashes
    meta.write_text(json.dumps(doc))
    with pytest.raises(DgbenchError, match="not a valid store"):
        check_store(other, verified["record"])


def test_an_edited_reproduction_stops_the_board(verified, tmp_path):
    board = tmp_path / "board"
    shutil.copytree(verified["board"], board)
    filed = board / "reproductions" / f"{content_hash(verified['record'])}.json"
    document = json.loads(filed.read_text())
    document["reproduction"] = {**verified["record"]}  # the honest run, filed as if it reproduced a forged claim
    forged_claim = reseal({**verified["record"], "final_metrics": {"test": {"ap": 0.99}}})
    forged_path = write(forged_claim, tmp_path / "forged.json")
    submit(forged_path, board, allow_dirty=True)
    forged_file = board / "reproductions" / f"{content_hash(forged_claim)}.json"
    forged_file.write_text(json.dumps({**document, "record": content_hash(forged_claim), "verdict": "reproduced"}))
    shown = {entry.digest: entry.reproduction for entry in load_board(board)}[content_hash(forged_claim)]
    assert shown["stated"] == "reproduced" and shown["verdict"] == "not reproduced"
    assert verify_module.reproduced_label(shown) == "no (final_metrics.test.ap)"
    forged_file.write_text(json.dumps({**document, "record": content_hash(forged_claim), "reproduction": {"x": 1}}))
    with pytest.raises(DgbenchError, match="the reproduced record is invalid"):
        load_board(board)


def test_run_arguments_replace_where_the_run_reads_and_writes(verified, tmp_path):
    record = {**verified["record"], "world_size": 1,
              "command": ["/usr/bin/dgbench", "--quiet", "run", "--scheme", "single", "--model", "tmgcn",
                          "--dataset=/etc", "--out", "/etc/passwd.json", "--nproc", "64", "--epochs", "4"]}
    arguments = run_arguments(record, verified["store"], tmp_path / "x.json")
    assert "/etc" not in " ".join(arguments) and "64" not in arguments
    assert arguments[-6:] == ["--dataset", str(verified["store"]), "--out", str(tmp_path / "x.json"), "--nproc", "1"]
    with pytest.raises(DgbenchError, match="is not a `dgbench run`"):
        run_arguments({**record, "command": ["pytest", "-q"]}, verified["store"], tmp_path / "x.json")
    with pytest.raises(DgbenchError, match="do not parse here"):
        run_arguments({**record, "command": ["dgbench", "run", "--no-such-option"]}, verified["store"],
                      tmp_path / "x.json")


def test_an_unregistered_store_needs_store(verified):
    with pytest.raises(DgbenchError, match="not in the official registry: pass --store"):
        verify(verified["record_path"])


def test_a_relabelled_store_cannot_be_registered_as_official(tmp_path, esdg_store):
    from click.testing import CliRunner
    from dgbench.leaderboard import official
    registry = json.loads((REPO_ROOT / "leaderboards" / "official_stores.json").read_text())["stores"]
    target = registry[0]
    meta = esdg_store / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"].update({k: target[k] for k in ("fingerprint", "num_nodes", "num_edges", "num_snapshots")})
    meta.write_text(json.dumps(doc))
    board = tmp_path / "board"
    board.mkdir()
    added = CliRunner().invoke(official.main, ["add", str(esdg_store), "--command", "dgbench prepare x",
                                               "--board", str(board)])
    assert added.exit_code != 0 and "not registered, the store is invalid" in str(added.exception)
    assert not (board / "official_stores.json").exists()
