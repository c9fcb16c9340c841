"""The discrete-time model zoo of ESDG §5: TM-GCN, EvolveGCN-O and CD-GCN.

Each model is two dynamic layers (a GCN on every snapshot followed by a temporal module) and an
edge scorer (concatenation of the two endpoint embeddings + linear). The activation is where ESDG
writes it (``--sigma-placement eq2``, the default): every layer's GCN is Eq. 2, Y = σ(Ã X W) with
σ = ReLU, applied *before* the layer's temporal module (§2.2, Fig. 1: GCN → RNN, layer after layer,
nothing between one layer's RNN output and the next layer's GCN); CD-GCN applies σ to the
concatenation, σ(ÃX ∘ ÃXW) (§5.1); EvolveGCN-O to σ(Ã_t X_t W_t) (§5.2). ``between-layers`` keeps
dgbench's earlier placement (no σ inside a layer, one ReLU after the first layer's temporal
module) so older records can be reproduced; the record's hyper-parameters say which ran. σ is
elementwise on each local (step, vertex) row, so every scheme's layout change commutes with it.

The models never know how the work is distributed: a layer runs one block of timesteps through a
:class:`BlockView` the scheme supplies, which aggregates ``Ã X`` (locally, or with a halo exchange),
and moves features between the time-partitioned layout of the GCN and the vertex-partitioned layout
of a temporal module that needs each vertex's whole sequence (identity when nothing is distributed). The hand-over state
between blocks (π_b of ESDG §3.1) is what :meth:`DynamicGNN.forward_block` takes and returns.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from dgbench.errors import DgbenchError
from dgbench.models.contract import BlockView, State
from dgbench.options import Options, option
from dgbench.models.sequence import LSTMSequence, MTransform
from dgbench.models.sparse import narrow_product
from dgbench.registry import register_model

_TANH_BACKWARD = torch.ops.aten.tanh_backward.default  # the derivative kernels autograd itself calls
_SIGMOID_BACKWARD = torch.ops.aten.sigmoid_backward.default


SIGMA_PLACEMENTS = ("eq2", "between-layers")


def _sigma(y: torch.Tensor, apply: bool) -> torch.Tensor:
    """Eq. 2's σ (ReLU; ESDG: "a suitable activation function such as ReLU"), when ``apply``."""
    return torch.relu(y) if apply else y


def _glorot(rows: int, cols: int) -> nn.Parameter:
    weight = torch.empty(rows, cols)
    nn.init.xavier_uniform_(weight)
    return nn.Parameter(weight)


class TMGCNLayer(nn.Module):
    """GCN on each snapshot, σ(Ã X W) (Eq. 2), then the parameter-less M-transform over the last w
    steps (ESDG §5.3). ``sigma``: apply Eq. 2's σ before the M-transform (False: the layer is linear)."""

    def __init__(self, in_features: int, out_features: int, window: int, sigma: bool = True):
        super().__init__()
        self.sigma = sigma
        self.weight = _glorot(in_features, out_features)
        self.temporal = MTransform(out_features, window)
        self.temporal_widths = (out_features, out_features)  # (to_vertex, to_time) feature widths
        self.in_features = in_features

    def spatial_widths(self, first: bool) -> tuple[int, ...]:
        return () if first else (self.in_features,)  # the first layer's Ã X is precomputed

    def initial_state(self, vertex_rows: int) -> State:
        return tuple(t.to(self.weight) for t in self.temporal.initial_carry(vertex_rows))

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        return view.sequence(self.temporal, _sigma(view.aggregate(x) @ self.weight, self.sigma), state)


class _WeightEvolution(torch.autograd.Function):
    """``steps`` LSTM-cell updates of a weight matrix fed back as its own input, W_t = LSTM(W_{t-1})
    (EvolveGCN-O, Pareja et al. §3.3), as one autograd node.

    The weights are a few rows wide, so autograd's per-op bookkeeping over the ~15 ops of each
    cell costs more than the arithmetic. The forward runs exactly the ops of ``torch.lstm_cell`` on
    the CPU (same values, bit for bit); the backward applies the derivatives autograd would, in
    the order autograd's engine accumulates them, so gradients are bit-identical as well.
    """

    @staticmethod
    def forward(ctx, weight, cell, w_ih, w_hh, b_ih, b_hh, steps: int):
        ctx.set_materialize_grads(False)
        out = weight.new_empty((steps, *weight.shape))
        into_ih, into_hh = w_ih.t(), w_hh.t()
        first, saved = weight, []
        for row in out.unbind(0):
            gates = torch.addmm(b_hh, weight, into_hh).add_(torch.addmm(b_ih, weight, into_ih))
            i, f, g, o = gates.unsafe_chunk(4, 1)
            i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
            new_cell = (f * cell).add_(i * g)
            squashed = new_cell.tanh()
            torch.mul(o, squashed, out=row)
            saved += [cell, gates, squashed]
            weight, cell = row, new_cell
        ctx.save_for_backward(w_ih, w_hh, first, out, *saved)
        return out, cell

    @staticmethod
    def backward(ctx, grad_out, grad_cell):
        w_ih, w_hh, first, out, *saved = ctx.saved_tensors
        steps = out.shape[0]
        inputs = (first, *out.unbind(0)[:-1])
        from_stack = grad_out.unbind(0) if grad_out is not None else (None,) * steps
        grad_w = grad_b = from_ih = from_hh = None
        for t in reversed(range(steps)):
            cell, gates, squashed = saved[3 * t:3 * t + 3]
            grad_h = from_stack[t]
            if from_ih is not None:  # autograd's order: the stack, then W_ih's, then W_hh's addmm
                grad_h = (from_ih if grad_h is None else grad_h + from_ih) + from_hh
            elif grad_h is None:
                grad_h = torch.zeros_like(squashed)
            i, f, g, o = gates.unsafe_chunk(4, 1)
            grad_c = _TANH_BACKWARD(grad_h * o, squashed)
            if grad_cell is not None:
                grad_c = grad_c + grad_cell
            grad_gates = torch.cat([_SIGMOID_BACKWARD(grad_c * g, i), _SIGMOID_BACKWARD(grad_c * cell, f),
                                    _TANH_BACKWARD(grad_c * i, g), _SIGMOID_BACKWARD(grad_h * squashed, o)], 1)
            grad_cell = grad_c * f
            from_ih, from_hh = grad_gates.mm(w_ih), grad_gates.mm(w_hh)
            step_w, step_b = grad_gates.t().mm(inputs[t]), grad_gates.sum(0)
            grad_w = step_w if grad_w is None else grad_w.add_(step_w)
            grad_b = step_b if grad_b is None else grad_b.add_(step_b)
        # W_ih and W_hh see the same input and gate gradients, so their gradients are equal (two copies)
        return from_ih + from_hh, grad_cell, grad_w, grad_w.clone(), grad_b, grad_b.clone(), None


class EvolveGCNOLayer(nn.Module):
    """GCN whose weight matrix W_t is evolved by an LSTM over the weights, W_t = LSTM(W_{t-1})
    (Pareja et al., EvolveGCN-O; ESDG §5.2), and Y_t = σ(Ã_t X_t W_t) (§5.2's form of Eq. 2).
    The evolution is over time only, so every rank runs it itself and no features move between
    layouts. ``sigma``: apply σ (False: the layer is linear in X)."""

    def __init__(self, in_features: int, out_features: int, sigma: bool = True):
        super().__init__()
        self.sigma = sigma
        self.initial_weight = _glorot(in_features, out_features)
        self.evolution = nn.LSTMCell(out_features, out_features)  # rows of W are the batch
        self.temporal_widths = (0, 0)
        self.in_features = in_features

    def spatial_widths(self, first: bool) -> tuple[int, ...]:
        return () if first else (self.in_features,)

    def initial_state(self, vertex_rows: int) -> State:
        return (self.initial_weight, torch.zeros_like(self.initial_weight))

    def evolve(self, weight: torch.Tensor, cell: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """W_1..W_steps from (W_0, c_0), [steps, rows, F], and the last LSTM cell state."""
        lstm = self.evolution
        if weight.device.type != "cpu":  # lstm_cell is one fused kernel there; autograd through it is cheap
            weights = []
            for _ in range(steps):
                weight, cell = lstm(weight, (weight, cell))
                weights.append(weight)
            return torch.stack(weights), cell
        return _WeightEvolution.apply(weight, cell, lstm.weight_ih, lstm.weight_hh, lstm.bias_ih, lstm.bias_hh,
                                      steps)

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        weights, cell = self.evolve(*state, view.num_steps)
        y = view.convolve(x, weights[view.local_steps])  # (Ã X) W_t; BLAD may run Ã (X W_t), σ comes after both
        return _sigma(y, self.sigma), (weights[-1], cell)


class CDGCNLayer(nn.Module):
    """GCN with a skip connection by concatenation, Y = σ(Y_0 ∘ Y_1) with Y_0 = ÃX, Y_1 = Y_0 W
    (ESDG §5.1: σ on the whole concatenation, so the skip half ÃX is rectified too), then an LSTM
    over each vertex's sequence (Manessi et al., CD-GCN). ``sigma``: apply σ (False: [ÃX, ÃXW])."""

    def __init__(self, in_features: int, out_features: int, sigma: bool = True):
        super().__init__()
        self.sigma = sigma
        self.weight = _glorot(in_features, out_features)
        self.temporal = LSTMSequence(in_features + out_features, out_features)
        self.temporal_widths = (in_features + out_features, out_features)
        self.in_features = in_features

    def spatial_widths(self, first: bool) -> tuple[int, ...]:
        return () if first else (self.in_features,)

    def initial_state(self, vertex_rows: int) -> State:
        return self.temporal.initial_carry(vertex_rows)

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        ax = view.aggregate(x)
        if self.sigma:
            y = _RectifiedSkipConcatenation.apply(ax, self.weight)
        else:
            y = torch.cat([ax, ax @ self.weight], dim=-1)
        return view.sequence(self.temporal, y, state)


class _RectifiedSkipConcatenation(torch.autograd.Function):
    """CD-GCN's σ(ÃX ∘ ÃXW) (ESDG §5.1) as one autograd node that keeps a 1-byte sign mask of its output
    instead of the float output ReLU's own backward keeps (4 bytes per element: 80 B per (step, vertex) row
    of cdgcn's two layers at hidden 6, a seventh of a block's saved activations). ÃX is kept as the
    product's backward keeps it (the first layer's is the precomputed frame, held anyway). The backward
    runs the ops autograd runs for ``relu(cat([ax, ax @ w]))`` (ReLU's, the slice, the product's two ``mm``),
    so values and gradients are the same bit for bit (``tests/test_rank_memory.py``)."""

    @staticmethod
    def forward(ctx, ax: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        out = torch.relu(torch.cat([ax, ax @ weight], dim=-1))
        ctx.save_for_backward(ax, weight, out > 0)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        ax, weight, positive = ctx.saved_tensors
        rectified = torch.where(positive, grad, 0.0)  # ReLU's backward: +0 where the output was not positive
        fin, fout = weight.shape
        product_grad = rectified[..., fin:].reshape(-1, fout)  # matmul folds [.., fin] @ W into one mm
        grad_ax = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_ax = rectified[..., :fin] + product_grad.mm(weight.t()).view(ax.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = ax.reshape(-1, fin).t().mm(product_grad)
        return grad_ax, grad_weight


class DynamicGNN(nn.Module):
    """Dynamic layers and the link scorer of ESDG §6.4.

    ``relu_between_layers``: a ReLU on every layer's output but the last, after its temporal module.
    The DGC/BLAD zoo (``recurrent.py``, ``attention.py``) builds its GCN → ReLU → GCN stacks with it;
    ESDG's models do not (their σ is inside each layer, Eq. 2), except under ``between-layers``.
    """

    def __init__(self, layers: list[nn.Module], embedding: int, relu_between_layers: bool = True):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.relu_between_layers = relu_between_layers
        self.scorer = nn.Linear(2 * embedding, 1)  # score(u, v) = w · [h_u, h_v] + b

    def initial_state(self, vertex_rows: int) -> list[State]:
        return [layer.initial_state(vertex_rows) for layer in self.layers]

    def forward_block(self, view: BlockView, state: list[State]) -> tuple[torch.Tensor, list[State]]:
        """One block: returns per-vertex scorer halves [local steps, rows, 2] and the next state.

        ``halves[..., 0]`` is w_u · h and ``halves[..., 1]`` is w_v · h, so a pair's logit is
        ``halves[t, u, 0] + halves[t, v, 1] + b`` — the concatenation + linear of ESDG §6.4,
        computed once per vertex instead of once per pair.
        """
        x, new_state = self.embed_block(view, state)
        halves = narrow_product(x, self.scorer.weight.view(2, -1).t())
        return halves, new_state

    def embed_block(self, view: BlockView, state: list[State]) -> tuple[torch.Tensor, list[State]]:
        """One block up to the embedding (the link scorer's input, [local steps, rows, hidden]) and the next
        state; node classification decodes these embeddings (dgbench/tasks/node.py)."""
        x, new_state = None, []
        for i, layer in enumerate(self.layers):
            x, s = layer.run_block(x, state[i], view)
            new_state.append(s)
            if self.relu_between_layers and i + 1 < len(self.layers):
                x = torch.relu(x)
        assert x is not None
        return x, new_state

    def feature_widths(self) -> list[tuple[int, int]]:
        """Per layer, the widths moved to and from the vertex layout (0: none moved)."""
        return [layer.temporal_widths for layer in self.layers]

    def spatial_widths(self) -> list[tuple[int, ...]] | None:
        """Per layer, the width of each neighbour exchange it makes per block (halo rows under vertex
        partitioning); None when a layer does not declare them."""
        if not all(hasattr(layer, "spatial_widths") for layer in self.layers):
            return None
        return [tuple(layer.spatial_widths(i == 0)) for i, layer in enumerate(self.layers)]


def _sizes(in_features: int, hidden: int) -> list[tuple[int, int]]:
    return [(in_features, hidden), (hidden, hidden)]


_SIGMA_HELP = ("Where σ = ReLU goes: eq2 = on each layer's GCN output before its temporal module (ESDG Eq. 2, "
               "§2.2; CD-GCN on the concatenation, §5.1); between-layers = one ReLU after the first layer's "
               "temporal module (dgbench's earlier placement).")


def _sigma_option() -> str:
    return option("eq2", _SIGMA_HELP, choices=SIGMA_PLACEMENTS)


def _esdg_model(layer: Callable[[int, int, bool], nn.Module], sigma_placement: str, in_features: int,
                hidden: int) -> DynamicGNN:
    """Two ESDG layers ``layer(fin, fout, sigma)`` with the activation placed as ``sigma_placement`` says."""
    if sigma_placement not in SIGMA_PLACEMENTS:
        raise DgbenchError(f"--sigma-placement {sigma_placement}: choose one of {', '.join(SIGMA_PLACEMENTS)}")
    in_layer = sigma_placement == "eq2"
    return DynamicGNN([layer(i, o, in_layer) for i, o in _sizes(in_features, hidden)], hidden,
                      relu_between_layers=not in_layer)


@dataclass(frozen=True)
class TMGCNOptions(Options):
    window: int = option(3, "TM-GCN's M-transform window w (ESDG §5.3).", positive=True)
    sigma_placement: str = _sigma_option()


@dataclass(frozen=True)
class ESDGModelOptions(Options):
    sigma_placement: str = _sigma_option()


@register_model("tmgcn", family="discrete", summary="TM-GCN: GCN + M-transform over the last w steps",
                options=TMGCNOptions)
def tmgcn(in_features: int = 2, hidden: int = 6, window: int = 3, sigma_placement: str = "eq2") -> DynamicGNN:
    return _esdg_model(lambda i, o, sigma: TMGCNLayer(i, o, window, sigma), sigma_placement, in_features, hidden)


@register_model("evolvegcn-o", family="discrete", summary="EvolveGCN-O: GCN weights evolved by an LSTM",
                options=ESDGModelOptions)
def evolvegcn_o(in_features: int = 2, hidden: int = 6, window: int = 3, sigma_placement: str = "eq2") -> DynamicGNN:
    return _esdg_model(EvolveGCNOLayer, sigma_placement, in_features, hidden)


@register_model("cdgcn", family="discrete", summary="CD-GCN: skip-concatenated GCN + per-vertex LSTM",
                options=ESDGModelOptions)
def cdgcn(in_features: int = 2, hidden: int = 6, window: int = 3, sigma_placement: str = "eq2") -> DynamicGNN:
    return _esdg_model(CDGCNLayer, sigma_placement, in_features, hidden)
