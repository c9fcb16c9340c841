"""Runs of different schemes (and the baselines) on one store score the identical evaluation set, cite
its fingerprint, and report the ranking metrics; the continuous loop's one-pass scoring of K negatives
equals the model's own forward pass on each negative."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.tasks.evalset import EvaluationSpec, set_path
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiments


def _fingerprints(record: dict) -> list[str]:
    return [s["fingerprint"] for s in record["evaluation"]["sets"]]


def test_discrete_schemes_and_persistence_score_the_same_evaluation_sets(esdg_store, tmp_path):
    base = dict(epochs=2, hidden=6, seed=3, out=tmp_path, negatives="random", extra_negatives="historical",
                eval_negatives=4)
    single, snapshot, persistence = run_experiments([
        RunConfig("single", "tmgcn", esdg_store, **base), RunConfig("snapshot", "tmgcn", esdg_store, **base),
        RunConfig("single", "persistence", esdg_store, **base)])
    assert _fingerprints(single) == _fingerprints(snapshot) == _fingerprints(persistence)
    assert single["evaluation"]["fingerprint"] == _fingerprints(single)[0]
    assert set_path(esdg_store, EvaluationSpec("link-prediction", "historical", 4)).exists()
    test = single["final_metrics"]["test"]
    assert test == pytest.approx(snapshot["final_metrics"]["test"])
    assert {"ap", "auc", "mrr", "hits@1", "hits@3", "positives"} <= set(test)
    assert "test:historical" in single["final_metrics"] and "val:historical" in single["final_metrics"]
    assert test["negatives"] == single["evaluation"]["sets"][0]["splits"]["test"]["negatives"]
    assert all(epoch["work"] == 0 for epoch in persistence["epochs"])  # a baseline trains nothing
    assert persistence["extra"]["baseline"] == {"lookback": 1}


def test_continuous_schemes_and_edgebank_score_the_same_evaluation_set(stream_store, tmp_path):
    base = dict(epochs=1, batch_size=200, memory_dim=8, neighbors=3, seed=2, out=tmp_path, negatives="inductive",
                eval_negatives=3)
    single, depcache, bank = run_experiments([
        RunConfig("single", "tgn", stream_store, **base), RunConfig("depcache", "tgn", stream_store, **base),
        RunConfig("single", "edgebank", stream_store, bank="time-window", **base)])
    assert _fingerprints(single) == _fingerprints(depcache) == _fingerprints(bank)
    assert single["final_metrics"]["test"]["mrr"] == pytest.approx(depcache["final_metrics"]["test"]["mrr"], abs=1e-6)
    assert bank["extra"]["baseline"]["bank"] == "time-window" and bank["extra"]["baseline"]["window"] > 0
    assert single["hyperparameters"]["negatives"] == "inductive"


def test_one_pass_scoring_of_k_negatives_equals_the_forward_pass_per_negative(stream_store):
    from dgbench.dist import Comm, DistContext
    from dgbench.tasks.link import link_prediction_set
    from dgbench.trainers.continuous.data import Prefetcher
    from dgbench.trainers.continuous.family import build_trainer, partition_problem
    from dgbench.trainers.experiment import resolve

    run = resolve(RunConfig("single", "tgn", stream_store, batch_size=100, memory_dim=8, neighbors=3, seed=1))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    problem = partition_problem(run)
    trainer = build_trainer(ctx, run, run.scheme.partition(problem, 1, run.scheme_options), problem)
    trainer.model.eval()
    evaluation = link_prediction_set(stream_store, "random", 3)
    neg_src, neg_dst = evaluation.get("val", "negative_src"), evaluation.get("val", "negatives")
    trained = trainer.state.table.clone()
    with torch.no_grad():
        trainer.planner.candidates = {"val": (neg_src, neg_dst)}
        plan = next(iter(Prefetcher(trainer.planner, "val", 100, depth=0)))
        together = trainer._score_candidates(plan).numpy()
        for j in range(3):
            trainer.state.table = trained.clone()
            trainer.planner.candidates = {"val": (neg_src[:, j:j + 1], neg_dst[:, j:j + 1])}
            single = next(iter(Prefetcher(trainer.planner, "val", 100, depth=0)))
            outputs = trainer.model(trainer._inputs(single, trainer._views(single)[1]), trainer._views(single)[0])
            np.testing.assert_allclose(together[:, 0], outputs.pos_logits.double().numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(together[:, 1 + j], outputs.neg_logits.double().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy", ["random", "historical"])
def test_every_negative_pair_is_scored_with_its_own_source_and_destination(stream_store, strategy):
    """Embeddings replaced by the root's vertex id and the predictor by a pair code: each score names
    the pair it scored, so the roots' layout ([src, dst, K·src', K·dst'] or [src, dst, K·dst'], gathered from
    the distinct (vertex, time) roots) is checked."""
    from dgbench.dist import Comm, DistContext
    from dgbench.tasks.link import link_prediction_set
    from dgbench.trainers.continuous.data import Prefetcher
    from dgbench.trainers.continuous.family import build_trainer, partition_problem
    from dgbench.trainers.experiment import resolve

    run = resolve(RunConfig("single", "jodie", stream_store, batch_size=150, memory_dim=8, seed=1))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    problem = partition_problem(run)
    trainer = build_trainer(ctx, run, run.scheme.partition(problem, 1, run.scheme_options), problem)
    evaluation = link_prediction_set(stream_store, strategy, 3)
    neg_src, neg_dst = evaluation.get("test", "negative_src"), evaluation.get("test", "negatives")
    width = float(problem.stream.num_nodes)
    trainer.planner.candidates = {"test": (neg_src, neg_dst)}
    plan = next(iter(Prefetcher(trainer.planner, "test", 150, depth=0)))
    assert plan.fixed_source == (strategy == "random")
    # each embedded root (the first needed positions: one per root, or per distinct (vertex, time) root) -> its id
    object.__setattr__(trainer.model, "embed", lambda inputs, views, t, nbr: torch.from_numpy(
        plan.needed_ids[:len(views)].astype(np.float64))[:, None])
    predictor = trainer.model.predictor  # logit relu(width·a + b) of embeddings a, b: the pair's code
    object.__setattr__(predictor, "src", lambda a: a * width)
    object.__setattr__(predictor, "dst", lambda b: b)
    object.__setattr__(predictor, "out", lambda x: x)
    with torch.no_grad():
        scores = trainer._score_candidates(plan).numpy()
    rows = plan.events - problem.stream.ranges["test"][0]
    np.testing.assert_array_equal(scores[:, 0], plan.src * width + plan.dst)
    present = neg_dst[rows] >= 0
    expected = neg_src[rows] * width + neg_dst[rows]
    np.testing.assert_array_equal(scores[:, 1:][present], expected[present])
