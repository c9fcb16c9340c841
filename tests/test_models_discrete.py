"""The discrete-time models: M-transform, and block-wise runs that hand over state exactly."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from dgbench.models.contract import LayoutSequence
from dgbench.models.discrete import DynamicGNN, cdgcn, evolvegcn_o, tmgcn
from dgbench.models.sequence import m_transform
from dgbench.models.sparse import SparseOperator, block_diagonal, csr_from_coo, spmm
from dgbench.registry import MODELS, load_plugins

N, T, WIDTH = 12, 7, 2


@dataclass
class LocalView(LayoutSequence):
    """A single-process block view over dense-ish random snapshots (the model's whole contract)."""

    first: torch.Tensor
    ops: list
    block: range

    @property
    def num_steps(self) -> int:
        return len(self.block)

    local_steps = property(lambda self: slice(0, len(self.block)))
    vertex_rows = N

    def aggregate(self, x):
        if x is None:
            return self.first[self.block.start:self.block.stop]
        op = SparseOperator(block_diagonal([self.ops[t] for t in self.block]))
        return spmm(op, x.reshape(-1, x.shape[-1])).view(x.shape)

    def to_vertex(self, y):
        return y

    def to_time(self, z):
        return z


def snapshots(seed: int = 0) -> tuple[torch.Tensor, list]:
    rng = np.random.default_rng(seed)
    ops = [csr_from_coo(rng.integers(0, N, 30), rng.integers(0, N, 30), rng.random(30), (N, N)).to_torch()
           for _ in range(T)]
    return torch.randn(T, N, WIDTH, generator=torch.Generator().manual_seed(seed)), ops


def test_m_transform_is_the_window_mean():
    y = torch.randn(6, 3, 2, dtype=torch.float64)
    z, history = m_transform(y, y[:0], window=3)
    for t in range(6):
        torch.testing.assert_close(z[t], y[max(0, t - 2):t + 1].mean(dim=0))
    torch.testing.assert_close(history, y[-2:])


def test_m_transform_over_blocks_is_bit_identical():
    y = torch.randn(7, 4, 3)
    whole, _ = m_transform(y, y[:0], window=3)
    first, history = m_transform(y[:2], y[:0], window=3)
    second, _ = m_transform(y[2:], history, window=3)
    assert torch.equal(torch.cat([first, second]), whole)


def test_all_three_models_are_registered():
    load_plugins()
    assert {"tmgcn", "evolvegcn-o", "cdgcn"} <= {e.name for k, e in MODELS.items() if k.startswith("discrete:")}


@pytest.mark.parametrize("factory", [tmgcn, evolvegcn_o, cdgcn])
def test_blockwise_forward_with_handed_over_state_equals_one_block(factory):
    first, ops = snapshots()
    torch.manual_seed(0)
    model: DynamicGNN = factory(in_features=WIDTH, hidden=5, window=3)
    whole, _ = model.forward_block(LocalView(first, ops, range(T)), model.initial_state(N))
    state, parts = model.initial_state(N), []
    for block in (range(0, 3), range(3, 5), range(5, T)):
        halves, state = model.forward_block(LocalView(first, ops, block), state)
        parts.append(halves)
    assert whole.shape == (T, N, 2)
    torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-6, atol=1e-6)
    whole.sum().backward()
    encoder = [p for name, p in model.named_parameters() if name != "scorer.bias"]  # the bias enters at scoring
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in encoder)


def test_evolvegcn_weights_change_over_time():
    first, ops = snapshots(1)
    torch.manual_seed(0)
    model = evolvegcn_o(in_features=WIDTH, hidden=4)
    layer = model.layers[0]
    state = layer.initial_state(N)
    out, (weight, _) = layer.run_block(None, state, LocalView(first, ops, range(T)))
    assert out.shape == (T, N, 4) and not torch.equal(weight, layer.initial_weight)
