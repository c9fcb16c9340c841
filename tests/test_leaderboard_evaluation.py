"""The accuracy track ranks officially only records that scored the store's official evaluation set
(else: unofficial, with a one-line reason); the time-to-quality view; `dgbench run --seeds`."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dgbench.errors import DgbenchError
from dgbench.leaderboard.board import load_board, submit
from dgbench.leaderboard.evaluation import evaluation_problem, time_to_quality
from dgbench.leaderboard.tables import build_view
from dgbench.records import REPO_ROOT
from tests.leaderboard_records import make_record, official_dataset, reseal, write

# the registered stores whose labels make the node-classification task (dgbench/tasks/node.py)
LABEL_SETS = {"AMLSim 20K fanin200cycle200": {"node-classification-active-vertex"},
              "Wikipedia (JODIE/TGN)": {"node-classification-source-state"}}
REGISTRY = {s["label"]: s
            for s in json.loads((REPO_ROOT / "leaderboards" / "official_stores.json").read_text())["stores"]}


def _forged_set(record: dict) -> dict:
    record = json.loads(json.dumps(record))
    record["evaluation"]["sets"][0]["fingerprint"] = record["evaluation"]["fingerprint"] = "a" * 64
    return reseal(record)


def test_every_official_store_lists_its_evaluation_sets():
    for label, entry in REGISTRY.items():
        names = set(entry["evaluation_sets"])
        expected = {"link-prediction-random-k9", "link-prediction-historical-k9"}
        if entry["kind"] == "stream":
            expected.add("link-prediction-inductive-k9")
        expected |= LABEL_SETS.get(label, set())
        assert names == expected, label


def test_a_labelled_store_registers_its_label_set_and_a_one_class_store_none(tmp_path):
    from dgbench.leaderboard.evaluation import official_evaluation_sets
    from dgbench.tasks.node import label_set
    from tests.test_tasks_node import planted_stream
    store = planted_stream(tmp_path / "planted.zarr")
    sets = official_evaluation_sets(store)
    assert sets["node-classification-source-state"] == label_set(store).fingerprint
    one_class = planted_stream(tmp_path / "one-class.zarr", label="zeros")
    assert not any(name.startswith("node-classification") for name in official_evaluation_sets(one_class))


def test_a_record_scoring_another_evaluation_set_is_not_ranked_officially(tmp_path):
    good = make_record(seed=0, epochs=6)  # 6: the throughput and scaling tracks rank 5 timed epochs
    bad = _forged_set(make_record(seed=1, epochs=6))
    board = tmp_path / "board"
    accepted = submit(write(good, tmp_path / "good.json"), board)
    refused = submit(write(bad, tmp_path / "bad.json"), board)
    assert accepted.unofficial == {}
    reason = refused.unofficial["accuracy"]
    assert "\n" not in reason
    assert "has fingerprint aaaaaaaaaaaa, the official one of esdg-random (defaults) is" in reason
    entries = {(e.track, e.record["hyperparameters"]["seed"]): e for e in load_board(board)}
    assert entries[("accuracy", 0)].official is not None
    assert entries[("accuracy", 1)].official is None and entries[("accuracy", 1)].unofficial_reason == reason
    assert entries[("throughput", 1)].official is not None  # edges/s do not depend on the evaluation set
    tables = build_view(list(entries.values())).tables
    unofficial = next(t for t in tables["accuracy-pending"] if t.id == "accuracy-pending-unofficial")
    assert reason in unofficial.note and unofficial.rows  # one seed: listed, not yet ranked


def test_a_record_without_evaluation_block_or_with_an_unknown_set_says_why():
    registered = REGISTRY["esdg-random (defaults)"]
    record = make_record()
    assert evaluation_problem(record, registered) is None
    bare = {k: v for k, v in record.items() if k != "evaluation"}
    assert "cites no evaluation set" in evaluation_problem(bare, registered)
    record["evaluation"]["sets"][0]["name"] = "link-prediction-random-k50"
    assert "is not an official set of esdg-random (defaults)" in evaluation_problem(record, registered)
    assert evaluation_problem(bare, None) is None  # an unregistered store is unofficial anyway


def test_submit_prints_the_reason_on_one_line(tmp_path):
    from dgbench.leaderboard.cli import submit_command
    path = write(_forged_set(make_record(seed=4, epochs=4)), tmp_path / "r.json")
    result = CliRunner().invoke(submit_command, [str(path), "--board", str(tmp_path / "board")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "/accuracy/" in line]
    assert len(lines) == 1 and "(unofficial: evaluation set link-prediction-random-k9 has fingerprint" in lines[0]


def test_time_to_quality_sums_training_seconds_until_the_target_first_holds():
    record = {"epochs": [{"time_s": 2.0, "metrics": {"val": {"ap": 0.55}}},
                         {"time_s": 1.5, "metrics": {"val": {"ap": 0.62}}},
                         {"time_s": 1.0, "metrics": {"val": {"ap": 0.70}}}]}
    assert time_to_quality(record, {"value": 0.6}) == (3.5, 2)
    assert time_to_quality(record, {"value": 0.9}) is None


def test_time_to_quality_table_on_a_store_with_a_target(tmp_path):
    dataset = official_dataset("communities (defaults)")
    board = tmp_path / "board"
    for seed in (0, 1, 2):
        record = make_record(seed=seed, epochs=4, dataset=dataset)
        for index, epoch in enumerate(record["epochs"]):
            epoch["metrics"]["val"]["ap"] = 0.5 + 0.05 * index * (seed + 1)  # seed 0 reaches 0.6 at epoch 3
        submit(write(reseal(record), tmp_path / f"{seed}.json"), board)
    table = next(t for t in build_view(load_board(board)).tables["time-to-quality"] if t.id.endswith("-official"))
    [row] = table.rows
    cells = dict(zip(table.columns, (cell.text for cell in row)))
    assert cells["Target"] == "val ap ≥ 0.6" and cells["Seeds"] == "3" and cells["Reached"] == "3"
    seconds = [sum(e["time_s"] for e in make_record(seed=s, epochs=4, dataset=dataset)["epochs"][:n])
               for s, n in ((0, 3), (1, 2), (2, 2))]
    assert float(cells["Seconds to target"]) == pytest.approx(sorted(seconds)[1], rel=1e-2)


def test_time_to_quality_leaves_baselines_out(tmp_path):
    """A baseline trains nothing: 'reaching' the target in its zero training seconds is no time to quality."""
    board = tmp_path / "board"
    for seed in (0, 1, 2):
        record = make_record(model="persistence", seed=seed, epochs=4,
                             dataset=official_dataset("communities (defaults)"))
        record["extra"] = {**record.get("extra", {}), "baseline": {"lookback": 1}}
        for epoch in record["epochs"]:
            epoch["metrics"]["val"]["ap"] = 0.77  # above the target from the first epoch on
        submit(write(reseal(record), tmp_path / f"{seed}.json"), board)
    view = build_view(load_board(board))
    assert not any(table.rows for table in view.tables.get("time-to-quality", []))
    assert next(t for t in view.tables["accuracy"] if t.id == "accuracy-official").rows  # still ranked for accuracy


def test_seeds_are_parsed_and_refused_with_one_line():
    from dgbench.trainers.seeds import parse_seeds
    assert parse_seeds("0,1, 2") == [0, 1, 2]
    for bad, message in (("0,x", "comma list of integers"), ("1,1", "named twice"), (",", "at least one")):
        with pytest.raises(DgbenchError, match=message):
            parse_seeds(bad)


def test_run_seeds_writes_one_record_per_seed(esdg_store, tmp_path):
    from dgbench.trainers.config import RunConfig
    from dgbench.trainers.seeds import run_seeds
    written = run_seeds(RunConfig("single", "persistence", esdg_store, epochs=3, out=tmp_path / "runs"), [4, 5, 6])
    seeds = sorted(json.loads(path.read_text())["hyperparameters"]["seed"] for _, path in written)
    assert seeds == [4, 5, 6]
    with pytest.raises(DgbenchError, match="give --out a folder"):
        run_seeds(RunConfig("single", "persistence", esdg_store, out=tmp_path / "one.json"), [0, 1])
