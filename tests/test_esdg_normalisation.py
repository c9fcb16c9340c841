"""The GCN normalisation ESDG's models use (esdg-sc21 §2, Eq. 1): Ã = D^-1/2 (A + I) D^-1/2 with
D[u, u] = 1 + deg_u, the edge (u, v) weighted 1 / sqrt((1 + deg_u)(1 + deg_v)). The paper's snapshots are
directed (§6 uses in- and out-degrees as features) and it does not say which degree D counts; dgbench
takes the in-degree (row sums of A + I, row v aggregating v's in-neighbours) on both sides, without
symmetrising (docs/discrete-schemes.md)."""
from __future__ import annotations

import numpy as np

from dgbench.models.sparse import gcn_normalize


def dense(src, dst, n, weight=None) -> np.ndarray:
    a = gcn_normalize(np.asarray(src), np.asarray(dst), weight, n)
    out = np.zeros(a.shape)
    rows = np.repeat(np.arange(n), np.diff(a.rowptr))
    out[rows, a.col] = a.val
    return out


def test_undirected_snapshots_get_eq1_weights():
    src, dst = [0, 1, 1, 2, 0, 3], [1, 0, 2, 1, 3, 0]  # undirected path 3-0-1-2, both directions stored
    got = dense(src, dst, 4)
    deg = np.array([2, 2, 1, 1])
    for u, v in zip(src, dst):
        assert np.isclose(got[v, u], 1 / np.sqrt((1 + deg[u]) * (1 + deg[v])))
    assert np.allclose(np.diag(got), 1 / (1 + deg))
    assert np.allclose(got, got.T)


def test_directed_snapshots_use_the_in_degree_on_both_sides_and_stay_directed():
    src, dst = [0, 0, 0, 1], [1, 2, 3, 2]  # 0 -> 1, 2, 3 and 1 -> 2
    got = dense(src, dst, 4)
    in_deg = np.array([0, 1, 2, 1])
    for u, v in zip(src, dst):
        assert np.isclose(got[v, u], 1 / np.sqrt((1 + in_deg[u]) * (1 + in_deg[v])))
        assert got[u, v] == 0  # no reverse edge is added
    out_or_total = np.array([3, 1, 0, 0]) + in_deg  # the total degree would give vertex 0 weight 1/sqrt(4 * 2)
    assert not np.isclose(got[1, 0], 1 / np.sqrt((1 + out_or_total[0]) * (1 + out_or_total[1])))
    assert np.allclose(got.sum(axis=1)[[0]], 1.0)  # a vertex with no in-edges keeps its own row: 1 / (1 + 0)
