"""Official ranks and `dgbench verify`: a row that failed verification leaves the official ranking, and a
row not yet verified ranks below every reproduced row of its group (leaderboards/RULES.md, "Trust")."""
from __future__ import annotations

import json
from pathlib import Path

from dgbench.files import write_atomic
from dgbench.leaderboard.board import load_board, submit
from dgbench.leaderboard.tables import build_view
from dgbench.leaderboard.verify import compare_runs, reproduction_document, reproduction_path
from dgbench.records import content_hash
from tests.leaderboard_records import make_record, write


def _file(board: Path, tmp_path: Path, record: dict, name: str) -> str:
    submit(write(record, tmp_path / f"{name}.json"), board, tracks=["throughput", "accuracy"])
    return content_hash(record)


def _file_reproduction(board: Path, record: dict, reproduced: dict) -> None:
    checks, timed = compare_runs(record, reproduced)
    document = reproduction_document(record, reproduced, checks, timed, Path("stores/esdg-random.zarr"))
    write_atomic(reproduction_path(board, content_hash(record)), json.dumps(document, sort_keys=True) + "\n")


def _official_rows(board: Path) -> list[dict]:
    table = next(t for t in build_view(load_board(board)).tables["throughput"] if t.id == "throughput-official")
    return [{column: cell.text for column, cell in zip(table.columns, row)} for row in table.rows]


def test_a_forged_record_that_failed_verification_leaves_the_official_ranking(tmp_path):
    board = tmp_path / "board"
    forged = make_record(scheme="vertex", epoch_seconds=0.02)  # times divided by 100
    honest = make_record(scheme="snapshot", epoch_seconds=2.0)
    _file(board, tmp_path, forged, "forged")
    _file(board, tmp_path, honest, "honest")
    assert [row["Scheme"] for row in _official_rows(board)] == ["vertex", "snapshot"]  # before verify: a claim
    _file_reproduction(board, forged, make_record(scheme="vertex", epoch_seconds=2.0))  # what a re-run gives
    _file_reproduction(board, honest, make_record(scheme="snapshot", epoch_seconds=2.0))
    rows = _official_rows(board)
    assert [(row["Scheme"], row["Rank"], row["Reproduced"]) for row in rows] == [("snapshot", "1", "yes")]
    entries = {(e.track, e.record["scheme"]): e for e in load_board(board)}
    for track in ("throughput", "accuracy"):  # off every official table, with the reason
        assert entries[(track, "vertex")].official is None
        assert entries[(track, "vertex")].unofficial_reason.startswith("failed verification (throughput")


def test_a_row_not_yet_verified_ranks_below_every_reproduced_row(tmp_path):
    board = tmp_path / "board"
    claim = make_record(scheme="vertex", epoch_seconds=1.0)  # claims twice the edges/s, not yet verified
    reproduced = make_record(scheme="snapshot", epoch_seconds=2.0)
    _file(board, tmp_path, claim, "claim")
    _file(board, tmp_path, reproduced, "reproduced")
    _file_reproduction(board, reproduced, make_record(scheme="snapshot", epoch_seconds=2.0))
    rows = _official_rows(board)
    assert [(row["Scheme"], row["Rank"], row["Reproduced"]) for row in rows] == [
        ("snapshot", "1", "yes"), ("vertex", "2", "not yet")]
