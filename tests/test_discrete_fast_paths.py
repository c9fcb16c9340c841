"""The fast paths of the discrete-time epoch keep their contracts: EvolveGCN-O's one-node weight
evolution is bit-identical to stepping ``nn.LSTMCell`` under autograd, the narrow dense products (GCN
updates, the scorer's halves) equal ``x @ w`` with their gradients, and the vectorised
link-prediction sampler draws exact, distinct positives and true non-edges, seeded per split/epoch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.models.discrete import EvolveGCNOLayer
from dgbench.models.sparse import narrow_product
from dgbench.generators.esdg_random import build
from dgbench.trainers.discrete.data import TEST, TRAIN, VAL, DiscreteData

STEPS = 5


def _evolve_with_autograd(layer: EvolveGCNOLayer, weight, cell, steps: int):
    weights = []
    for _ in range(steps):
        weight, cell = layer.evolution(weight, (weight, cell))
        weights.append(weight)
    return torch.stack(weights), cell


class _ProductShapes(torch.utils._python_dispatch.TorchDispatchMode):
    """The (rows, columns) of every ``mm`` output inside the block."""

    def __init__(self):
        super().__init__()
        self.outputs: list[tuple[int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten.mm:
            self.outputs.append(tuple(out.shape))
        return out


@pytest.mark.parametrize("rows,inner,columns,group", [(4096, 6, 6, 2), (4099, 6, 6, 2), (1000, 2, 6, 2),
                                                      (77, 6, 2, 8), (3, 6, 6, 2), (0, 6, 6, 2), (64, 6, 16, 1)])
def test_narrow_products_equal_the_plain_product_and_its_gradients(rows, inner, columns, group):
    """[rows, K] @ [K, N] with a narrow output runs on groups of rows against a block-diagonal weight (the
    rows left over plainly): the product, ∂x and ∂w equal the plain product's (float64, to rounding)."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, inner, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(inner, columns, dtype=torch.float64, generator=g, requires_grad=True)
    upstream = torch.randn(rows, columns, dtype=torch.float64, generator=g)
    with _ProductShapes() as seen:
        out = narrow_product(x, w)
    grouped = rows // group
    assert (grouped, group * columns) in seen.outputs if group > 1 and grouped else seen.outputs == [(rows, columns)]
    expected = x.detach() @ w.detach()
    torch.testing.assert_close(out, expected)
    grad_x, grad_w = torch.autograd.grad(out, (x, w), upstream)
    torch.testing.assert_close(grad_x, upstream @ w.detach().t())
    torch.testing.assert_close(grad_w, x.detach().t() @ upstream)
    steps = torch.randn(3, 5, inner, dtype=torch.float64, generator=g, requires_grad=True)  # leading dims kept
    assert torch.autograd.gradcheck(narrow_product, (steps, w))


@pytest.mark.parametrize("rows,width", [(2, 6), (6, 6), (3, 16)])
def test_weight_evolution_is_bit_identical_to_lstm_cell_steps(rows, width):
    torch.manual_seed(rows * width)
    layer = EvolveGCNOLayer(rows, width)
    start_cell = torch.randn(rows, width, requires_grad=True)
    project, project_cell = torch.randn(STEPS, rows, width), torch.randn(rows, width)
    results = []
    for evolve in (lambda w, c: _evolve_with_autograd(layer, w, c, STEPS), lambda w, c: layer.evolve(w, c, STEPS)):
        params = [start_cell, *layer.parameters()]
        for p in params:
            p.grad = None
        weights, cell = evolve(layer.initial_weight, start_cell)
        # the stacked weights, the last one again (as the hand-over state) and the cell all carry gradient
        ((weights * project).sum() + (weights[-1] ** 2).sum() + (cell * project_cell).sum()).backward()
        results.append((weights.detach(), cell.detach(), [p.grad.clone() for p in params]))
    (ref_w, ref_c, ref_g), (w, c, g) = results
    assert torch.equal(ref_w, w) and torch.equal(ref_c, c)
    assert all(torch.equal(a, b) for a, b in zip(ref_g, g))
    assert layer.evolution.weight_ih.grad.data_ptr() != layer.evolution.weight_hh.grad.data_ptr()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> DiscreteData:
    store = build(out=tmp_path_factory.mktemp("pairs") / "s.zarr", nodes=48, snapshots=7, edge_factor=4.0, seed=3)
    return DiscreteData(store, theta=0.4, seed=9)


@pytest.mark.parametrize("split", [TRAIN, VAL, TEST])
def test_split_pairs_are_exact_distinct_positives_and_true_non_edges(data, split):
    for batch, step in zip(data.split_pairs(split, epoch=2), data.steps_of(split)):
        keys = data.target_keys[step + 1]
        pair_keys = batch.src * data.num_nodes + batch.dst
        positives, negatives = pair_keys[batch.label == 1], pair_keys[batch.label == 0]
        assert batch.step == step and len(positives) == len(negatives) == round(0.4 * len(keys))
        assert len(np.unique(positives)) == len(positives) and np.isin(positives, keys).all()
        assert not np.isin(negatives, keys).any() and (batch.src[batch.label == 0] != batch.dst[batch.label == 0]).all()
        assert np.array_equal(data.pairs(step, split, epoch=2).dst, batch.dst)


def test_split_pairs_depend_on_seed_split_and_epoch_only(data):
    again = DiscreteData(data.store.path, theta=0.4, seed=9)
    first, second = data.split_pairs(TRAIN, epoch=1), again.split_pairs(TRAIN, epoch=1)
    assert all(np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst) for a, b in zip(first, second))
    assert not np.array_equal(first[0].src, data.split_pairs(TRAIN, epoch=2)[0].src)
    assert np.array_equal(data.split_pairs(VAL, epoch=1)[0].src, data.split_pairs(VAL, epoch=5)[0].src)


def test_positives_are_a_uniform_subset(data):
    """Every target edge is drawn as a positive at rate θ over many epochs (no bias to small keys)."""
    keys = data.target_keys[1]
    hits = np.zeros(len(keys))
    epochs = 300
    for epoch in range(epochs):
        batch = data.split_pairs(TRAIN, epoch)[0]
        hits[np.searchsorted(keys, (batch.src * data.num_nodes + batch.dst)[batch.label == 1])] += 1
    rate = round(0.4 * len(keys)) / len(keys)
    spread = np.sqrt(rate * (1 - rate) / epochs)
    assert np.abs(hits / epochs - rate).max() < 5 * spread
    low, high = hits[:len(keys) // 2].mean(), hits[len(keys) // 2:].mean()
    assert abs(low - high) / epochs < 3 * spread
