"""Scheme `tgcn`'s evaluation at the cost of training: the K + 1 candidates of an event share its source's
embedding and predictor projection, and every distinct root is embedded once per batch; the scores are those
of scoring candidate by candidate (docs/performance.md, "Continuous-time cost per unit of work")."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext, PhaseTimer
from dgbench.models.dygnn import DyGNN
from dgbench.models.temporal import BatchOutputs
from dgbench.store import open_store
from dgbench.tasks.link import link_prediction_set
from dgbench.trainers.continuous.data import BatchPlanner, EventStream
from dgbench.trainers.continuous.tgcn.scheme import GridTrainer, TgcnOptions

from candidate_logits import logits_one_block_at_a_time

K = 5
BATCH = 150

pytestmark = pytest.mark.usefixtures("one_thread")


def _trained(store) -> GridTrainer:
    """A two-range grid after one epoch (its S- and G-state hold something), in evaluation mode."""
    torch.manual_seed(0)
    stream = EventStream.from_store(open_store(store))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    model = DyGNN(memory_dim=8, edge_dim=stream.edge_dim, time_scale=1000.0)
    trainer = GridTrainer(ctx, stream, model, TgcnOptions(intervals=2, grid_ranks=2, no_pipeline=True), BATCH,
                          0.01, seed=3)
    trainer.train_epoch(0, PhaseTimer())
    trainer.model.eval()
    return trainer


def _plans(trainer: GridTrainer, store, strategy: str):
    """The validation batches as :meth:`GridTrainer._evaluate_set` plans them."""
    evaluation = link_prediction_set(store, strategy, K)
    planner = BatchPlanner(trainer.stream, None, 0, "recent", trainer.seed,
                           lambda src: np.ones(len(src), dtype=bool), lambda ids: None)
    planner.candidates = {"val": (evaluation.get("val", "negative_src"), evaluation.get("val", "negatives"))}
    for index, (a, b) in enumerate(planner.batch_bounds("val", BATCH)):
        yield planner.plan("val", index, a, b)


def _one_by_one(model: DyGNN, plan, rows: torch.Tensor) -> np.ndarray:
    """The candidates' logits the straightforward way: every root embedded, the predictor called once per
    candidate block with its own source rows."""
    h = model.embed(None, rows[torch.from_numpy(plan.roots)], None, None)
    return logits_one_block_at_a_time(model.predictor, h, plan)


@pytest.mark.parametrize("strategy", ["random", "historical"])
def test_candidate_scores_equal_scoring_each_candidate_alone(stream_store, strategy):
    """Every validation batch's (1 + K) logits, the state carried through the batches' updates."""
    trainer = _trained(stream_store)
    rows, batches = trainer.full_rows(), 0
    with torch.no_grad():
        for plan in _plans(trainer, stream_store, strategy):
            want = _one_by_one(trainer.model, plan, rows)  # before the batch's updates
            got = trainer._score_then_update(plan, rows)
            assert got.shape == (len(plan.events), 1 + K)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
            assert plan.fixed_source == (strategy == "random")
            batches += 1
    assert batches >= 2


def test_each_source_is_projected_once_and_each_distinct_root_embedded_once(stream_store):
    """K negatives of the random strategy: the predictor projects one source row per event (not 1 + K) and
    1 + K destination rows; the merge of E(t-) runs once per distinct root vertex of the batch."""
    trainer = _trained(stream_store)
    model, rows = trainer.model, trainer.full_rows()
    projected, merged = {"src": 0, "dst": 0}, []
    for side in projected:
        getattr(model.predictor, side).register_forward_hook(
            lambda module, args, output, side=side: projected.__setitem__(side, projected[side] + len(args[0])))
    model.merge_s.register_forward_hook(lambda module, args, output: merged.append(len(args[0])))
    # only the scoring is counted: the batch's update (which predicts and merges too) keeps the rows as they are
    model.forward = lambda inputs: BatchOutputs(inputs.t, inputs.t, inputs.root_rows[:2 * len(inputs.t)])
    events, distinct = 0, []
    with torch.no_grad():
        for plan in _plans(trainer, stream_store, "random"):
            trainer._score_then_update(plan, rows)
            events += len(plan.events)
            distinct.append(len(np.unique(plan.roots)))
            assert distinct[-1] < len(plan.roots)  # 40 items, 150 x 5 candidates: repeats to share
    assert events > 0
    assert projected == {"src": events, "dst": (1 + K) * events}
    assert merged == distinct
