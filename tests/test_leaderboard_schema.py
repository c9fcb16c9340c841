"""Record schema v1: a real record passes; each malformed or tampered one fails on the named field."""
from __future__ import annotations

import json
from typing import Callable

import pytest

from dgbench.leaderboard.schema import RecordParseError, parse_record, parse_record_text, validate_record
from leaderboard_records import make_record, reseal


def fields(problems) -> list[str]:
    return [p.field for p in problems]


def test_a_record_from_build_record_is_valid():
    for world_size in (1, 3):
        assert validate_record(make_record(world_size=world_size)) == []


def remove(path: str) -> Callable[[dict], None]:
    def edit(record: dict) -> None:
        *parents, last = path.split(".")
        target = record
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        del target[last]
    return edit


TAMPERED = {
    "field removed: world_size": (remove("world_size"), "world_size", "missing"),
    "field removed: dataset.fingerprint": (remove("dataset.fingerprint"), "dataset.fingerprint", "missing"),
    "field removed: an epoch's time": (lambda r: r["epochs"][2].pop("time_s"), "epochs[2].time_s", "missing"),
    "test AP above 1": (lambda r: r["final_metrics"]["test"].update(ap=1.5), "final_metrics.test.ap", "<= 1"),
    "val AUC below 0": (lambda r: r["epochs"][1]["metrics"]["val"].update(auc=-0.1), "epochs[1].metrics.val.auc", ">= 0"),
    "zero epoch time": (lambda r: r["epochs"][0].update(time_s=0.0), "epochs[0].time_s", "> 0"),
    "negative transfer time": (lambda r: r["epochs"][0].update(transfer_s=-1.0), "epochs[0].transfer_s", ">= 0"),
    "world size disagrees with per-rank figures": (lambda r: r.update(world_size=3), "epochs[0].per_rank", "world_size is 3"),
    "string world size": (lambda r: r.update(world_size="2"), "world_size", "expected an integer"),
    "boolean world size": (lambda r: r.update(world_size=True), "world_size", "expected an integer"),
    "throughput inflated": (lambda r: r["epochs"][3].update(throughput=r["epochs"][3]["throughput"] * 2),
                            "epochs[3].throughput", "work / time_s"),
    "epoch time faster than the slowest rank": (lambda r: r["epochs"][1].update(time_s=r["epochs"][1]["time_s"] / 2,
                                                                                 throughput=r["epochs"][1]["work"] / (r["epochs"][1]["time_s"] / 2)),
                                                "epochs[1].time_s", "slowest rank"),
    "comm bytes not the ranks' sum": (lambda r: r["epochs"][1].update(comm_bytes=1), "epochs[1].comm_bytes", "sum to"),
    "epochs out of order": (lambda r: r["epochs"][2].update(epoch=7), "epochs[2].epoch", "expected 2"),
    "fingerprint not a sha256": (lambda r: r["dataset"].update(fingerprint="abc"), "dataset.fingerprint", "hex"),
    "family and store kind disagree": (lambda r: r["dataset"].update(kind="stream"), "dataset.kind", "snapshots store"),
    "unknown family": (lambda r: r.update(family="quantum"), "family", "expected one of"),
    "hardware class not from the environment": (lambda r: r.update(hardware_class="NVIDIA H100"), "hardware_class", "environment says"),
    "ended before started": (lambda r: r.update(ended_at="2000-01-01T00:00:00+00:00"), "ended_at", "before started_at"),
    "time without zone": (lambda r: r.update(started_at="2026-01-01T00:00:00"), "started_at", "no time zone"),
    "commit not a commit": (lambda r: r["code"].update(commit="main"), "code.commit", "40-digit"),
    "no epochs": (lambda r: r.update(epochs=[]), "epochs", "at least one epoch"),
    "metrics not an object": (lambda r: r["final_metrics"].update(test=0.9), "final_metrics.test", "expected an object"),
    "command not strings": (lambda r: r.update(command=["dgbench", 3]), "command", "list of strings"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_each_malformed_record_is_refused_on_its_field(case: str):
    edit, field, reason = TAMPERED[case]
    record = make_record(world_size=2, epochs=4)
    edit(record)
    problems = validate_record(reseal(record))  # resealed: the field check itself must catch it
    assert field in fields(problems), problems
    assert reason in next(str(p) for p in problems if p.field == field)


def test_an_edit_without_resealing_breaks_the_seal():
    record = make_record()
    record["dataset"]["fingerprint"] = "0" * 64  # well-formed, but not what ran
    assert fields(validate_record(record)) == ["seal"]
    record.pop("seal")
    assert fields(validate_record(record)) == ["seal"]


@pytest.mark.parametrize("version, reason", [(2, "unknown version 2"), ("1", "expected an integer"), (None, "expected an integer")])
def test_unknown_schema_version_is_refused(version, reason):
    record = make_record()
    record["schema_version"] = version
    problems = validate_record(reseal(record))
    assert fields(problems) == ["schema_version"] and reason in str(problems[0])


def test_another_schema_is_refused():
    record = make_record()
    record["schema"] = "tgb.result"
    assert fields(validate_record(record)) == ["schema"]


@pytest.mark.parametrize("text, reason", [
    ('{"a": NaN}', "NaN"),
    ('{"a": {"lr": 1e400}}', "not a finite double"),  # overflows to inf without being a constant
    ('{"a": 1, "a": 2}', "appears twice"),
    ("[1, 2]", "not an object"),
    ('{"a": ', "not valid JSON"),
])
def test_strict_parsing(text: str, reason: str):
    with pytest.raises(RecordParseError) as caught:
        parse_record_text(text)
    assert caught.value.problem.field == "(file)" and reason in caught.value.problem.reason


def test_parse_reads_a_written_record_back_unchanged(tmp_path):
    record = make_record()
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    assert parse_record(path) == record
    (tmp_path / "bin.json").write_bytes(b"\x80\x81pickle")
    with pytest.raises(RecordParseError, match="cannot be read"):
        parse_record(tmp_path / "bin.json")


def test_docs_describe_every_field_a_record_has():
    from dgbench.leaderboard.tracks import MIN_ACCURACY_EPOCHS, MIN_SEEDS, MIN_TIMED_EPOCHS, WARMUP_EPOCHS
    from dgbench.records import REPO_ROOT
    doc = (REPO_ROOT / "docs" / "result-record.md").read_text()
    record = make_record(world_size=2)
    keys = set(record) | {f"dataset.{k}" for k in record["dataset"]} | set(record["epochs"][0])
    keys |= set(record["epochs"][0]["per_rank"][0]) | set(record["environment"])
    missing = sorted(k for k in keys if f"`{k.split('.')[-1]}`" not in doc)
    assert not missing, f"docs/result-record.md does not describe {missing}"
    rules = (REPO_ROOT / "leaderboards" / "RULES.md").read_text()
    assert f"{WARMUP_EPOCHS + MIN_TIMED_EPOCHS} epochs ({WARMUP_EPOCHS} warm-up + {MIN_TIMED_EPOCHS} timed)" in rules
    assert f"at least {MIN_SEEDS} seeds" in rules and f"at least {MIN_ACCURACY_EPOCHS} epochs" in rules
