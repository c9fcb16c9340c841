"""No score sees its own event or a later one: an evaluated event's logits (its positive and its negatives)
depend only on events strictly before its time (TGN §3.2 and TGL: neighbours and messages from the past;
docs/continuous-training.md, "Protocols"). Checked end to end through the trainer's scoring path: the
edge features of every event at or after a time T inside the validation split are replaced, and every
logit of an event before T, or at T itself, must not move, while later events' logits must (the check
can see the features at all). Times here have ties, so events sharing T's timestamp (in the same batch)
are covered. DyGNN is not among the models: it reads no edge features (its events are (u, v, t)), so
replacing them cannot show anything about it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext, PhaseTimer
from dgbench.trainers.config import RunConfig

TIE_WIDTH = 4.0  # generated inter-event gaps are Exp(1): flooring t / 4 puts about 4 events on each time


def _tied_store(tmp_path: Path) -> Path:
    """The conftest's generated stream with its times floored to multiples of TIE_WIDTH (ties everywhere)."""
    from dgbench.generators.stream import build
    from dgbench.store import open_store
    from dgbench.store.write import EdgeStreamStoreWriter

    base = open_store(build(out=tmp_path / "base.zarr", users=50, items=40, events=2000, edge_dim=4, seed=1),
                      kind="stream")
    columns = base.events(0, base.num_events)
    with EdgeStreamStoreWriter(tmp_path / "tied.zarr", num_nodes=base.num_nodes, directed=True,
                               provenance={"source": "test"}, time_dtype=np.float64, edge_feature_dim=4) as writer:
        writer.append_events(columns["src"], columns["dst"], np.floor(columns["t"] / TIE_WIDTH),
                             edge_features=columns["edge_features"])
        return writer.close()


def _trainer(store: Path, model: str, protocol: str):
    from dgbench.trainers.continuous.family import build_trainer, partition_problem
    from dgbench.trainers.experiment import resolve

    run = resolve(RunConfig("single", model, store, batch_size=200, memory_dim=8, neighbors=4, seed=1,
                            protocol=protocol))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    problem = partition_problem(run)
    return build_trainer(ctx, run, run.scheme.partition(problem, 1, run.scheme_options), problem)


def _validation_logits(trainer, evaluation) -> np.ndarray:
    """(validation events, 1 + K) logits, scored batch by batch as the trainer scores them (memory written
    back after each batch)."""
    from dgbench.trainers.continuous.data import Prefetcher

    negatives = evaluation.get("val", "negatives")
    trainer.planner.candidates = {"val": (evaluation.get("val", "negative_src"), negatives)}
    first = trainer.stream.ranges["val"][0]
    out = np.full((len(negatives), 1 + negatives.shape[1]), np.nan)
    with torch.no_grad():
        for plan in Prefetcher(trainer.planner, "val", trainer.options.batch_size, depth=0):
            out[plan.events - first] = trainer._score_candidates(plan).numpy()
    trainer.planner.candidates = {}
    return np.where(np.isnan(out), 0.0, out)


@pytest.mark.parametrize("protocol", ["tgl", "batch"])
@pytest.mark.parametrize("model", ["tgn", "jodie", "apan"])
def test_no_logit_depends_on_its_own_event_or_a_later_one(tmp_path, model, protocol):
    from dgbench.tasks.link import link_prediction_set

    store = _tied_store(tmp_path)
    trainer = _trainer(store, model, protocol)
    trainer.train_epoch(0, PhaseTimer())
    trainer.model.eval()
    evaluation = link_prediction_set(store, "random", 5)
    kept = trainer.scoring_state()
    before = _validation_logits(trainer, evaluation)

    start, stop = trainer.stream.ranges["val"]
    times = trainer.stream.t[start:stop]
    cut = times[len(times) // 2]
    assert np.count_nonzero(times == cut) >= 2, "the cut's timestamp should be shared (a tie)"
    changed = np.flatnonzero(trainer.stream.t >= cut)
    features = trainer.stream.edge_features
    features[changed] = np.random.default_rng(7).normal(scale=5.0, size=(len(changed), features.shape[1]))
    trainer.restore_scoring_state(kept)
    after = _validation_logits(trainer, evaluation)

    up_to_cut = times <= cut
    np.testing.assert_array_equal(after[up_to_cut], before[up_to_cut])
    moved = np.any(after[~up_to_cut] != before[~up_to_cut], axis=1)
    assert moved.mean() > 0.5, f"only {moved.mean():.0%} of the later events' logits moved: the check is blind"
