"""BLAD Table 3 (Fu et al., SC'23, §5.3): communication per training pass for vertex, snapshot and
snapshot-group partitioning, as printed and instantiated for what the harness moves.

Table 3 (p nodes, T snapshots per group, N_vertex vertices, N_khop k-hop neighbours, F features):

| method   | GNN param | RNN param | features          |
|----------|-----------|-----------|-------------------|
| vertex   | p·W_GNN   | p·W_RNN   | T·prob·N_khop·F   |
| snapshot | —         | p·W_RNN   | 2·N_vertex·T·F    |
| group    | p·W_GNN   | p·W_RNN   | —                 |

Instantiation (elements; every group of the epoch summed, T = that group's length):

* parameters: the harness all-reduces every parameter on every rank, so each kind moves
  p·(W_GNN + W_RNN) plus the link scorer's p·W_score (Table 3 has no scorer). The snapshot row as
  printed omits p·W_GNN although ESDG replicates the GNN weights and must reduce their gradients
  too: :func:`table3` reports the printed row and ``gnn_param_unprinted`` beside it.
* snapshot features: per temporal layer with widths (a, b) moved to and from the vertex layout, ESDG
  §4.2's re-distribution at P = 2 moves T·N/2 rows of a and of b forward and the same backward:
  N·T·(a + b), = Table 3's 2·N·T·F when a = b = F. Exact for even N; for odd N, with rank 0 holding
  (N-1)/2 rows, the harness moves (a + b)·Σ_groups (T_0 - T_1) more (T_r: the group's steps on rank r;
  -24 of 2.1 M elements on CollegeMsg weekly). For P > 2 the harness moves 4·T·N·(P-1)/P·F
  (even splits), which Table 3 does not model; ``features`` then states the printed value only.
* vertex features: prob = 1 (full-graph groups, no sampling); the harness exchanges 1-hop halos per
  GCN aggregation (ESDG §4.1) rather than a k-hop neighbourhood once, so N_khop·F becomes
  Σ_t halo_rows(t)·Σ_layers F_layer, with halo_rows(t) = Σ_u (λ_t(u) - 1) (λ: the parts holding u or
  reading it). One direction; the backward moves as much again (Table 3 counts one).
* group features: none (whole groups on one device, §5.1). The hand-over between a device's two
  processes (§5.2.1) stays inside the device and is not a Table 3 column.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

KINDS = ("vertex", "snapshot", "group")


@dataclass(frozen=True)
class Table3Row:
    """One row of Table 3, instantiated (elements per epoch, all ranks)."""

    kind: str
    ranks: int
    gnn_param: int
    rnn_param: int
    scorer_param: int  # not in Table 3: the link-prediction scorer's gradients
    gnn_param_unprinted: bool  # the printed row has no p·W_GNN (snapshot), but the harness reduces it
    features: int  # one direction (Table 3's column)

    @property
    def gradients(self) -> int:
        return self.gnn_param + self.rnn_param + self.scorer_param

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gradients": self.gradients}


def halo_rows(edges: tuple[np.ndarray, np.ndarray], owner: np.ndarray) -> int:
    """Σ_u (λ(u) - 1) of one snapshot: λ(u) = number of parts holding u or holding a vertex that
    aggregates u (edge u → v, v reads u). Table 3's N_khop for one hop of a full-graph partition."""
    src, dst = (np.asarray(a, np.int64) for a in edges)
    parts = int(owner.max()) + 1 if len(owner) else 1
    readers = np.unique(src * parts + owner[dst])  # (u, part reading u)
    u, part = np.divmod(readers, parts)
    return int(np.sum(part != owner[u]))


def table3(kind: str, *, ranks: int, w_gnn: int, w_rnn: int, w_scorer: int, group_lengths: Sequence[int],
           n_vertex: int = 0, temporal_widths: Sequence[tuple[int, int]] = (), spatial_width: int = 0,
           halo_rows_per_step: Sequence[int] | None = None, groups: Sequence[range] | None = None) -> Table3Row:
    """Table 3's row for ``kind`` (see the module for each term). ``group_lengths``: T of every group
    trained in the epoch; ``groups`` (vertex only): their steps, to sum ``halo_rows_per_step``."""
    if kind not in KINDS:
        raise ValueError(f"Table 3 has no row {kind!r}; one of {KINDS}")
    p = ranks if ranks > 1 else 0  # one rank reduces nothing
    features = 0
    if kind == "snapshot" and p:
        per_step = sum(a + b for a, b in temporal_widths) / 2  # F of 2·N·T·F (a = b = F)
        features = int(round(2 * n_vertex * sum(group_lengths) * per_step))
    elif kind == "vertex" and p:
        if halo_rows_per_step is None or groups is None:
            raise ValueError("Table 3's vertex row needs the halo rows of every step and the groups")
        features = sum(int(halo_rows_per_step[t]) for g in groups for t in g) * spatial_width
    return Table3Row(kind, ranks, p * w_gnn, p * w_rnn, p * w_scorer, kind == "snapshot", features)
