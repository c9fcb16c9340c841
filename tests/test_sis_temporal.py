"""Temporal SIS: per-vertex streaming sum trees (append, prefix queries, time decay with re-basing), the
``sis`` strategy of the temporal sampler, and Alg. 7's edge-sparsification pre-pass."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from dgbench.errors import DgbenchError
from dgbench.trainers.continuous.sampler import TemporalSampler
from dgbench.trainers.continuous.tgcn.sampling import TemporalSumForest, native
from dgbench.trainers.continuous.tgcn.sampling.sparsify import sparsify_events

NATIVE = native.library() is not None
BACKENDS = [pytest.param("native", marks=pytest.mark.skipif(not NATIVE, reason="no C++ compiler: kernels not built")),
            "python"]
ALPHA = 1e-3 / 16


@pytest.fixture(scope="module")
def stream():
    rng = np.random.default_rng(7)
    events = 3000
    src, dst = rng.integers(0, 40, events), rng.integers(0, 40, events)
    t = np.sort(rng.integers(0, 800, events)).astype(np.float64)  # many ties on purpose
    return src, dst, t


def pvalue(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = probabilities * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0, "an outcome of probability 0 was drawn"
    chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(chi2 / 2, dtype=torch.float64)))


def one_vertex_forest(times, alpha, backend) -> TemporalSumForest:
    forest = TemporalSumForest(1, alpha, backend=backend)
    forest.append(np.zeros(len(times), np.int64), np.arange(len(times)), np.asarray(times, dtype=np.float64))
    return forest


@pytest.mark.parametrize("decay", [0.0, 0.01])
def test_sis_strategy_never_returns_an_event_at_or_after_the_query_time(stream, decay):
    src, dst, t = stream
    sampler = TemporalSampler(src, dst, t, 40, decay=decay)
    rng = np.random.default_rng(1)
    nodes = rng.integers(0, 40, 2000)
    times = rng.choice(t, 2000) + rng.choice([0.0, 0.5], 2000)  # exact event times and between them
    out = sampler.sample(nodes, times, 8, "sis", rng.random((2000, 8)))
    query_t = np.broadcast_to(times[:, None], out.mask.shape)[out.mask]
    assert out.mask.any()
    assert np.all(out.times[out.mask] < query_t) and np.all(t[out.events[out.mask]] < query_t)
    e, q, n = out.events[out.mask], np.broadcast_to(nodes[:, None], out.mask.shape)[out.mask], out.nodes[out.mask]
    assert np.all(((src[e] == q) & (dst[e] == n)) | ((dst[e] == q) & (src[e] == n)))
    start, end = sampler.history_bounds(nodes, times)
    np.testing.assert_array_equal(out.mask.sum(axis=1), np.minimum(8, end - start))  # k distinct, or all
    self_loop = src == dst  # a self-loop is two adjacency entries of one vertex
    for row, m in zip(out.events, out.mask):  # without replacement: no adjacency entry twice
        events, times_drawn = np.unique(row[m], return_counts=True)
        assert np.all(times_drawn <= np.where(self_loop[events], 2, 1))


def test_sis_strategy_restarts_cleanly_when_queries_go_back_in_time(stream):
    """A new epoch queries early times again: the trees restart and give what a fresh sampler gives."""
    src, dst, t = stream
    early_nodes, early_t = src[100:160], t[100:160]
    uniforms = np.random.default_rng(2).random((60, 5))
    fresh = TemporalSampler(src, dst, t, 40).sample(early_nodes, early_t, 5, "sis", uniforms)
    sampler = TemporalSampler(src, dst, t, 40)
    sampler.sample(src[2000:2100], t[2000:2100], 5, "sis", np.random.default_rng(3).random((100, 5)))
    again = sampler.sample(early_nodes, early_t, 5, "sis", uniforms)
    np.testing.assert_array_equal(fresh.events, again.events)


def test_sis_strategy_draws_uniformly_among_the_history(stream):
    """First draw over a vertex's history strictly before t: uniform over its events (chi-square)."""
    src, dst, t = stream
    sampler = TemporalSampler(src, dst, t, 40)
    vertex, time = int(src[1500]), float(t[1500])
    start, end = sampler.history_bounds(np.array([vertex]), np.array([time]))
    count = int(end[0] - start[0])
    out = sampler.sample(np.full(30000, vertex), np.full(30000, time), 1, "sis",
                         np.random.default_rng(4).random((30000, 1)))
    history = sampler.events[start[0]:end[0]]  # a self-loop appears twice, so twice as likely
    events, multiplicity = np.unique(history, return_counts=True)
    counts = np.bincount(np.searchsorted(events, out.events[:, 0]), minlength=len(events)).astype(float)
    assert set(out.events[:, 0].tolist()) <= set(events.tolist())
    assert pvalue(counts, multiplicity / count) > ALPHA


@pytest.mark.parametrize("backend", BACKENDS)
def test_decayed_draws_follow_exp_of_the_event_times_over_the_prefix(backend):
    """Without replacement, k = 2, over the first 6 of 9 leaves with weights exp(0.5 t): exact ordered law."""
    times = np.arange(9, dtype=np.float64)
    forest = one_vertex_forest(times, 0.5, backend)
    queries = 40000 if backend == "native" else 12000
    out = forest.sample(np.zeros(queries, np.int64), np.full(queries, 6), 2,
                        np.random.default_rng(5).random((queries, 2)))
    w = np.exp(0.5 * times[:6])
    outcomes = list(itertools.permutations(range(6), 2))
    law = np.array([w[a] / w.sum() * w[b] / (w.sum() - w[a]) for a, b in outcomes])
    index = {o: i for i, o in enumerate(outcomes)}
    counts = np.zeros(len(outcomes))
    for row in out:
        counts[index[(int(row[0]), int(row[1]))]] += 1
    assert pvalue(counts, law) > ALPHA


@pytest.mark.parametrize("backend", BACKENDS)
def test_rebased_and_underflowed_prefixes_keep_the_decayed_law(backend):
    """alpha = 1: the event at 700 re-bases (exponent > 600) and the event at 3000 makes every older weight
    underflow; a query over the first 5 events (all far older than the newest) is sampled exactly from
    weights recomputed relative to its own newest event."""
    times = np.array([0.0, 300.0, 700.0, 701.0, 702.0, 3000.0])
    forest = one_vertex_forest(times, 1.0, backend)
    assert all(math.isfinite(forest.leaf(0, p)) for p in range(6))
    assert forest.leaf(0, 4) == 0.0  # underflowed next to the event at 3000
    queries = 20000 if backend == "native" else 5000
    out = forest.sample(np.zeros(queries, np.int64), np.full(queries, 5), 1,
                        np.random.default_rng(6).random((queries, 1)))
    w = np.exp(times[:5] - times[4])
    assert pvalue(np.bincount(out[:, 0], minlength=5).astype(float), w / w.sum()) > ALPHA


@pytest.mark.skipif(not NATIVE, reason="no C++ compiler: kernels not built")
@pytest.mark.parametrize("alpha", [0.0, 0.05, 1.0])
def test_compiled_forest_equals_the_python_reference(stream, alpha):
    src, dst, t = stream
    forests = {b: TemporalSumForest(40, alpha, backend=b) for b in ("native", "python")}
    rng = np.random.default_rng(8)
    sampler = TemporalSampler(src, dst, t, 40)
    owner = np.repeat(np.arange(40), np.diff(sampler.indptr))
    order = np.argsort(sampler.times, kind="stable")
    for lo, hi in ((0, 2500), (2500, len(order))):  # two appends, then queries after each
        entries = order[lo:hi]
        queries = rng.integers(0, 40, 300)
        qt = sampler.times[entries[-1]] * rng.random(300)
        start, end = sampler.history_bounds(queries, qt)
        uniforms = rng.random((300, 6))
        results = {}
        for name, forest in forests.items():
            forest.append(owner[entries], entries - sampler.indptr[owner[entries]], sampler.times[entries])
            results[name] = (forest.sample(queries, end - start, 6, uniforms), forest.touches)
        np.testing.assert_array_equal(results["native"][0], results["python"][0])
        assert results["native"][1] == results["python"][1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_queries_restore_the_tree_and_appends_cost_amortised_log_d(backend):
    sizes = (1 << 8, 1 << 12) if backend == "python" else (1 << 10, 1 << 16)
    per_append = []
    for d in sizes:
        forest = one_vertex_forest(np.arange(d, dtype=np.float64), 0.0, backend)
        per_append.append(forest.touches / d)
        before = [forest.leaf(0, p) for p in range(0, d, d // 64)]
        forest.sample(np.zeros(50, np.int64), np.full(50, d // 2), 8, np.random.default_rng(9).random((50, 8)))
        assert [forest.leaf(0, p) for p in range(0, d, d // 64)] == before
    # Modify costs 1 + 3 log2(cap); doublings add at most ~5 touches per element overall: O(log d), not O(d)
    for d, cost in zip(sizes, per_append):
        assert cost <= 3 * math.log2(d) + 12
    assert per_append[1] - per_append[0] <= 3 * math.log2(sizes[1] / sizes[0]) + 1


def test_prefix_beyond_the_appended_events_is_refused():
    forest = one_vertex_forest(np.arange(3.0), 0.0, "python")
    with pytest.raises(DgbenchError, match="not appended"):
        forest.sample(np.zeros(1, np.int64), np.array([9]), 1, np.zeros((1, 1)))
    with pytest.raises(DgbenchError, match="decay"):
        TemporalSumForest(1, -1.0)


def test_sparsification_keeps_the_ceiling_of_half_of_every_sources_events(stream):
    src, _, t = stream
    kept = sparsify_events(src, t, 0.5, seed=1)
    assert np.all(np.diff(kept) > 0)
    degrees = np.bincount(src, minlength=40)
    np.testing.assert_array_equal(np.bincount(src[kept], minlength=40), np.ceil(degrees / 2).astype(int))
    np.testing.assert_array_equal(kept, sparsify_events(src, t, 0.5, seed=1))
    assert not np.array_equal(kept, sparsify_events(src, t, 0.5, seed=1, epoch=1))
    decayed = sparsify_events(src, t, 0.5, seed=1, decay=0.05)
    assert t[decayed].mean() > t[kept].mean()  # recent interactions favoured
    with pytest.raises(DgbenchError, match="fraction"):
        sparsify_events(src, t, 0.0)
