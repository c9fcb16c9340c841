"""DyGNN as T-GCN uses it (streaming T-GCN §2.2, Eq. 3-7; Ma et al., SIGIR'20): every interaction updates
the states of its two endpoints *immediately*, in stream order.

Interact (Eq. 3), S-/G-update with time-aware LSTMs (Eq. 4-5), merge (Eq. 6/7); a batch runs in
conflict-free waves, equal to one event at a time when the roots' ids are given.
See docs/tgcn-streaming.md (section "DyGNN").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dgbench.models.temporal import BatchInputs, BatchOutputs, EdgePredictor, StateLayout, TemporalModel
from dgbench.registry import register_model


@dataclass(frozen=True)
class DyGNNLayout(StateLayout):
    """[h^s | C^s | h^g | C^g | t_g | t_s]; times are -1 for a node never updated in that role."""

    def empty_rows(self, count: int) -> torch.Tensor:
        rows = torch.zeros(count, self.width)
        rows[:, 4 * self.memory_dim:] = -1.0
        return rows

    def split(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(state, t_s, no mails (R, 0, 0), no mail times (R, 0)): DyGNN has no mailbox."""
        return rows[:, :self.state_dim], rows[:, self.memory_ts_col], rows.new_zeros(len(rows), 0, 0), \
            rows.new_zeros(len(rows), 0)


class TimeAwareLSTM(nn.Module):
    """DyGNN's S-/G-update: an LSTM step whose previous cell's short-term part decays with Δt."""

    def __init__(self, dim: int):
        super().__init__()
        self.short_term = nn.Linear(dim, dim)  # W_d, b_d
        self.gates = nn.Linear(2 * dim, 4 * dim)  # input, forget, output, candidate from [e(t), h(t-)]

    def forward(self, cell: torch.Tensor, hidden: torch.Tensor, delta: torch.Tensor,
                interaction: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        short = torch.tanh(self.short_term(cell))
        discount = 1.0 / torch.log(math.e + delta)
        adjusted = cell - short + discount[:, None] * short
        i, f, o, candidate = self.gates(torch.cat([interaction, hidden], dim=1)).chunk(4, dim=1)
        new_cell = torch.sigmoid(f) * adjusted + torch.sigmoid(i) * torch.tanh(candidate)
        return new_cell, torch.sigmoid(o) * torch.tanh(new_cell)


def wave_schedule(src: np.ndarray, dst: np.ndarray, neg: np.ndarray, count: int) -> np.ndarray:
    """Wave of every event so that processing waves in order, reads before writes within a wave, equals
    processing the events one by one: an event reads (src, dst, neg) after their last write and writes
    (src, dst) no earlier than their last read."""
    last_write = np.full(count, -1, dtype=np.int64)
    last_read = np.zeros(count, dtype=np.int64)
    waves = np.empty(len(src), dtype=np.int64)
    for j, (s, d, n) in enumerate(zip(src.tolist(), dst.tolist(), neg.tolist())):
        wave = max(last_write[s], last_write[d], last_write[n]) + 1
        wave = max(wave, last_read[s], last_read[d])
        waves[j] = wave
        for x in (s, d, n):
            last_read[x] = max(last_read[x], wave)
        last_write[s] = last_write[d] = wave
    return waves


class DyGNN(TemporalModel):
    """See the module docstring. In the continuous loop a vertex's view is its row and its update row the
    whole new row (no mailbox to merge)."""

    uses_neighbors = False
    batch_protocol_refusal = ("DyGNN updates an interaction's endpoints immediately, before the next interaction "
                              "reads them (T-GCN §2.2), not once per batch from batch-start state")

    def __init__(self, memory_dim: int, edge_dim: int, time_shift: float = 0.0, time_scale: float = 1.0):
        nn.Module.__init__(self)  # not TemporalModel.__init__: no mailbox updater
        d = memory_dim
        self.memory_dim, self.edge_dim = memory_dim, edge_dim
        self.time_shift, self.time_scale = float(time_shift), float(time_scale)
        self.layout = DyGNNLayout(memory_dim=d, state_dim=4 * d + 1, mail_slots=0, mail_dim=0)
        self.interact_src = nn.Linear(d, d)  # W1, b_e
        self.interact_dst = nn.Linear(d, d, bias=False)  # W2
        self.s_update, self.g_update = TimeAwareLSTM(d), TimeAwareLSTM(d)
        self.merge_s = nn.Linear(d, d)  # W_s, B
        self.merge_g = nn.Linear(d, d, bias=False)  # W_g
        self.predictor = EdgePredictor(d)

    def updated_state(self, rows: torch.Tensor, query_t: torch.Tensor) -> torch.Tensor:
        return rows[:, :self.layout.state_dim]

    @property
    def view_width(self) -> int:
        return self.layout.width

    def node_view(self, rows: torch.Tensor, query_t: torch.Tensor) -> torch.Tensor:
        """The whole row (both roles' states and times): nothing to update before the event (no mailbox)."""
        return rows[:, :self.layout.width]

    def merge(self, h_s: torch.Tensor, h_g: torch.Tensor) -> torch.Tensor:
        return self.merge_s(h_s) + self.merge_g(h_g)

    def embed(self, inputs: BatchInputs, root_view: torch.Tensor, root_t: torch.Tensor,
              neighbor_view: torch.Tensor | None) -> torch.Tensor:
        """E_v(t-) of Eq. 6/7 from each root's row (what scoring without updating needs)."""
        d = self.memory_dim
        return self.merge(root_view[:, :d], root_view[:, 2 * d:3 * d])

    def _delta(self, t: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        return torch.where(last >= 0, (t - last).clamp_min(0) / self.time_scale, torch.zeros_like(t))

    def forward(self, inputs: BatchInputs, views: torch.Tensor | None = None) -> BatchOutputs:
        """Scores and the roots' new rows (update rows = whole rows: no mailbox). ``views``: the roots'
        :meth:`node_view` (their rows) when the caller has them instead of ``inputs.root_rows``."""
        b, d = len(inputs.t), self.memory_dim
        roots = inputs.root_rows if views is None else views[:3 * b]
        root_ids = getattr(inputs, "root_ids", None)
        ids = np.arange(3 * b) if root_ids is None else np.asarray(torch.as_tensor(root_ids).cpu())
        unique, first, slot = np.unique(ids, return_index=True, return_inverse=True)
        rows = roots[torch.from_numpy(first).to(roots.device)]
        h_s, c_s, h_g, c_g = (rows[:, k * d:(k + 1) * d] for k in range(4))
        t_g, t_s = rows[:, 4 * d], rows[:, 4 * d + 1]
        src, dst, neg = slot[:b], slot[b:2 * b], slot[2 * b:]
        waves = wave_schedule(src, dst, neg, len(unique))
        device = roots.device
        order, pos_parts, neg_parts = [], [], []
        for wave in range(int(waves.max(initial=-1)) + 1):
            events = np.flatnonzero(waves == wave)
            s, g, n = (torch.from_numpy(x[events]).to(device) for x in (src, dst, neg))
            t = inputs.t[torch.from_numpy(events).to(device)]
            e_src, e_dst, e_neg = self.merge(h_s[s], h_g[s]), self.merge(h_s[g], h_g[g]), self.merge(h_s[n], h_g[n])
            pos_parts.append(self.predictor(e_src, e_dst))
            neg_parts.append(self.predictor(e_src, e_neg))
            order.append(events)
            interaction = torch.tanh(self.interact_src(e_src) + self.interact_dst(e_dst))  # Eq. 3
            new_c_s, new_h_s = self.s_update(c_s[s], h_s[s], self._delta(t, t_s[s]), interaction)  # Eq. 4
            new_c_g, new_h_g = self.g_update(c_g[g], h_g[g], self._delta(t, t_g[g]), interaction)  # Eq. 5
            h_s, c_s, t_s = h_s.index_copy(0, s, new_h_s), c_s.index_copy(0, s, new_c_s), t_s.index_copy(0, s, t)
            h_g, c_g, t_g = h_g.index_copy(0, g, new_h_g), c_g.index_copy(0, g, new_c_g), t_g.index_copy(0, g, t)
        position = torch.from_numpy(np.concatenate(order) if order else np.zeros(0, np.int64)).to(device)
        pos = inputs.t.new_zeros(b).index_copy(0, position, torch.cat(pos_parts) if pos_parts else inputs.t[:0])
        neg_logits = inputs.t.new_zeros(b).index_copy(0, position, torch.cat(neg_parts) if neg_parts else inputs.t[:0])
        final = torch.cat([h_s, c_s, h_g, c_g, t_g[:, None], t_s[:, None]], dim=1).detach()
        endpoints = torch.from_numpy(np.concatenate([src, dst])).to(device)
        return BatchOutputs(pos, neg_logits, final[endpoints])


@register_model("dygnn", family="continuous",
                summary="DyGNN (T-GCN §2.2): interact, time-aware S-/G-update LSTMs, merge; immediate updates")
def dygnn(memory_dim: int, edge_dim: int, time_shift: float = 0.0, time_scale: float = 1.0) -> DyGNN:
    """The continuous family's factory arguments; ``time_scale`` normalises Δt (time_shift is unused)."""
    return DyGNN(memory_dim, edge_dim, time_shift=time_shift, time_scale=time_scale)
