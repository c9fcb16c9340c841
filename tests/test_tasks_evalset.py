"""Evaluation sets are data: written once beside the store, fingerprinted, verified on read; a change
of the sampler code cannot change an existing set; the evaluator scores exactly its pairs."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.tasks import negatives as ns
from dgbench.tasks.evalset import EvaluationSpec, read_set, set_path, tasks_dir
from dgbench.tasks.evaluator import Evaluator
from dgbench.tasks.link import link_prediction_set


def test_a_set_is_written_beside_the_store_and_read_back_identically(stream_store):
    first = link_prediction_set(stream_store, "historical", 3)
    assert first.path == tasks_dir(stream_store) / "link-prediction-historical-k3"
    assert first.path.parent.parent == stream_store.parent  # beside, never inside, the store
    again = link_prediction_set(stream_store, "historical", 3)
    assert again.fingerprint == first.fingerprint
    for name, values in first.arrays.items():
        np.testing.assert_array_equal(values, again.arrays[name])
    other = link_prediction_set(stream_store, "random", 3)
    assert other.fingerprint != first.fingerprint


def test_changing_the_sampler_code_cannot_change_an_existing_set(stream_store, monkeypatch):
    before = link_prediction_set(stream_store, "random", 2)
    monkeypatch.setattr(ns, "draw", lambda *a, **k: pytest.fail("an existing set was sampled again"))
    after = link_prediction_set(stream_store, "random", 2)
    assert after.fingerprint == before.fingerprint


def test_a_set_edited_on_disk_is_refused_with_one_line(stream_store):
    evaluation = link_prediction_set(stream_store, "random", 2)
    file = evaluation.path / "test_negatives.npy"
    values = np.load(file)
    values[0, 0] = (values[0, 0] + 1) % 40
    np.save(file, values)
    with pytest.raises(DgbenchError, match="test_negatives.npy: differs from the hash its manifest records"):
        read_set(evaluation.path)


def test_a_manifest_whose_fingerprint_was_edited_is_refused(stream_store):
    evaluation = link_prediction_set(stream_store, "random", 1)
    manifest = json.loads((evaluation.path / "manifest.json").read_text())
    manifest["negatives"] = 5
    (evaluation.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DgbenchError, match="fingerprint does not match its content"):
        read_set(evaluation.path)


def test_a_set_of_another_store_is_refused(stream_store, tmp_path):
    from dgbench.generators.stream import build
    other = build(out=tmp_path / "other.zarr", users=50, items=40, events=2000, edge_dim=4, seed=2)
    made = link_prediction_set(other, "random", 1)
    target = set_path(stream_store, EvaluationSpec("link-prediction", "random", 1))
    target.parent.mkdir(parents=True, exist_ok=True)
    made.path.rename(target)
    with pytest.raises(DgbenchError, match="was made for store"):
        link_prediction_set(stream_store, "random", 1)


def test_the_evaluator_scores_a_perfect_and_a_reversed_model(esdg_store):
    evaluation = link_prediction_set(esdg_store, "random", 4)
    evaluator = Evaluator(evaluation)
    negatives = evaluation.get("test", "negatives")
    nan_where_missing = np.where(negatives < 0, np.nan, 0.0)
    n = len(negatives)
    perfect = evaluator.score("test", np.ones(n), nan_where_missing).as_metrics()
    assert perfect["mrr"] == 1.0 and perfect["ap"] == 1.0 and perfect["hits@1"] == 1.0
    assert perfect["positives"] == n and perfect["negatives"] == float((negatives >= 0).sum())
    reversed_ = evaluator.score("test", -np.ones(n), nan_where_missing).as_metrics()
    assert reversed_["mrr"] == pytest.approx(1 / 5) and reversed_["auc"] == 0.0
    with pytest.raises(ValueError, match="NaN exactly where"):
        evaluator.score("test", np.ones(n), np.full(negatives.shape, np.nan))


def test_tasks_command_writes_each_allowed_set_and_prints_its_fingerprint(esdg_store):
    from click.testing import CliRunner

    from dgbench.cli import cli
    result = CliRunner().invoke(cli, ["tasks", str(esdg_store), "--eval-negatives", "3"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2  # random and historical: no inductive set on a snapshot store
    for line, strategy in zip(lines, ("random", "historical")):
        fingerprint = link_prediction_set(esdg_store, strategy, 3).fingerprint
        assert f"link-prediction-{strategy}-k3  fingerprint {fingerprint[:16]}" in line
    refused = CliRunner().invoke(cli, ["tasks", str(esdg_store), "--negatives", "inductive"])
    assert refused.exit_code == 1 and "one snapshot each" in refused.output
