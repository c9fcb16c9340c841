"""Issue 19, records that cannot be forged into first place: every figure is bounded by the store it
names and by physics, and a huge integer is a one-line refusal (it crashed submit and compare)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.leaderboard.board import Rejected, submit
from dgbench.leaderboard.schema import MAX_COMM_BYTES_PER_S_PER_RANK, MAX_EDGES_PER_S_PER_RANK
from dgbench.records import REPO_ROOT
from leaderboard_records import make_record, reseal, write


@pytest.fixture
def board(tmp_path: Path) -> Path:
    root = tmp_path / "board"
    root.mkdir()
    shutil.copy(REPO_ROOT / "leaderboards" / "official_stores.json", root)
    return root


def forged(tmp_path: Path, edit, world_size: int = 1) -> Path:
    """A clean record with ``edit(record)`` applied to every epoch, resealed as a forger would."""
    record = make_record(world_size=world_size)
    for epoch in record["epochs"]:
        edit(epoch)
    return write(reseal(record), tmp_path / "forged.json")


def refusal(board: Path, path: Path) -> list[str]:
    with pytest.raises(Rejected) as caught:
        submit(path, board)
    return [str(p) for p in caught.value.problems]


def test_a_huge_comm_bytes_is_one_line_for_submit_and_compare(board, tmp_path):
    def huge(epoch):
        epoch["comm_bytes"] = 10**400
        for rank in epoch["per_rank"]:
            rank["comm_bytes"] = 10**400
    path = forged(tmp_path, huge)
    reasons = refusal(board, path)
    assert any(r.startswith("epochs[0].comm_bytes: is an integer of 1329 bits, beyond 2^53") for r in reasons)
    result = CliRunner().invoke(cli, ["submit", "--board", str(board), str(path)])
    assert result.exit_code == 1 and "Traceback" not in result.output and "OverflowError" not in result.output
    clean = write(make_record(), tmp_path / "clean.json")
    compared = CliRunner().invoke(cli, ["compare", str(clean), str(path)])
    assert compared.exit_code == 1 and "beyond 2^53" in compared.stderr and "OverflowError" not in compared.output


def test_work_beyond_the_store_is_refused(board, tmp_path):
    path = forged(tmp_path, lambda epoch: epoch.update(work=10**300, throughput=10**300 / epoch["time_s"]))
    assert any("epochs[0].work: is an integer of" in r for r in refusal(board, path))
    edges = make_record()["dataset"]["num_edges"]
    path = forged(tmp_path, lambda epoch: epoch.update(work=edges + 1, throughput=(edges + 1) / epoch["time_s"]))
    assert f"epochs[1].work: is {edges + 1}, above the {edges} edges an epoch can process (each store edge " \
           f"(event) once, times the smoothing window and group length)" in refusal(board, path)


def test_smoothing_and_groups_raise_the_work_bound_by_their_multiplicity(board, tmp_path):
    """An M-product input of window w holds each edge in up to w snapshots and a group protocol of length g
    counts a snapshot in up to g groups: a real smoothed or grouped run counts more than the store's edges."""
    edges = make_record()["dataset"]["num_edges"]
    record = make_record()
    record.setdefault("extra", {})["smoothing"] = {"applied": "m-product", "window": 3}
    record["hyperparameters"]["group_length"] = 2
    for epoch in record["epochs"]:
        epoch.update(work=6 * edges, throughput=6 * edges / epoch["time_s"])
    assert not any(".work:" in r for r in _problems(board, write(reseal(record), tmp_path / "ok.json")))
    for epoch in record["epochs"]:
        epoch.update(work=6 * edges + 1, throughput=(6 * edges + 1) / epoch["time_s"])
    assert any(r.startswith(f"epochs[0].work: is {6 * edges + 1}, above the {6 * edges} edges")
               for r in _problems(board, write(reseal(record), tmp_path / "over.json")))


def _problems(board: Path, path: Path) -> list[str]:
    try:
        submit(path, board)
    except Rejected as caught:
        return [str(p) for p in caught.problems]
    return []


def test_throughput_beyond_physics_is_refused(board, tmp_path):
    def instant(epoch):
        seconds = epoch["work"] / (2 * MAX_EDGES_PER_S_PER_RANK)
        epoch.update(time_s=seconds, transfer_s=0.0, compute_s=seconds, communication_s=0.0,
                     throughput=epoch["work"] / seconds)
        for rank in epoch["per_rank"]:
            rank.update(time_s=seconds, transfer_s=0.0, compute_s=seconds, communication_s=0.0)
    assert any(r.startswith("epochs[1].throughput: is ") and "above the physical bound" in r
               for r in refusal(board, forged(tmp_path, instant)))


def test_bytes_sent_beyond_physics_and_more_elements_than_bytes_are_refused(board, tmp_path):
    def flood(epoch):
        total = int(2 * MAX_COMM_BYTES_PER_S_PER_RANK * epoch["time_s"] * 2)
        epoch.update(comm_bytes=total, comm_elements=total + 2)
        for rank in epoch["per_rank"]:
            rank.update(comm_bytes=total // 2, comm_elements=total // 2 + 1)
    reasons = refusal(board, forged(tmp_path, flood, world_size=2))
    assert any(r.startswith("epochs[0].comm_bytes: is ") and "above the physical bound" in r for r in reasons)
    assert any(r.startswith("epochs[0].comm_elements: is ") and "more than the" in r for r in reasons)


def test_every_record_on_the_repo_board_is_within_the_bounds():
    from dgbench.leaderboard.board import load_board
    assert len(load_board()) > 0  # load_board re-validates each filed record and raises on the first problem
