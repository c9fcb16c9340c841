"""The typed record (dgbench/record_types.py): every record on the board reads into the types and back
unchanged, unknown and absent fields survive the round trip, each family's extra has its type, the checks
live on the types, and docs/result-record.md's field tables are the types' own."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dgbench.leaderboard.schema import validate_record
from dgbench.record_types import (ABSENT, DOC_PATH, DOC_TYPES, ContinuousExtra, DiscreteExtra, EpochFigures, Extra,
                                  ModelSelection, RankFigures, Record, System, TimingEvidence, doc_table, main,
                                  problems_of, render_doc)
from dgbench.records import REPO_ROOT
from leaderboard_records import make_record, reseal

BOARD_RECORDS = sorted((REPO_ROOT / "leaderboards" / "tracks").glob("*/*.json"))


def board_record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_the_board_has_records_old_and_new():
    records = [board_record(path) for path in BOARD_RECORDS]
    assert len(records) > 50
    assert any("system" not in r for r in records) and any("system" in r for r in records)
    assert {r["family"] for r in records} == {"discrete", "continuous"}


@pytest.mark.parametrize("path", BOARD_RECORDS, ids=lambda p: p.stem[:12])
def test_every_board_record_reads_back_unchanged_and_validates(path: Path):
    record = board_record(path)
    typed = Record.from_json(record)
    assert typed.to_json() == record
    assert json.dumps(typed.to_json(), sort_keys=True) == json.dumps(record, sort_keys=True)
    assert problems_of(record) == [] and validate_record(record) == []


def test_records_are_typed_all_the_way_down():
    record = make_record(world_size=2)
    typed = Record.from_json(record)
    assert isinstance(typed.epochs[0], EpochFigures) and isinstance(typed.epochs[0].per_rank[1], RankFigures)
    assert isinstance(typed.epochs[0].per_rank[0].evidence, TimingEvidence)
    assert isinstance(typed.system, System) and typed.world_size == 2
    assert typed.epochs[0].per_rank[0].evidence.threads == record["epochs"][0]["per_rank"][0]["evidence"]["threads"]


def test_each_family_contributes_its_typed_extra():
    discrete = next(board_record(p) for p in BOARD_RECORDS if board_record(p)["family"] == "discrete")
    continuous = next(board_record(p) for p in BOARD_RECORDS if board_record(p)["family"] == "continuous")
    extra = Record.from_json(discrete).extra
    assert type(extra) is DiscreteExtra and extra.smoothing == discrete["extra"]["smoothing"]
    extra = Record.from_json(continuous).extra
    assert type(extra) is ContinuousExtra and extra.eta1 == continuous["extra"]["eta1"]
    # a scheme's own keys are kept beside the family's
    assert ContinuousExtra.from_json({"eta1": 0.5, "blad": {"x": 1}}).others == {"blad": {"x": 1}}
    assert type(Record.from_json({**discrete, "family": "quantum"}).extra) is Extra
    selection = {"eval_every": 2, "criterion": "val ap", "best_epoch": 1, "validated": [{"epoch": 1, "ap": 0.7}],
                 "test": "scored once, on the best-validation state"}
    typed = Record.from_json({**discrete, "extra": {**discrete["extra"], "model_selection": selection}})
    assert isinstance(typed.extra.model_selection, ModelSelection) and typed.extra.model_selection.best_epoch == 1
    assert typed.extra.to_json()["model_selection"] == selection


def test_unknown_fields_and_blocks_are_kept_and_accepted():
    record = make_record(world_size=2)
    record["future_block"] = {"anything": [1, 2]}
    record["epochs"][0]["future_figure"] = 3.5
    record["epochs"][0]["per_rank"][1]["future_rank_figure"] = "x"
    record["dataset"]["future"] = None
    record = reseal(record)
    typed = Record.from_json(record)
    assert typed.others == {"future_block": {"anything": [1, 2]}}
    assert typed.epochs[0].per_rank[1].others == {"future_rank_figure": "x"}
    assert typed.to_json() == record and validate_record(record) == []


def test_absent_and_null_stay_apart():
    system = {"nodes": 1, "ranks_per_node": 1, "accelerators_per_node": 0, "cuda": None}
    typed = System.from_json(system)
    assert typed.cuda is None and typed.driver is ABSENT
    assert typed.to_json() == system


def test_an_older_record_without_newer_blocks_validates_and_round_trips():
    record = make_record()
    for key in ("system", "timing", "evaluation"):
        record.pop(key, None)
    record["code"] = {"commit": record["code"]["commit"], "dirty": False}
    for epoch in record["epochs"]:
        for key in ("busy_s", "wait_s", "collective_transfer_s", "lambda", "critical_path_s"):
            epoch.pop(key, None)
        for rank in epoch["per_rank"]:
            for key in ("busy_s", "wait_s", "collective_transfer_s", "probes", "probe_floor_s", "evidence"):
                rank.pop(key)
    record["hardware_class"] = "cpu-" + str(record["environment"]["cpu_count"]) + "c"
    record = reseal(record)
    assert validate_record(record) == []
    assert Record.from_json(record).to_json() == record


def test_checks_live_on_the_types():
    record = make_record(world_size=2)
    del record["epochs"][1]["per_rank"][0]["wait_s"]  # the busy / wait / transfer split is all or nothing
    record["epochs"][2]["per_rank"][1]["evidence"]["threads"] = 0
    problems = [str(p) for p in problems_of(reseal(record))]
    assert "epochs[1].per_rank[0].wait_s: missing" in problems
    assert "epochs[2].per_rank[1].evidence.threads: is 0, must be >= 1" in problems


def test_a_built_record_is_what_the_types_write():
    record = make_record(world_size=3)
    assert Record.from_json(record).to_json() == record and validate_record(record) == []
    assert "timing" in record and "system" in record


def test_the_docs_field_tables_are_generated_from_the_types():
    doc = DOC_PATH.read_text(encoding="utf-8")
    assert render_doc(doc) == doc, "run: python -m dgbench.record_types --write-doc"
    for name, kind in DOC_TYPES.items():
        assert f"<!-- table: {name} -->\n{doc_table(kind)}<!-- end table -->" in doc, name
    assert main(["--check-doc"]) == 0


def test_a_doc_that_disagrees_with_the_types_is_caught():
    doc = DOC_PATH.read_text(encoding="utf-8")
    edited = doc.replace("| `world_size` | integer ≥ 1 |", "| `world_size` | integer ≥ 0 |")
    assert edited != doc and render_doc(edited) == doc
    dropped = doc.replace("| `cpu_s` |", "| `cpu_seconds` |")
    assert dropped != doc and render_doc(dropped) == doc


def test_typing_a_record_does_not_change_it():
    record = make_record(world_size=2)
    before = copy.deepcopy(record)
    Record.from_json(record).to_json()
    problems_of(record)
    assert record == before


def test_a_huge_epoch_time_is_one_refusal_line_not_a_crash():
    record = make_record(world_size=2)
    record["epochs"][0]["time_s"] = 10**400  # compared with the slowest rank, it once raised OverflowError
    problems = [str(p) for p in validate_record(reseal(record))]
    assert "epochs[0].time_s: is an integer of 1329 bits, beyond 2^53 (not exact in JSON)" in problems


def test_a_blank_commit_is_refused_as_no_commit():
    record = make_record()
    record["code"]["commit"] = ""
    assert [str(p) for p in validate_record(reseal(record))] == ["code.commit: '' is not a 40-digit git commit"]
