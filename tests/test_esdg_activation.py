"""ESDG's activation placement: Eq. 2's σ on each layer's GCN output, before the
layer's temporal module (§2.2, Fig. 1), CD-GCN's σ on the whole concatenation (§5.1), EvolveGCN-O's
σ(Ã_t X_t W_t) (§5.2); nothing between one layer's temporal output and the next layer's GCN.

Each model is checked against the paper's formulas written out with dense matrices on a hand-built
input whose GCN outputs have both signs, so a σ in another place gives other numbers (asserted too).
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from dgbench.models.contract import LayoutSequence
from dgbench.models.discrete import DynamicGNN, cdgcn, evolvegcn_o, tmgcn
from dgbench.models.recurrent import mpnn_lstm, tgcn, wdgcn
from dgbench.registry import MODELS, load_plugins

N, T, F_IN, HIDDEN, WINDOW = 4, 3, 2, 3, 2


def normalised(adjacency: torch.Tensor) -> torch.Tensor:
    """Eq. 1: Ã = D^-1/2 (A + I) D^-1/2 with D[u, u] = 1 + deg_u."""
    with_loops = adjacency + torch.eye(adjacency.shape[0], dtype=adjacency.dtype)
    scale = with_loops.sum(1).rsqrt()
    return scale[:, None] * with_loops * scale[None, :]


EDGES = [[(0, 1), (1, 2)], [(2, 3), (0, 3), (1, 3)], [(0, 2)]]  # undirected edges of each snapshot


def snapshots() -> torch.Tensor:
    out = torch.zeros(T, N, N, dtype=torch.float64)
    for t, edges in enumerate(EDGES):
        for u, v in edges:
            out[t, u, v] = out[t, v, u] = 1.0
    return torch.stack([normalised(a) for a in out])


# signed input features, so the first layer's Ã X (CD-GCN's skip half) has negative entries too
X0 = torch.tensor([[1.0, -2.0], [-0.5, 1.5], [2.0, 0.5], [-1.0, -1.0]], dtype=torch.float64).expand(T, N, F_IN) \
    * torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)[:, None, None]


@dataclass
class DenseView(LayoutSequence):
    """One process, every step local, Ã_t dense: the whole block-view contract on a hand-built input."""

    operators: torch.Tensor  # [T, N, N]
    features: torch.Tensor  # [T, N, F]
    num_steps = T
    vertex_rows = N
    local_steps = property(lambda self: slice(0, T))

    def aggregate(self, x):
        return torch.bmm(self.operators, self.features if x is None else x)

    def to_vertex(self, y):
        return y

    def to_time(self, z):
        return z


def m_matrix(steps: int, window: int) -> torch.Tensor:
    """ESDG §5.3: M_tk = 1/min(w, t) for max(1, t-w+1) <= k <= t (1-based), else 0."""
    m = torch.zeros(steps, steps, dtype=torch.float64)
    for t in range(1, steps + 1):
        for k in range(max(1, t - window + 1), t + 1):
            m[t - 1, k - 1] = 1.0 / min(window, t)
    return m


def scored(model: DynamicGNN, embedding: torch.Tensor) -> torch.Tensor:
    return embedding @ model.scorer.weight.view(2, -1).t()


def paper_tmgcn(model: DynamicGNN, a: torch.Tensor) -> torch.Tensor:
    """Per layer: Y = σ(Ã X W) (Eq. 2), then the M-transform 𝒴 ×₁ M (§5.3); no σ after it."""
    m, x = m_matrix(T, WINDOW), X0
    for layer in model.layers:
        y = torch.relu(a @ x @ layer.weight)
        x = torch.einsum("tk,knf->tnf", m, y)
    return scored(model, x)


def paper_evolvegcn(model: DynamicGNN, a: torch.Tensor) -> torch.Tensor:
    """Per layer: W_t = LSTM(W_{t-1}) from W_0, Y_t = σ(Ã_t X_t W_t) (§5.2)."""
    x = X0
    for layer in model.layers:
        weight, cell, ys = layer.initial_weight, torch.zeros_like(layer.initial_weight), []
        for t in range(T):
            weight, cell = layer.evolution(weight, (weight, cell))  # nn.LSTMCell: input = hidden = W
            ys.append(torch.relu(a[t] @ x[t] @ weight))
        x = torch.stack(ys)
    return scored(model, x)


def paper_cdgcn(model: DynamicGNN, a: torch.Tensor) -> torch.Tensor:
    """Per layer: Y0 = ÃX, Y1 = Y0 W, Y = σ(Y0 ∘ Y1) (§5.1), then an LSTM (w = 1) per vertex."""
    x = X0
    for layer in model.layers:
        y0 = a @ x
        y = torch.relu(torch.cat([y0, y0 @ layer.weight], dim=-1))
        x, _ = layer.temporal.lstm(y)  # torch's own LSTM over [T, N, F], zero initial state
    return scored(model, x)


def relu_on_gcn_half_only(model: DynamicGNN, a: torch.Tensor) -> torch.Tensor:
    """The other reading of CD-GCN, [ÃX, σ(ÃXW)], which the paper's σ(Y0 ∘ Y1) is not."""
    x = X0
    for layer in model.layers:
        y0 = a @ x
        x, _ = layer.temporal.lstm(torch.cat([y0, torch.relu(y0 @ layer.weight)], dim=-1))
    return scored(model, x)


PAPER = {"tmgcn": (tmgcn, paper_tmgcn), "evolvegcn-o": (evolvegcn_o, paper_evolvegcn),
         "cdgcn": (cdgcn, paper_cdgcn)}


def built(factory, placement: str) -> DynamicGNN:
    torch.manual_seed(1)  # a seed where every model's last GCN output has both signs
    return factory(in_features=F_IN, hidden=HIDDEN, window=WINDOW, sigma_placement=placement).double()


def halves(model: DynamicGNN, a: torch.Tensor) -> torch.Tensor:
    out, _ = model.forward_block(DenseView(a, X0), model.initial_state(N))
    return out


@pytest.mark.parametrize("name", sorted(PAPER))
def test_each_esdg_model_places_sigma_as_the_paper_writes_it(name):
    factory, paper = PAPER[name]
    a = snapshots()
    model = built(factory, "eq2")
    with torch.no_grad():
        expected = paper(model, a)
        torch.testing.assert_close(halves(model, a), expected, rtol=1e-12, atol=1e-12)
        # the input is one where the placement matters: dgbench's earlier between-layers form gives other scores
        old = halves(built(factory, "between-layers"), a)
    assert (old - expected).abs().max() > 1e-3, name


def test_cdgcn_rectifies_the_skip_half_of_the_concatenation():
    a = snapshots()
    model = built(cdgcn, "eq2")
    with torch.no_grad():
        assert (a @ X0).min() < 0  # the skip half has negative entries, so σ on it is visible
        other = relu_on_gcn_half_only(model, a)
        assert (halves(model, a) - other).abs().max() > 1e-3


def test_the_default_is_the_papers_and_the_zoo_keeps_its_relu_between_layers():
    load_plugins()
    for name in PAPER:
        options = MODELS[f"discrete:{name}"].options
        assert options is not None and options().sigma_placement == "eq2", name
        model = MODELS[f"discrete:{name}"].build(in_features=F_IN, hidden=HIDDEN)
        assert not model.relu_between_layers and all(layer.sigma for layer in model.layers), name
    # the DGC/BLAD zoo follows its own papers: GCN -> ReLU -> GCN stacks through DynamicGNN's ReLU
    for factory in (tgcn, wdgcn, mpnn_lstm):
        assert factory(in_features=F_IN, hidden=HIDDEN).relu_between_layers


def test_an_unknown_placement_is_refused():
    from dgbench.errors import DgbenchError
    with pytest.raises(DgbenchError, match="sigma-placement"):
        tmgcn(sigma_placement="after")
