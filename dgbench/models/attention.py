"""DySAT (Sankar et al., WSDM'20) as DGC §6 trains it: per block a one-layer graph attention (GAT) on
every snapshot, then one layer of causal temporal self-attention over each vertex's earlier steps.

The GAT (Veličković et al., ICLR'18, Eq. 1-4; DySAT's structural layer) reads the raw input
features X⁰ (in/out degree), projects them, ``v_j = W x_j`` split into heads, scores each stored
entry (i, j) of Ã's pattern (in-neighbours and self) with ``LeakyReLU(a_dstᵀ v_i + a_srcᵀ v_j)``,
softmax-normalises per row and sums ``α_ij v_j`` through :meth:`BlockView.attend`, then applies
DySAT's ELU. Heads are concatenated. Choices: no structural residual (GAT; DySAT's is optional) and
no dropout, so every scheme follows ``single``'s trajectory; Ã's values are not used as DySAT's
edge weights (only which entries exist).

The temporal layer (:class:`~dgbench.models.sequence.CausalSelfAttention`) attends over *all*
earlier steps, so its carry between checkpoint blocks, or between ranks of a scheme that cuts
sequences, is every earlier step's input.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from dgbench.errors import DgbenchError
from dgbench.models.contract import BlockView, State
from dgbench.models.discrete import DynamicGNN
from dgbench.models.sequence import CausalSelfAttention
from dgbench.options import Options, option
from dgbench.registry import register_model


class DySATLayer(nn.Module):
    """A GAT on every local snapshot, then temporal self-attention over each vertex's sequence."""

    def __init__(self, in_features: int, out_features: int, heads: int = 1, max_steps: int = 1024):
        super().__init__()
        if out_features % heads:
            raise DgbenchError(f"DySAT: --hidden {out_features} is not a multiple of --heads {heads}")
        self.heads, self.head_width = heads, out_features // heads
        self.weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(in_features, out_features)))
        self.attention_src = nn.Parameter(nn.init.xavier_uniform_(torch.empty(heads, self.head_width)))
        self.attention_dst = nn.Parameter(nn.init.xavier_uniform_(torch.empty(heads, self.head_width)))
        self.temporal = CausalSelfAttention(out_features, heads, max_steps)
        self.temporal_widths = (out_features, out_features)

    def spatial_widths(self, first: bool) -> tuple[int, ...]:
        """One attention exchange: each neighbour's score per head and its values (H + H·F/H)."""
        return (self.heads + self.heads * self.head_width,)

    def initial_state(self, vertex_rows: int) -> State:
        return self.temporal.initial_carry(vertex_rows)

    def structural(self, x: torch.Tensor | None, view: BlockView) -> torch.Tensor:
        """The GAT layer's output [local steps, rows, out]; ``x`` None = the raw features X⁰."""
        x = view.input_features() if x is None else x
        steps, rows, _ = x.shape
        values = (x @ self.weight).view(steps, rows, self.heads, self.head_width)
        src_score = (values * self.attention_src).sum(-1)
        dst_score = (values * self.attention_dst).sum(-1)
        return F.elu(view.attend(dst_score, src_score, values)).reshape(steps, rows, self.heads * self.head_width)

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        return view.sequence(self.temporal, self.structural(x, view), state)


@dataclass(frozen=True)
class DySATOptions(Options):
    heads: int = option(1, "DySAT: attention heads of the GAT and the temporal attention (DGC does not say; 1).",
                        positive=True)
    max_steps: int = option(1024, "DySAT: rows of the learned position-embedding table (the longest sequence).",
                            positive=True)


@register_model("dysat", family="discrete", options=DySATOptions,
                summary="DySAT: GAT on every snapshot, then causal temporal self-attention (DGC §6)")
def dysat(in_features: int = 2, hidden: int = 6, window: int = 3, heads: int = 1, max_steps: int = 1024) -> DynamicGNN:
    """One DySAT block (DGC §6). ``heads``: attention heads of both layers (DGC does not say; 1);
    ``max_steps``: rows of the learned position-embedding table (longest sequence it can run)."""
    if hidden < 1 or heads < 1 or max_steps < 1:
        raise DgbenchError(f"DySAT: --hidden {hidden}, heads {heads} and max_steps {max_steps} must be >= 1")
    return DynamicGNN([DySATLayer(in_features, hidden, heads, max_steps)], hidden)
