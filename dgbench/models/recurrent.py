"""GCN-then-RNN models of the DGC and BLAD papers: T-GCN, WD-GCN and MPNN-LSTM.

Each is PyG ``GCNConv`` layers on every snapshot (ESDG §5.5's precomputed first Ã X⁰), a per-vertex
recurrent time encoder through :meth:`~dgbench.models.contract.BlockView.sequence`, and
:class:`~dgbench.models.discrete.DynamicGNN`'s link scorer.
See docs/discrete-schemes.md (section "The DGC / BLAD zoo").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from dgbench.errors import DgbenchError
from dgbench.models.contract import BlockView, SequenceModule, State
from dgbench.models.discrete import DynamicGNN
from dgbench.models.sequence import GateWiseGRUSequence, GRUSequence, LSTMSequence
from dgbench.options import Options, option
from dgbench.registry import register_model

TGCN_VARIANTS = ("dgc", "pygt")


def _glorot(rows: int, cols: int) -> nn.Parameter:
    return nn.Parameter(nn.init.xavier_uniform_(torch.empty(rows, cols)))


_BIAS_ROWS = 64  # rows of the output one wide bias add takes at a time


def add_bias(out: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``out + bias`` over the last dimension. A few features per row (6 here) make the broadcast add, and
    its backward's sum over every row, loops over a handful of floats (addmm's bias, the same add inside,
    cost 3-4x the [rows, 2] x [2, 6] product itself at 131k rows); a contiguous ``out`` is added to as
    [rows / k, k·F] against the bias repeated k times. Each element gets the same sum (the output is bit
    for bit ``out + bias``); ∂b sums the same numbers in another order."""
    width = bias.numel()
    rows = out.numel() // width if width else 0
    group = math.gcd(rows, _BIAS_ROWS)
    if group == 1 or not out.is_contiguous():
        return out + bias
    return (out.view(rows // group, group * width) + bias.repeat(group)).view(out.shape)


class GraphConvolution(nn.Module):
    """``Ã X W + b`` on every local snapshot (PyG ``GCNConv``); no temporal module, no state."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = _glorot(in_features, out_features)
        self.bias = nn.Parameter(torch.zeros(out_features))
        self.temporal_widths = (0, 0)

    def convolve(self, x: torch.Tensor | None, view: BlockView) -> torch.Tensor:
        """[local steps, rows, out]; ``x`` None = the precomputed Ã X⁰. Through :meth:`BlockView.convolve`,
        so a scheme may run the pair as Ã (x W) (BLAD §6, Eq. 4; the bias comes after both, here)."""
        return add_bias(view.convolve(x, self.weight), self.bias)

    def spatial_widths(self, first: bool) -> tuple[int, ...]:
        """One aggregation of the input's width; none for the first layer (Ã X⁰ is precomputed)."""
        return () if first else (self.weight.shape[0],)

    def initial_state(self, vertex_rows: int) -> State:
        return ()

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        return self.convolve(x, view), state


class ConvolvedSequence(nn.Module):
    """A GCN layer, optionally ReLU, then a per-vertex recurrent module over its output
    (``concatenate``: over ``[x, ReLU(Ã x W + b)]``, MPNN-LSTM's concatenation of every GCN layer's
    output)."""

    def __init__(self, in_features: int, out_features: int, temporal: SequenceModule, concatenate: bool = False,
                 activation: bool = True):
        super().__init__()
        self.convolution = GraphConvolution(in_features, out_features)
        self.temporal = temporal
        self.concatenate, self.activation = concatenate, activation
        self.temporal_widths = (temporal.in_width, temporal.out_width)

    def spatial_widths(self, first: bool) -> tuple[int, ...]:
        return self.convolution.spatial_widths(first)

    def initial_state(self, vertex_rows: int) -> State:
        return self.temporal.initial_carry(vertex_rows)

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        h = self.convolution.convolve(x, view)
        if self.activation:
            h = torch.relu(h)
        if self.concatenate:
            h = torch.cat([view.aggregate(None) if x is None else x, h], dim=-1)
        return view.sequence(self.temporal, h, state)


class GateWiseTGCNLayer(nn.Module):
    """PyTorch Geometric Temporal's ``TGCN`` cell as a dynamic layer: per gate g ∈ {z, r, h} a
    ``GCNConv`` C_g = Ã X W_g + b_g and a ``Linear(cat[C_g, H])`` with weight [K_g | L_g] and bias
    c_g. Ã X is computed once for the three gates (Ã X W_g = (Ã X) W_g), and the input halves
    U_g = C_g K_gᵀ + c_g per snapshot, before the layout change; the recurrence (L_g) runs in
    :class:`~dgbench.models.sequence.GateWiseGRUSequence`. Parameters are initialised as PGT's
    (glorot W_g, zero b_g, ``nn.Linear``'s uniform ±1/√(2F) for K, L and c)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gate_weight = nn.Parameter(torch.cat([nn.init.xavier_uniform_(torch.empty(in_features, out_features))
                                                   for _ in range(3)], dim=1))
        self.gate_bias = nn.Parameter(torch.zeros(3 * out_features))
        bound = 1.0 / math.sqrt(2 * out_features)
        self.input_weight = nn.Parameter(torch.empty(3, out_features, out_features).uniform_(-bound, bound))
        self.input_bias = nn.Parameter(torch.empty(3 * out_features).uniform_(-bound, bound))
        self.temporal = GateWiseGRUSequence(out_features)
        self.temporal_widths = (3 * out_features, out_features)

    def spatial_widths(self, first: bool) -> tuple[int, ...]:
        """One aggregation for the three gates (of the input's width); none on Ã X⁰."""
        return () if first else (self.gate_weight.shape[0],)

    def initial_state(self, vertex_rows: int) -> State:
        return self.temporal.initial_carry(vertex_rows)

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        ax = view.aggregate(x)
        steps, rows, width = ax.shape
        # U = (Ã X W + b) K + c for the three gates at once: K is block-diagonal over the gates
        blocks = torch.block_diag(*self.input_weight.transpose(1, 2).unbind(0))
        weight = self.gate_weight @ blocks
        bias = torch.addmm(self.input_bias, self.gate_bias[None], blocks)[0]
        inputs = torch.addmm(bias, ax.reshape(-1, width), weight)
        return view.sequence(self.temporal, inputs.view(steps, rows, 3 * self.temporal.out_width), state)


def _check_hidden(hidden: int) -> None:
    if hidden < 1:
        raise DgbenchError(f"--hidden {hidden}: must be >= 1")


@dataclass(frozen=True)
class TGCNOptions(Options):
    variant: str = option("dgc", "T-GCN form: dgc = two GCN layers then a GRU (DGC §4.1); pygt = a GCN, then "
                          "PyTorch Geometric Temporal's TGCN cell (one GCN per GRU gate).", flag="--tgcn-variant",
                          choices=TGCN_VARIANTS)


@dataclass(frozen=True)
class WDGCNOptions(Options):
    gcn_layers: int = option(2, "WD-GCN: GCN layers before the per-vertex LSTM (2: BLAD §7.1's backbone; "
                             "1: Manessi et al.'s single wd-GC layer).", positive=True)


@register_model("tgcn", family="discrete", options=TGCNOptions,
                summary="T-GCN: two GCN layers then a per-vertex GRU (DGC §4.1; --tgcn-variant pygt: a GCN per gate)")
def tgcn(in_features: int = 2, hidden: int = 6, window: int = 3, variant: str = "dgc") -> DynamicGNN:
    """``variant``: "dgc" (GCN, GCN, GRU; DGC §4.1) or "pygt" (GCN, then PGT's TGCN cell)."""
    _check_hidden(hidden)
    if variant not in TGCN_VARIANTS:
        raise DgbenchError(f"T-GCN variant '{variant}': choose one of {', '.join(TGCN_VARIANTS)}")
    second = ConvolvedSequence(hidden, hidden, GRUSequence(hidden, hidden), activation=False) if variant == "dgc" \
        else GateWiseTGCNLayer(hidden, hidden)
    return DynamicGNN([GraphConvolution(in_features, hidden), second], hidden)


@register_model("wdgcn", family="discrete", options=WDGCNOptions,
                summary="WD-GCN: shared-weight GCN on every snapshot, then a per-vertex LSTM (Manessi; BLAD)")
def wdgcn(in_features: int = 2, hidden: int = 6, window: int = 3, gcn_layers: int = 2) -> DynamicGNN:
    """``gcn_layers``: GCN layers before the LSTM (2: BLAD §7.1's backbone; 1: Manessi's WD-GCN)."""
    _check_hidden(hidden)
    if gcn_layers < 1:
        raise DgbenchError(f"WD-GCN gcn_layers {gcn_layers}: must be >= 1")
    widths = [in_features] + [hidden] * gcn_layers
    layers: list[nn.Module] = [GraphConvolution(a, b) for a, b in zip(widths[:-2], widths[1:-1])]
    layers.append(ConvolvedSequence(widths[-2], hidden, LSTMSequence(hidden, hidden)))
    return DynamicGNN(layers, hidden)


@register_model("mpnn-lstm", family="discrete",
                summary="MPNN-LSTM: two GCN layers, their outputs concatenated into a two-layer LSTM (DGC §6)")
def mpnn_lstm(in_features: int = 2, hidden: int = 6, window: int = 3) -> DynamicGNN:
    _check_hidden(hidden)
    temporal = LSTMSequence(2 * hidden, hidden, layers=2)
    return DynamicGNN([GraphConvolution(in_features, hidden),
                       ConvolvedSequence(hidden, hidden, temporal, concatenate=True)], hidden)
