"""SIS, ITS and BRS (T-GCN §2.3-§3, Alg. 2-5): the exact without-replacement law, common random numbers,
the compiled kernels equal to the Python reference, and the statistical tests' power against three
broken sum trees (the printed Alg. 3's ``>`` rule, its missing leaf return, and no zeroing)."""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch

from dgbench.errors import DgbenchError
from dgbench.trainers.continuous.tgcn.sampling import native, reference
from dgbench.trainers.continuous.tgcn.sampling.reference import SumTree, Uniforms
from dgbench.trainers.continuous.tgcn.sampling.samplers import (StaticGraph, frontier_sample, initial_frontiers,
                                                        multilayer_sample, sample_without_replacement)

NATIVE = native.library() is not None
BACKENDS = [pytest.param("native", marks=pytest.mark.skipif(not NATIVE, reason="no C++ compiler: kernels not built")),
            "python"]
METHODS = ["sis", "its-reject", "its-rebuild", "brs"]
DRAWS = 200_000
# (weights, draws, integer draws): integer weights with zeros and duplicates, uniform, and real weights
LAW_CASES = [((1, 2, 3, 4, 10, 0), 2, True), ((1, 2, 3, 4, 10, 0), 3, True), ((1,) * 6, 3, True),
             ((0, 2, 2, 1, 0, 3), 3, True), ((0.5, 1.7, 2.2, 0.0, 3.1), 2, False)]
# Bonferroni over every p-value the law tests compute (cases x samplers x backends, and the mutants)
ALPHA = 1e-3 / 64


def exact_law(weights, n) -> dict[tuple[int, ...], float]:
    """P(ordered outcome) = prod_k w_{i_k} / (W - sum_{j<k} w_{i_j}) over sequences of distinct positive items."""
    w = [Fraction(x).limit_denominator(10**6) for x in weights]
    positive = [i for i, x in enumerate(w) if x > 0]
    law = {}
    for outcome in itertools.permutations(positive, min(n, len(positive))):
        p, left = Fraction(1), sum(w)
        for i in outcome:
            p *= w[i] / left
            left -= w[i]
        law[outcome] = float(p)
    return law


def chi2_pvalue(observed: dict, law: dict[tuple, float], total: int) -> float:
    """Pearson chi-square against ``law``; an outcome the law gives probability 0 rejects outright."""
    if any(outcome not in law for outcome in observed):
        return 0.0
    expected = np.array([law[o] * total for o in law])
    assert expected.min() >= 5
    counts = np.array([observed.get(o, 0) for o in law], dtype=np.float64)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = len(law) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(chi2 / 2, dtype=torch.float64)))


def outcome_counts(indices: np.ndarray) -> dict[tuple[int, ...], int]:
    """Counts of ordered outcomes (rows, -1 padding dropped), through one integer key per row."""
    base = int(indices.max(initial=0)) + 2
    keys = ((indices + 1) * base ** np.arange(indices.shape[1])[::-1]).sum(axis=1)
    unique, first, counts = np.unique(keys, return_index=True, return_counts=True)
    return {tuple(int(i) for i in indices[f] if i >= 0): int(c) for f, c in zip(first, counts)}


def budget(method: str, draws: int) -> int:
    return draws if method in ("sis", "its-rebuild") else 40 * draws + 40


@pytest.mark.parametrize("method", METHODS)
def test_every_sampler_follows_the_exact_without_replacement_law(method):
    """On the compiled kernels where they build (the Python reference is equal to them draw by draw, below)."""
    backend = "native" if NATIVE else "python"
    for case, (weights, n, integer) in enumerate(LAW_CASES):
        rng = np.random.default_rng(100 + case)
        w = np.tile(np.array(weights, dtype=np.float64), (DRAWS, 1))
        out = sample_without_replacement(w, n, method, uniforms=rng.random((DRAWS, budget(method, n))),
                                         integer=integer, backend=backend)
        p = chi2_pvalue(outcome_counts(out.indices), exact_law(weights, n), DRAWS)
        assert p > ALPHA, f"{method} on {weights}, n={n}: chi-square p = {p:.2e}"


# ---------------------------------------------------------------- three broken sum trees
class GreaterThanRule(SumTree):
    """Alg. 3 l.16 as printed: go right iff g > left.sum (and no guard against empty subtrees)."""

    def search(self, rows, g, touches):
        node = np.ones(len(rows), dtype=np.int64)
        for _ in range(self.depth):
            left = self.tree[rows, 2 * node]
            right = g > left
            g = np.where(right, g - left, g)
            node = 2 * node + right
        return node - self.cap


class MissingLeafReturn(SumTree):
    """Alg. 3's Modify as printed: the leaf case does not return, so the leaf is overwritten by the sum of
    its children, which a leaf does not have (zeros in an array-backed tree)."""

    def modify(self, rows, pos, value, touches):
        super().modify(rows, pos, 0.0, touches)


class WithReplacement(SumTree):
    """No Modify(L, 0) after a draw: drawn items stay in the tree (sampling with replacement)."""

    def modify(self, rows, pos, value, touches):
        if np.all(np.asarray(value) == 0):
            return
        super().modify(rows, pos, value, touches)


# A small graph and frontier for Alg. 5's exact law: 0-1, 0-2, 0-3, 1-2, 3-4 (degrees 3, 2, 2, 2, 1).
FRONTIER_GRAPH = StaticGraph.from_edges(np.array([0, 0, 0, 1, 3]), np.array([1, 2, 3, 2, 4]), 5)
FRONTIER_START = (0, 4)
FRONTIER_STEPS = 3


def frontier_law() -> dict[tuple, float]:
    """Exact law of Alg. 5's (slot, vertex) sequence: slot L w.p. deg(FS[L]) / sum, then a uniform neighbour."""
    g = FRONTIER_GRAPH
    law: dict[tuple, float] = {}

    def walk(fs, prefix, p):
        if len(prefix) == FRONTIER_STEPS:
            law[tuple(prefix)] = law.get(tuple(prefix), 0.0) + p
            return
        degrees = [int(g.degrees[v]) for v in fs]
        for slot, v in enumerate(fs):
            for u in g.indices[g.indptr[v]:g.indptr[v + 1]]:
                nxt = list(fs)
                nxt[slot] = int(u)
                walk(tuple(nxt), prefix + [(slot, v)], p * degrees[slot] / sum(degrees) / degrees[slot])

    walk(FRONTIER_START, [], 1.0)
    return law


def frontier_pvalue(slots: np.ndarray, picked: np.ndarray) -> float:
    rows = np.stack([slots, picked], axis=2).reshape(len(slots), -1)
    observed = {tuple((int(r[2 * k]), int(r[2 * k + 1])) for k in range(FRONTIER_STEPS)): int(c)
                for r, c in zip(*np.unique(rows, axis=0, return_counts=True))}
    return chi2_pvalue(observed, frontier_law(), len(slots))


def law_pvalues(tree_class: type[SumTree]):
    """The law tests above (Alg. 5's, then Sample(V, n)'s, same seeds), on the Python SIS with the given tree."""
    frontiers = np.tile(np.array(FRONTIER_START), (DRAWS, 1))
    uniforms = Uniforms(DRAWS, buffer=np.random.default_rng(8).random((DRAWS, 2 * FRONTIER_STEPS)))
    slots, picked, _, _ = reference.frontier_sample(reference.SIS, FRONTIER_GRAPH.indptr, FRONTIER_GRAPH.indices,
                                                    frontiers, FRONTIER_STEPS, uniforms, tree_class)
    yield frontier_pvalue(slots, picked)
    for case, (weights, n, integer) in enumerate(LAW_CASES):
        rng = np.random.default_rng(100 + case)
        w = np.tile(np.array(weights, dtype=np.float64), (DRAWS, 1))
        out, _, _ = reference.sample_wor(reference.SIS, w, np.full(DRAWS, n), integer,
                                         Uniforms(DRAWS, buffer=rng.random((DRAWS, budget("sis", n)))), tree_class)
        yield chi2_pvalue(outcome_counts(out), exact_law(weights, n), DRAWS)


def test_the_law_tests_pass_the_fixed_sum_tree():
    assert min(law_pvalues(SumTree)) > ALPHA


@pytest.mark.parametrize("mutant", [GreaterThanRule, MissingLeafReturn, WithReplacement])
def test_the_law_tests_reject_each_broken_sum_tree(mutant):
    assert any(p < ALPHA for p in law_pvalues(mutant))  # stops at the first rejection


@pytest.mark.parametrize("method", ["sis", "brs"])
def test_frontier_sampling_follows_its_exact_law(method):
    backend = "native" if NATIVE else "python"
    frontiers = np.tile(np.array(FRONTIER_START), (DRAWS, 1))
    uniforms = np.random.default_rng(8).random((DRAWS, 2 * FRONTIER_STEPS))
    out = frontier_sample(FRONTIER_GRAPH, frontiers, FRONTIER_STEPS, method, uniforms=uniforms, backend=backend)
    assert frontier_pvalue(out.slots, out.picked) > ALPHA


# ---------------------------------------------------------------- common random numbers, backends
def random_problems(rng, count=400, integer=True):
    sizes = rng.integers(0, 48, count)
    if integer:  # zeros and duplicates on purpose
        return [rng.integers(0, 4, s).astype(np.float64) for s in sizes]
    return [rng.random(s) * (rng.random(s) < 0.8) for s in sizes]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("integer", [True, False])
def test_sis_and_its_rebuild_return_identical_indices_draw_by_draw(backend, integer):
    """Both invert the same ordered CDF of the unselected items; integer-valued weights keep every sum
    exact, so even real-valued draws (integer=False) must agree exactly."""
    rng = np.random.default_rng(11)
    problems = random_problems(rng)
    draws = rng.integers(0, 40, len(problems))
    uniforms = rng.random((len(problems), 40))
    sis = sample_without_replacement(problems, draws, "sis", uniforms=uniforms, integer=integer, backend=backend)
    rebuild = sample_without_replacement(problems, draws, "its-rebuild", uniforms=uniforms, integer=integer,
                                         backend=backend)
    np.testing.assert_array_equal(sis.indices, rebuild.indices)
    positive = np.array([(w > 0).sum() for w in problems])
    filled = (sis.indices >= 0).sum(axis=1)
    np.testing.assert_array_equal(filled, np.minimum(draws, positive))
    for w, u, row, n in zip(problems, uniforms, sis.indices, draws):  # first = searchsorted(cumsum(w), g, 'right')
        if w.sum() > 0 and n > 0:
            g = np.floor(u[0] * w.sum()) if integer else u[0] * w.sum()
            assert row[0] == np.searchsorted(np.cumsum(w), g, side="right")


@pytest.mark.skipif(not NATIVE, reason="no C++ compiler: kernels not built")
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("integer", [True, False])
def test_compiled_kernels_equal_the_python_reference(method, integer):
    """Same uniforms: same indices and the same element-touch counts, draw by draw."""
    rng = np.random.default_rng(12)
    problems = random_problems(rng, integer=integer)
    draws = np.array([min(int(d), int((w > 0).sum()) // 2 + 1) for d, w in zip(rng.integers(0, 30, 400), problems)])
    uniforms = rng.random((len(problems), 4000))
    a = sample_without_replacement(problems, draws, method, uniforms=uniforms, backend="native")
    b = sample_without_replacement(problems, draws, method, uniforms=uniforms, backend="python")
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.touches, b.touches)
    c = sample_without_replacement(problems, draws, method, seed=3, backend="native")
    d = sample_without_replacement(problems, draws, method, seed=3, backend="python")
    np.testing.assert_array_equal(c.indices, d.indices)


@pytest.mark.skipif(not NATIVE, reason="no C++ compiler: kernels not built")
def test_compiled_frontier_and_multilayer_equal_the_python_reference():
    rng = np.random.default_rng(13)
    graph = StaticGraph.from_edges(rng.integers(0, 50, 400), rng.integers(0, 50, 400), 60)
    frontiers = initial_frontiers(60, 6, 50, seed=1)
    for method in ("sis", "brs"):
        a = frontier_sample(graph, frontiers, 25, method, seed=4, backend="native")
        b = frontier_sample(graph, frontiers, 25, method, seed=4, backend="python")
        np.testing.assert_array_equal(a.picked, b.picked)
        np.testing.assert_array_equal(a.touches, b.touches)
    roots = rng.integers(0, 60, 6)
    for method, layerwise in itertools.product(METHODS, (False, True)):
        a = multilayer_sample(graph, roots, 2, method, layerwise=layerwise, batch=4, seed=2, backend="native")
        b = multilayer_sample(graph, roots, 2, method, layerwise=layerwise, batch=4, seed=2, backend="python")
        np.testing.assert_array_equal(a.layer_sizes, b.layer_sizes)
        assert (a.checksum, a.touches) == (b.checksum, b.touches)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sis_frontier_trajectories_equal_a_sampler_that_recomputes_the_degree_cdf(backend):
    """Alg. 5 with the tree and with the CDF recomputed per step invert the same CDF: same trajectory."""
    rng = np.random.default_rng(14)
    graph = StaticGraph.from_edges(rng.integers(0, 80, 600), rng.integers(0, 80, 600), 90)
    frontiers = initial_frontiers(90, 9, 40, seed=2)
    uniforms = rng.random((40, 2 * 30))
    sis = frontier_sample(graph, frontiers, 30, "sis", uniforms=uniforms, backend=backend)
    naive = frontier_sample(graph, frontiers, 30, "brs", uniforms=uniforms, backend=backend)
    np.testing.assert_array_equal(sis.slots, naive.slots)
    np.testing.assert_array_equal(sis.picked, naive.picked)
    assert all(len(s) > 0 for s in sis.vertex_sets())


# ---------------------------------------------------------------- hard invariants
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", METHODS)
def test_no_sampler_returns_a_zero_weight_item_even_at_the_range_edges(method, backend):
    """g = 0 with zero-weight leading items (the printed ``>`` returns item 0 there) and g just below S."""
    weights = np.array([[0.0, 0.0, 3.0, 0.0, 1.0, 0.0], [0.0, 2.5, 0.0, 0.0, 0.7, 0.0]])
    for u in (0.0, np.nextafter(1.0, 0.0)):
        uniforms = np.random.default_rng(16).random((2, 400))
        uniforms[:, 0] = u
        out = sample_without_replacement(weights, 2, method, uniforms=uniforms, backend=backend)
        for row, w in zip(out.indices, weights):
            assert set(row.tolist()) == set(np.flatnonzero(w).tolist())


@pytest.mark.parametrize("method", METHODS)
def test_draws_are_distinct_and_positive_on_skewed_real_weights(method):
    rng = np.random.default_rng(15)
    weights = [rng.pareto(1.2, 64) * (rng.random(64) < 0.7) for _ in range(200)]
    out = sample_without_replacement(weights, 20, method, seed=9)
    for row, w in zip(out.indices, weights):
        drawn = row[row >= 0]
        assert len(set(drawn.tolist())) == len(drawn) == min(20, int((w > 0).sum()))
        assert np.all(w[drawn] > 0)


def test_bad_weights_and_methods_are_refused():
    with pytest.raises(DgbenchError, match="finite and >= 0"):
        sample_without_replacement([np.array([1.0, -1.0])], 1)
    with pytest.raises(DgbenchError, match="unknown sampling method"):
        sample_without_replacement([np.array([1.0])], 1, "alias")
    with pytest.raises(DgbenchError, match="uniforms"):
        sample_without_replacement([np.array([1.0, 1e-9])], 2, "its-reject", uniforms=np.zeros((1, 3)))
