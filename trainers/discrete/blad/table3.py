"""BLAD Table 3 (Fu et al., SC'23, §5.3): communication per training pass for vertex, snapshot and
snapshot-group partitioning, as printed and instantiated for what the harness moves.

See docs/blad.md (section "Communication (Table 3)").
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
