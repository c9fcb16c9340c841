"""Evaluation at the cost of training: the K + 1 candidates of an event share its source's sampling, memory
read, embedding and projection, and the no-gradient kernels (blocked memory update and attention) give
the scores of the training kernels (docs/performance.md, "Continuous-time cost per unit of work")."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext, PhaseTimer
from dgbench.models import temporal
from dgbench.models.temporal import TGN, BatchInputs, MemoryUpdater
from dgbench.trainers.config import RunConfig

from candidate_logits import logits_one_block_at_a_time


def _trainer(store, model: str):
    from dgbench.trainers.continuous.family import build_trainer, partition_problem
    from dgbench.trainers.experiment import resolve

    run = resolve(RunConfig("single", model, store, batch_size=200, memory_dim=8, neighbors=4, seed=1))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    problem = partition_problem(run)
    return build_trainer(ctx, run, run.scheme.partition(problem, 1, run.scheme_options), problem)


def _unshared_plans(trainer, split: str):
    """The split's plans with one root per candidate endpoint (no (vertex, time) sharing), one at a time."""
    from dgbench.trainers.continuous.data import Prefetcher

    return Prefetcher(replace(trainer.planner, share_roots=False), split, trainer.options.batch_size, depth=0)


def _reference_scores(trainer, plan) -> np.ndarray:
    """The candidates' logits the straightforward way: views and embeddings through the training kernels
    (gradient on: no blocks) of a plan with a root per candidate endpoint, the predictor called once per
    candidate block with its own source rows."""
    assert plan.root_index is None
    model, b = trainer.model, len(plan.events)
    with torch.enable_grad():
        views, rows = trainer._views(plan)
        inputs = trainer._inputs(plan, rows)
        count = len(plan.roots)
        root_t = torch.from_numpy(np.tile(trainer.stream.t[plan.events], count // b)).to(trainer.dtype)
        neighbor_view = views[count:] if model.uses_neighbors and len(views) > count else None
        h = model.embed(inputs, views[:count], root_t, neighbor_view).detach()
    with torch.no_grad():
        return logits_one_block_at_a_time(model.predictor, h, plan)


@pytest.mark.parametrize("strategy", ["random", "historical"])
@pytest.mark.parametrize("model_name", ["tgn", "jodie", "apan"])
def test_candidate_scores_equal_the_training_kernels(stream_store, monkeypatch, model_name, strategy):
    """Every validation batch's (1 + K) logits equal the reference's (small blocks, so each batch spans several
    blocks of the memory update and of the attention); fails if a shared or blocked path changes a score."""
    from dgbench.tasks.link import link_prediction_set
    from dgbench.trainers.continuous.data import Prefetcher

    monkeypatch.setattr(temporal, "QUERY_BLOCK", 64)
    monkeypatch.setattr(temporal, "ROOT_BLOCK", 48)
    trainer = _trainer(stream_store, model_name)
    trainer.train_epoch(0, PhaseTimer())  # memory and mailboxes hold something
    trainer.model.eval()
    evaluation = link_prediction_set(stream_store, strategy, 5)
    trainer.planner.candidates = {"val": (evaluation.get("val", "negative_src"), evaluation.get("val", "negatives"))}
    batches = 0
    with torch.no_grad():
        for plan, unshared in zip(Prefetcher(trainer.planner, "val", 200, depth=0), _unshared_plans(trainer, "val")):
            want = _reference_scores(trainer, unshared)  # before the batch's write-back
            got = trainer._score_candidates(plan).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
            assert plan.fixed_source == (strategy == "random")
            batches += 1
    assert batches >= 2


def test_each_event_source_is_sampled_read_embedded_and_projected_once(stream_store):
    """K = 6 negatives of the random strategy: the sampler gets one query per distinct (vertex, time) root
    among the 2 + K per event (source, destination, each negative destination; not 2 per candidate), the view
    function each distinct vertex's row once and each distinct (vertex, time) query once, the predictor's
    source projection one row per event."""
    from dgbench.tasks.link import link_prediction_set
    from dgbench.trainers.continuous.data import Prefetcher

    trainer = _trainer(stream_store, "tgn")
    trainer.model.eval()
    k = 6
    evaluation = link_prediction_set(stream_store, "random", k)
    trainer.planner.candidates = {"val": (evaluation.get("val", "negative_src"), evaluation.get("val", "negatives"))}
    sampled, view_rows, view_queries, projected = [], [], [], {"src": 0, "dst": 0}
    sampler, node_views = trainer.planner.sampler, trainer.model.node_views

    def counting_sample(nodes, times, *args, **kwargs):
        sampled.append(len(nodes))
        return type(sampler).sample(sampler, nodes, times, *args, **kwargs)

    def counting_views(rows, vertex, times):
        view_rows.append(len(rows))
        view_queries.append(len(times))
        return node_views(rows, vertex, times)

    object.__setattr__(sampler, "sample", counting_sample)
    object.__setattr__(trainer.model, "node_views", counting_views)
    for side in projected:
        getattr(trainer.model.predictor, side).register_forward_hook(
            lambda module, args, output, side=side: projected.__setitem__(side, projected[side] + len(args[0])))
    sizes, pairs = [], []
    with torch.no_grad():
        for plan in Prefetcher(trainer.planner, "val", 200, depth=0):  # planning samples the batch's roots
            before = len(view_rows)
            trainer._score_candidates(plan)
            sizes.append(len(plan.events))
            pairs.append(_distinct_root_pairs(trainer, plan))
            ids, times = plan.needed_ids, plan.query_times
            assert view_rows[before:] == [len(np.unique(ids))]
            assert view_queries[before:] == [len(np.unique(np.stack([ids, times]), axis=1).T)]
    assert sampled == pairs
    assert all(p <= (2 + k) * b for p, b in zip(pairs, sizes))
    events = sum(sizes)
    assert events > 0
    assert projected == {"src": events, "dst": (1 + k) * events}


def _distinct_root_pairs(trainer, plan) -> int:
    """Distinct (vertex, event time) pairs among the plan's roots [src, dst, negatives...]."""
    times = np.tile(trainer.stream.t[plan.events], len(plan.roots) // len(plan.events))
    return len(np.unique(np.stack([plan.roots, times]), axis=1).T)


@pytest.mark.parametrize("model_name", ["tgn", "jodie"])
def test_historical_candidates_embed_each_vertex_and_time_once(stream_store, model_name):
    """Historical negatives ([src, dst, K·src', K·dst'] roots, seen pairs that share endpoints with the positive
    and with each other): the model embeds, and the sampler queries, one root per distinct (vertex, event
    time) pair of the batch, fewer than its 2 + 2K roots per event."""
    from dgbench.tasks.link import link_prediction_set
    from dgbench.trainers.continuous.data import Prefetcher

    trainer = _trainer(stream_store, model_name)
    trainer.train_epoch(0, PhaseTimer())
    trainer.model.eval()
    k = 5
    evaluation = link_prediction_set(stream_store, "historical", k)
    trainer.planner.candidates = {"val": (evaluation.get("val", "negative_src"), evaluation.get("val", "negatives"))}
    embedded, sampled, embed = [], [], trainer.model.embed

    def counting_embed(inputs, root_view, root_t, neighbor_view):
        embedded.append(len(root_view))
        return embed(inputs, root_view, root_t, neighbor_view)

    object.__setattr__(trainer.model, "embed", counting_embed)
    sampler = trainer.planner.sampler
    if sampler is not None:
        def counting_sample(nodes, times, *args, **kwargs):
            sampled.append(len(nodes))
            return type(sampler).sample(sampler, nodes, times, *args, **kwargs)
        object.__setattr__(sampler, "sample", counting_sample)
    pairs, roots = [], []
    with torch.no_grad():
        for plan in Prefetcher(trainer.planner, "val", 200, depth=0):
            assert not plan.fixed_source and plan.candidates == k
            trainer._score_candidates(plan)
            pairs.append(_distinct_root_pairs(trainer, plan))
            roots.append(len(plan.roots))
    assert embedded == pairs
    assert sampled == (pairs if sampler is not None else [])
    assert sum(pairs) < sum(roots)
    if sampler is not None:  # a uniform draw per root: equal pairs may sample differently, so no sharing
        uniform = replace(trainer.planner, strategy="uniform")
        assert all(plan.root_index is None for plan in Prefetcher(uniform, "val", 200, depth=0))


@pytest.mark.parametrize("model_name", ["tgn", "apan"])
def test_shared_roots_leave_the_memory_and_scores_of_a_root_per_endpoint(stream_store, model_name):
    """A whole historical validation pass (scores, then each batch's write-back; APAN also mails the endpoints'
    sampled neighbours) with and without (vertex, time) sharing, from the same trained state: the same
    logits and the same N&M table after it."""
    from dgbench.tasks.link import link_prediction_set
    from dgbench.trainers.continuous.data import Prefetcher

    trainer = _trainer(stream_store, model_name)
    trainer.train_epoch(0, PhaseTimer())
    trainer.model.eval()
    evaluation = link_prediction_set(stream_store, "historical", 5)
    trainer.planner.candidates = {"val": (evaluation.get("val", "negative_src"), evaluation.get("val", "negatives"))}
    kept = trainer.scoring_state()
    passes = {}
    for share in (False, True):
        trainer.restore_scoring_state(kept)
        trainer.planner.share_roots = share
        with torch.no_grad():
            plans = list(Prefetcher(trainer.planner, "val", 200, depth=0))
            logits = [trainer._score_candidates(plan) for plan in plans]
        assert all((plan.root_index is not None) == share for plan in plans)
        passes[share] = torch.cat(logits), trainer.state.table.clone()
    torch.testing.assert_close(passes[True][0], passes[False][0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(passes[True][1], passes[False][1], rtol=1e-6, atol=1e-7)
    assert not torch.equal(passes[True][1], kept[1])  # the pass wrote memory back


@pytest.mark.parametrize("block", [64, 2048])
def test_memory_update_without_gradient_is_the_training_update_bit_for_bit(monkeypatch, block):
    """The blocked, in-place GRU update of evaluation (several blocks with a partial last one, or one block)
    returns exactly the training path's values."""
    monkeypatch.setattr(temporal, "QUERY_BLOCK", block)
    torch.manual_seed(0)
    updater = MemoryUpdater("gru", memory_dim=12, mail_dim=30, time_dim=12)
    vertices, queries = 40, 1000
    state, memory_ts = torch.randn(vertices, 12), torch.rand(vertices) * 5
    mail, vertex = torch.randn(vertices, 30), torch.randint(0, vertices, (queries,))
    query_t = 5 + torch.rand(queries) * 5
    has_mail = torch.rand(vertices) < 0.8
    with torch.enable_grad():
        want = updater(state, memory_ts, mail, query_t, vertex, has_mail).detach()
    with torch.no_grad():
        got = updater(state, memory_ts, mail, query_t, vertex, has_mail)
    assert torch.equal(got, want)


def test_blocked_attention_without_gradient_is_the_whole_batch_to_rounding(monkeypatch):
    """TGN's embedding over blocks of roots (a block boundary inside a run of real slots, roots without
    neighbours) equals the whole batch's through the training path."""
    monkeypatch.setattr(temporal, "ROOT_BLOCK", 7)
    torch.manual_seed(0)
    model = TGN(memory_dim=8, edge_dim=3)
    roots, k = 50, 5
    mask = torch.rand(roots, k) < 0.7
    mask[3] = False
    inputs = BatchInputs(None, torch.zeros(roots), torch.zeros(roots, 3), neighbor_mask=mask,
                         neighbor_dt=torch.rand(roots, k) * 100, neighbor_edge_features=torch.randn(roots, k, 3))
    root_view, neighbor_view = torch.randn(roots, 8), torch.randn(int(mask.sum()), 8)
    with torch.enable_grad():
        want = model.embed(inputs, root_view, torch.zeros(roots), neighbor_view).detach()
    with torch.no_grad():
        got = model.embed(inputs, root_view, torch.zeros(roots), neighbor_view)
    # a block's GEMMs may take another MKL kernel than the whole batch's: up to 4e-6 apart here (one element of
    # 400; the others within 6e-7); in float64 within 1e-15: the same arithmetic, rounded apart
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    model, inputs.neighbor_dt = model.double(), inputs.neighbor_dt.double()
    inputs.neighbor_edge_features = inputs.neighbor_edge_features.double()
    root_view, neighbor_view = root_view.double(), neighbor_view.double()
    with torch.enable_grad():
        want = model.embed(inputs, root_view, torch.zeros(roots), neighbor_view).detach()
    with torch.no_grad():
        got = model.embed(inputs, root_view, torch.zeros(roots), neighbor_view)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
