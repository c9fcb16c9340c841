"""The discrete-time model zoo of ESDG §5: TM-GCN, EvolveGCN-O and CD-GCN.

Each model is two dynamic layers (a GCN on every snapshot followed by a temporal module) and an
edge scorer (concatenation of the two endpoint embeddings + linear). The models never know how the
work is distributed: a layer runs one block of timesteps through a :class:`BlockView` the scheme
supplies, which aggregates ``Ã X`` (locally, or with a halo exchange), and moves features between
the time-partitioned layout of the GCN and the vertex-partitioned layout of a temporal module that
needs each vertex's whole sequence (identity when nothing is distributed). The hand-over state
between blocks (π_b of ESDG §3.1) is what :meth:`DynamicGNN.forward_block` takes and returns.
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from dgbench.registry import register_model

State = tuple[torch.Tensor, ...]


class BlockView(Protocol):
    """What a scheme lends a layer for one block of timesteps."""

    num_steps: int  # timesteps in the block
    local_steps: slice  # the block's timesteps whose snapshot (GCN) part runs on this rank
    vertex_rows: int  # vertices this rank holds in the vertex-partitioned layout

    def aggregate(self, x: torch.Tensor | None) -> torch.Tensor:
        """Ã_t x_t for the local steps, [local steps, rows, F]; ``None`` = the precomputed Ã X⁰."""

    def to_vertex(self, y: torch.Tensor) -> torch.Tensor:
        """[local steps, rows, F] -> [num_steps, vertex_rows, F]."""

    def to_time(self, z: torch.Tensor) -> torch.Tensor:
        """[num_steps, vertex_rows, F] -> [local steps, rows, F]."""


def _glorot(rows: int, cols: int) -> nn.Parameter:
    weight = torch.empty(rows, cols)
    nn.init.xavier_uniform_(weight)
    return nn.Parameter(weight)


def m_transform(y: torch.Tensor, history: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TM-GCN's M-product along time: each step becomes the mean of the last ``window`` steps
    (fewer at the start), M_tk = 1/min(w, t+1) (Malik et al., TM-GCN; ESDG §5.1).

    ``history`` holds the up to w-1 steps before the block; the sum runs over the same elements in
    the same order however the timesteps are blocked, so results are bit-identical across blocks.
    """
    sequence = torch.cat([history, y], dim=0)
    known, steps = history.shape[0], y.shape[0]
    total = torch.zeros_like(y)
    for shift in range(window):
        first = known - shift
        if first + steps <= 0:
            break
        lo = max(0, first)
        total[lo - first:] = total[lo - first:] + sequence[lo:first + steps]
    available = torch.arange(known, known + steps, device=y.device) + 1  # positions 1.. in the sequence
    counts = torch.clamp(available, max=window).to(y.dtype)
    return total / counts.view(-1, *([1] * (y.dim() - 1))), sequence[-(window - 1):] if window > 1 \
        else sequence[:0]


class TMGCNLayer(nn.Module):
    """GCN on each snapshot, then the parameter-less M-transform over the last w steps (ESDG §5.1)."""

    def __init__(self, in_features: int, out_features: int, window: int):
        super().__init__()
        self.weight = _glorot(in_features, out_features)
        self.window = window
        self.temporal_widths = (out_features, out_features)  # (to_vertex, to_time) feature widths

    def initial_state(self, vertex_rows: int) -> State:
        return (self.weight.new_zeros((0, vertex_rows, self.weight.shape[1])),)

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        y = view.to_vertex(view.aggregate(x) @ self.weight)
        z, history = m_transform(y, state[0], self.window)
        return view.to_time(z), (history,)


class EvolveGCNOLayer(nn.Module):
    """GCN whose weight matrix W_t is evolved by an LSTM over the weights, W_t = LSTM(W_{t-1})
    (Pareja et al., EvolveGCN-O; ESDG §5.2). The evolution is over time only, so every rank runs it
    itself and no features move between layouts."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.initial_weight = _glorot(in_features, out_features)
        self.evolution = nn.LSTMCell(out_features, out_features)  # rows of W are the batch
        self.temporal_widths = (0, 0)

    def initial_state(self, vertex_rows: int) -> State:
        return (self.initial_weight, torch.zeros_like(self.initial_weight))

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        weight, cell = state
        weights = []
        for _ in range(view.num_steps):
            weight, cell = self.evolution(weight, (weight, cell))
            weights.append(weight)
        local = torch.stack(weights[view.local_steps]) if weights[view.local_steps] else \
            self.initial_weight.new_zeros((0, *self.initial_weight.shape))
        return torch.bmm(view.aggregate(x), local), (weight, cell)


class CDGCNLayer(nn.Module):
    """GCN with a skip connection by concatenation, [ÃX, ÃXW], then an LSTM over each vertex's
    sequence (Manessi et al., CD-GCN; ESDG §5.3)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = _glorot(in_features, out_features)
        self.lstm = nn.LSTM(in_features + out_features, out_features)
        self.temporal_widths = (in_features + out_features, out_features)

    def initial_state(self, vertex_rows: int) -> State:
        zeros = self.weight.new_zeros((1, vertex_rows, self.weight.shape[1]))
        return (zeros, zeros.clone())

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        ax = view.aggregate(x)
        y = view.to_vertex(torch.cat([ax, ax @ self.weight], dim=-1))
        if y.shape[0] == 0 or y.shape[1] == 0:
            z = y.new_zeros((*y.shape[:2], self.weight.shape[1])) + 0 * y.sum()
            return view.to_time(z), state
        z, (h, c) = self.lstm(y, state)
        return view.to_time(z), (h, c)


class DynamicGNN(nn.Module):
    """Two dynamic layers (ReLU between them) and the link scorer of ESDG §6.4."""

    def __init__(self, layers: list[nn.Module], embedding: int):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.scorer = nn.Linear(2 * embedding, 1)  # score(u, v) = w · [h_u, h_v] + b

    def initial_state(self, vertex_rows: int) -> list[State]:
        return [layer.initial_state(vertex_rows) for layer in self.layers]

    def forward_block(self, view: BlockView, state: list[State]) -> tuple[torch.Tensor, list[State]]:
        """One block: returns per-vertex scorer halves [local steps, rows, 2] and the next state.

        ``halves[..., 0]`` is w_u · h and ``halves[..., 1]`` is w_v · h, so a pair's logit is
        ``halves[t, u, 0] + halves[t, v, 1] + b`` — the concatenation + linear of ESDG §6.4,
        computed once per vertex instead of once per pair.
        """
        x, new_state = None, []
        for i, layer in enumerate(self.layers):
            x, s = layer.run_block(x, state[i], view)
            new_state.append(s)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        halves = x @ self.scorer.weight.view(2, -1).t()
        return halves, new_state

    def feature_widths(self) -> list[tuple[int, int]]:
        """Per layer, the widths moved to and from the vertex layout (0: none moved)."""
        return [layer.temporal_widths for layer in self.layers]


def _sizes(in_features: int, hidden: int) -> list[tuple[int, int]]:
    return [(in_features, hidden), (hidden, hidden)]


@register_model("tmgcn", family="discrete", summary="TM-GCN: GCN + M-transform over the last w steps")
def tmgcn(in_features: int = 2, hidden: int = 6, window: int = 3) -> DynamicGNN:
    return DynamicGNN([TMGCNLayer(i, o, window) for i, o in _sizes(in_features, hidden)], hidden)


@register_model("evolvegcn-o", family="discrete", summary="EvolveGCN-O: GCN weights evolved by an LSTM")
def evolvegcn_o(in_features: int = 2, hidden: int = 6, window: int = 3) -> DynamicGNN:
    return DynamicGNN([EvolveGCNOLayer(i, o) for i, o in _sizes(in_features, hidden)], hidden)


@register_model("cdgcn", family="discrete", summary="CD-GCN: skip-concatenated GCN + per-vertex LSTM")
def cdgcn(in_features: int = 2, hidden: int = 6, window: int = 3) -> DynamicGNN:
    return DynamicGNN([CDGCNLayer(i, o) for i, o in _sizes(in_features, hidden)], hidden)
