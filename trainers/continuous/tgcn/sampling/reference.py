"""Pure-Python reference of the sampler kernels (sis_kernels.cpp), operation for operation.

Given the same uniforms it returns the same indices and the same element-touch counts as the compiled
kernels (tests/test_sis.py checks it), so it is both the readable statement of the algorithms and the
fallback when no compiler is available. Independent problems of one size run side by side (numpy over
a leading "row" axis), which keeps the statistical tests fast; every row follows its own scalar program.

* :class:`SumTree` — Alg. 3 (Build / Search / Modify) as an implicit array: root 1, children 2i and
  2i+1, leaves cap..2cap-1. Fixes to the printed algorithm (§3): Modify's leaf case returns (the printed
  one falls through and overwrites the leaf with the sum of its non-existent children); Build's internal
  case returns its node; the draw is g in [0, S) (integer g = floor(u S) for integer weights) and the
  descent goes right iff g >= left.sum (the printed ``>`` returns a zero-weight leftmost leaf for g = 0
  and shifts every integer boundary by one), never entering an empty subtree, so rounding in
  g - left.sum cannot reach a zero-weight leaf.
* :func:`sample_wor` — Sample(V, n) of Alg. 4 without replacement by SIS, ITS-reject (the paper's §2.4
  ITS: redraw while the item is already selected), ITS-rebuild (the CDF recomputed over the unselected
  items before every draw) and BRS (C-SAW's bipartite region search, Alg. 2; see :func:`_brs_rows`).
* :func:`frontier_sample` — Alg. 5 (SIS) and the frontier CDF rebuilt per step (BRS's subgraph form).
* :func:`multilayer_sample` — Alg. 4's Sample_batch, node-wise or layer-wise.
"""
from __future__ import annotations

import math

import numpy as np

SIS, ITS_REJECT, ITS_REBUILD, BRS = 0, 1, 2, 3
METHODS = {"sis": SIS, "its-reject": ITS_REJECT, "its-rebuild": ITS_REBUILD, "brs": BRS}
GAMMA = np.uint64(0x9E3779B97F4A7C15)


def mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic, as in C++)."""
    z = np.asarray(z, dtype=np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class Uniforms:
    """One stream of uniforms in [0, 1) per row: a row of ``buffer`` (common random numbers) or splitmix64
    started at mix64(seed + stream + GAMMA); ``exhausted`` marks rows that read past their buffer."""

    def __init__(self, rows: int, buffer: np.ndarray | None = None, seed: int = 0, streams: np.ndarray | None = None):
        self.exhausted = np.zeros(rows, dtype=bool)
        self.buffer = None if buffer is None else np.asarray(buffer, dtype=np.float64).reshape(rows, -1)
        self.pos = np.zeros(rows, dtype=np.int64)
        if self.buffer is None:
            streams = np.arange(rows, dtype=np.uint64) if streams is None else np.asarray(streams, dtype=np.uint64)
            with np.errstate(over="ignore"):
                self.state = mix64(np.uint64(seed % 2**64) + streams + GAMMA)

    def next(self, rows: np.ndarray) -> np.ndarray:
        if self.buffer is None:
            with np.errstate(over="ignore"):
                self.state[rows] += GAMMA
                return (mix64(self.state[rows]) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        pos = self.pos[rows]
        inside = pos < self.buffer.shape[1]
        self.exhausted[rows[~inside]] = True
        values = np.where(inside, self.buffer[rows, np.minimum(pos, self.buffer.shape[1] - 1)], 0.0)
        self.pos[rows] = pos + inside
        return values


def draw(u: np.ndarray, total: np.ndarray, integer: bool) -> np.ndarray:
    """g in [0, total): floor(u total) for integer weights, else u total (kept below total)."""
    g = u * total
    if integer:
        return np.minimum(np.floor(g), total - 1)
    return np.where(g >= total, np.nextafter(total, 0.0), g)


class SumTree:
    """``rows`` independent sum trees over ``weights`` (rows x n) of Alg. 3; touches are added to ``touches``."""

    def __init__(self, weights: np.ndarray, touches: np.ndarray):
        rows, n = weights.shape
        self.cap, self.depth = 1, 0
        while self.cap < n:
            self.cap, self.depth = 2 * self.cap, self.depth + 1
        self.tree = np.zeros((rows, 2 * self.cap))
        self.tree[:, self.cap:self.cap + n] = weights
        for level in range(self.depth - 1, -1, -1):
            a, b = 1 << level, 2 << level
            self.tree[:, a:b] = self.tree[:, 2 * a:2 * b:2] + self.tree[:, 2 * a + 1:2 * b:2]
        touches += 2 * n + 3 * (self.cap - 1)

    def total(self, rows: np.ndarray) -> np.ndarray:
        return self.tree[rows, 1]

    def search(self, rows: np.ndarray, g: np.ndarray, touches: np.ndarray) -> np.ndarray:
        node = np.ones(len(rows), dtype=np.int64)
        g = g.copy()
        for _ in range(self.depth):
            left, right = self.tree[rows, 2 * node], self.tree[rows, 2 * node + 1]
            go_right = ((g >= left) & (right > 0)) | (left <= 0)
            g = np.where(go_right, g - left, g)
            node = 2 * node + go_right
        touches[rows] += 2 * self.depth
        return node - self.cap

    def modify(self, rows: np.ndarray, pos: np.ndarray, value: np.ndarray | float, touches: np.ndarray) -> None:
        node = self.cap + pos
        self.tree[rows, node] = value
        for _ in range(self.depth):
            node = node // 2
            self.tree[rows, node] = self.tree[rows, 2 * node] + self.tree[rows, 2 * node + 1]
        touches[rows] += 1 + 3 * self.depth


def upper_bound(cdf: np.ndarray, rows: np.ndarray, a: np.ndarray, b: np.ndarray, g: np.ndarray,
                touches: np.ndarray) -> np.ndarray:
    """Per row: first i in [a, b) with cdf[row, i] > g; if none (rounding only), the last positive weight
    in [a, b), or -1 if there is none."""
    lo, hi = np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)
    while True:
        active = np.flatnonzero(lo < hi)
        if len(active) == 0:
            break
        mid = (lo[active] + hi[active]) >> 1
        touches[rows[active]] += 1
        above = cdf[rows[active], mid] > g[active]
        hi[active[above]] = mid[above]
        lo[active[~above]] = mid[~above] + 1
    for k in np.flatnonzero(lo >= b):
        row, found = rows[k], -1
        for i in range(b[k] - 1, a[k] - 1, -1):
            touches[row] += 2
            if cdf[row, i] > (cdf[row, i - 1] if i > 0 else 0.0):
                found = i
                break
        lo[k] = found
    return lo


def prefix_cdf(weights: np.ndarray, touches: np.ndarray, rows: np.ndarray) -> np.ndarray:
    touches[rows] += 2 * weights.shape[1]
    return np.cumsum(weights, axis=1)  # sequential, as the C++ running sum


def sample_wor(method: int, weights: np.ndarray, draws: np.ndarray, integer: bool, uniforms: Uniforms,
               tree_class: type[SumTree] = SumTree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sample(V, n) without replacement for every row of ``weights`` (rows x n): (indices rows x max(draws),
    -1 padded; touches per row; ok per row, False where the row's uniforms ran out)."""
    rows, n = weights.shape
    draws = np.broadcast_to(np.asarray(draws, dtype=np.int64), (rows,))
    out = np.full((rows, int(draws.max(initial=0))), -1, dtype=np.int64)
    touches = np.zeros(rows, dtype=np.int64)
    if method == SIS:
        _sis_rows(weights, draws, integer, uniforms, tree_class, out, touches)
    elif method == ITS_REBUILD:
        _its_rebuild_rows(weights, draws, integer, uniforms, out, touches)
    else:
        _cdf_rows(method, weights, draws, integer, uniforms, out, touches)
    return out, touches, ~uniforms.exhausted


def _sis_rows(weights, draws, integer, uniforms, tree_class, out, touches) -> None:
    tree = tree_class(weights, touches)
    live = np.ones(len(weights), dtype=bool)
    for j in range(out.shape[1]):
        rows = np.flatnonzero(live & (draws > j) & ~uniforms.exhausted)
        total = tree.total(rows)
        touches[rows] += 1
        live[rows[total <= 0]] = False
        rows, total = rows[total > 0], total[total > 0]
        g = draw(uniforms.next(rows), total, integer)
        rows, g = rows[~uniforms.exhausted[rows]], g[~uniforms.exhausted[rows]]
        leaf = tree.search(rows, g, touches)
        out[rows, j] = leaf
        tree.modify(rows, leaf, 0.0, touches)  # without replacement: "subtract Weight(e_x)"


def _its_rebuild_rows(weights, draws, integer, uniforms, out, touches) -> None:
    n = weights.shape[1]
    current = weights.astype(np.float64).copy()
    touches += 2 * n
    live = np.ones(len(weights), dtype=bool)
    for j in range(out.shape[1]):
        rows = np.flatnonzero(live & (draws > j) & ~uniforms.exhausted)
        cdf = prefix_cdf(current[rows], touches, rows)
        total = cdf[:, -1] if n else np.zeros(len(rows))
        live[rows[total <= 0]] = False
        keep = total > 0
        rows, cdf, total = rows[keep], cdf[keep], total[keep]
        g = draw(uniforms.next(rows), total, integer)
        ok = ~uniforms.exhausted[rows]
        rows, cdf, g = rows[ok], cdf[ok], g[ok]
        local = np.arange(len(rows))
        i = upper_bound(cdf, local, np.zeros(len(rows), np.int64), np.full(len(rows), n), g, _Offset(touches, rows))
        out[rows, j] = i
        current[rows, i] = 0.0
        touches[rows] += 1


def _cdf_rows(method, weights, draws, integer, uniforms, out, touches) -> None:
    """ITS-reject and BRS: one CDF over all weights, a selection flag per item."""
    rows_all, n = weights.shape
    all_rows = np.arange(rows_all)
    cdf = prefix_cdf(weights.astype(np.float64), touches, all_rows)
    total = cdf[:, -1] if n else np.zeros(rows_all)
    need = np.minimum(draws, (weights > 0).sum(axis=1))
    selected = np.zeros((rows_all, n), dtype=bool)
    got = np.zeros(rows_all, dtype=np.int64)
    zeros, ends = np.zeros(rows_all, np.int64), np.full(rows_all, n)
    while True:
        rows = np.flatnonzero((got < need) & ~uniforms.exhausted)
        if len(rows) == 0:
            return
        g = draw(uniforms.next(rows), total[rows], integer)
        rows, g = rows[~uniforms.exhausted[rows]], g[~uniforms.exhausted[rows]]
        i = upper_bound(cdf, rows, zeros[rows], ends[rows], g, touches)
        touches[rows] += 1
        if method == BRS:
            rows, i = _brs_rows(cdf, total, selected, rows, i, integer, uniforms, touches)
        else:
            fresh = ~selected[rows, i]  # ITS (§2.4): already selected, draw again
            rows, i = rows[fresh], i[fresh]
        selected[rows, i] = True
        touches[rows] += 1
        out[rows, got[rows]] = i
        got[rows] += 1


def _brs_rows(cdf, total, selected, rows, i, integer, uniforms, touches):
    """Alg. 2 on a collision with the selected item i whose CDF region is [l, h): a *fresh* r uniform on
    [0, S - (h - l)) (the OCR'd Alg. 2 rescales the colliding r itself, which keeps it inside a band of
    width (h - l)(1 - (h - l)) and does not give the without-replacement law); r < l searches (0, l),
    otherwise r + (h - l) searches (h, S). Landing on another selected item repeats the step around that
    item: each step's accepted item is then distributed as w_i / (sum of unselected w)."""
    done_rows, done_i = [], []
    while len(rows):
        hit = selected[rows, i]
        done_rows.append(rows[~hit])
        done_i.append(i[~hit])
        rows, i = rows[hit], i[hit]
        if len(rows) == 0:
            break
        lo = np.where(i > 0, cdf[rows, np.maximum(i - 1, 0)], 0.0)
        hi = cdf[rows, i]
        touches[rows] += 2
        r = draw(uniforms.next(rows), total[rows] - (hi - lo), integer)
        ok = ~uniforms.exhausted[rows]
        rows, i, lo, hi, r = rows[ok], i[ok], lo[ok], hi[ok], r[ok]
        left = r < lo
        n = cdf.shape[1]
        searched = left | (i + 1 < n)  # else (rounding only) draw again around the same item
        a = np.where(left, 0, i + 1)[searched]
        b = np.where(left, i, n)[searched]
        target = np.where(left, r, r + (hi - lo))[searched]
        j = upper_bound(cdf, rows[searched], a, b, target, touches)
        i = i.copy()
        i[np.flatnonzero(searched)[j >= 0]] = j[j >= 0]
        touches[rows] += 1
    return np.concatenate(done_rows), np.concatenate(done_i)


class _Offset:
    """touches[rows[k]] viewed as an array indexed by k (for helpers that work on a subset of rows)."""

    def __init__(self, touches: np.ndarray, rows: np.ndarray):
        self.touches, self.rows = touches, rows

    def __getitem__(self, k):
        return self.touches[self.rows[k]]

    def __setitem__(self, k, value):
        self.touches[self.rows[k]] = value


def frontier_sample(method: int, indptr: np.ndarray, indices: np.ndarray, frontiers: np.ndarray, steps: int,
                    uniforms: Uniforms, tree_class: type[SumTree] = SumTree
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Alg. 5 for every row of ``frontiers`` (reps x m): (slots, picked vertices (reps x steps, -1 after a
    stop), touches, ok). Two uniforms per step: the slot (integer draw over the degrees), the neighbour."""
    reps, m = frontiers.shape
    fs = frontiers.astype(np.int64).copy()
    weights = (indptr[fs + 1] - indptr[fs]).astype(np.float64)
    touches = np.full(reps, 3 * m, dtype=np.int64)
    tree = tree_class(weights, touches) if method == SIS else None
    slots = np.full((reps, steps), -1, dtype=np.int64)
    picked = np.full((reps, steps), -1, dtype=np.int64)
    live = np.ones(reps, dtype=bool)
    for k in range(steps):
        rows = np.flatnonzero(live & ~uniforms.exhausted)
        if method == SIS:
            total = tree.total(rows)
            touches[rows] += 1
        else:
            cdf = prefix_cdf(weights[rows], touches, rows)
            total = cdf[:, -1] if m else np.zeros(len(rows))
        live[rows[total <= 0]] = False
        keep = total > 0
        rows, total = rows[keep], total[keep]
        g = draw(uniforms.next(rows), total, True)
        if method == SIS:
            slot = tree.search(rows, g, touches)
        else:
            local = np.arange(len(rows))
            slot = upper_bound(cdf[keep], local, np.zeros(len(rows), np.int64), np.full(len(rows), m), g,
                               _Offset(touches, rows))
        v = fs[rows, slot]
        degree = indptr[v + 1] - indptr[v]
        x = np.floor(uniforms.next(rows) * degree.astype(np.float64)).astype(np.int64)
        ok = ~uniforms.exhausted[rows]
        rows, slot, v, degree, x = rows[ok], slot[ok], v[ok], degree[ok], x[ok]
        nxt = indices[indptr[v] + np.minimum(x, degree - 1)]
        nxt_degree = (indptr[nxt + 1] - indptr[nxt]).astype(np.float64)
        touches[rows] += 6
        slots[rows, k], picked[rows, k] = slot, v
        fs[rows, slot] = nxt
        weights[rows, slot] = nxt_degree
        if method == SIS:
            tree.modify(rows, slot, nxt_degree, touches)
    return slots, picked, touches, ~uniforms.exhausted


def multilayer_sample(method: int, layerwise: bool, indptr: np.ndarray, indices: np.ndarray, roots: np.ndarray,
                      batch: int, depth: int, fraction: float, seed: int) -> tuple[np.ndarray, int, int]:
    """Alg. 4's Sample_batch (see sis_multilayer in the C++ file): (layer sizes summed over roots or
    batches, order-free checksum, touches). Scalar loops: the reference, and the fallback."""
    counts = np.zeros(depth, dtype=np.int64)
    checksum, touches = 0, 0
    groups = -(-len(roots) // batch) if layerwise else len(roots)
    for group in range(groups):
        u = Uniforms(1, seed=seed, streams=np.array([group], dtype=np.uint64))
        members = roots[group * batch:(group + 1) * batch] if layerwise else roots[group:group + 1]
        frontier = list(dict.fromkeys(int(v) for v in members))
        for layer in range(depth):
            nxt: dict[int, None] = {}
            if not layerwise:
                for v in frontier:
                    neighbours = indices[indptr[v]:indptr[v + 1]]
                    picks, t = _single(method, len(neighbours), math.ceil(fraction * len(neighbours)), u)
                    touches += t
                    nxt.update((int(neighbours[p]), None) for p in picks)
            else:
                pool = list(dict.fromkeys(int(x) for v in frontier for x in indices[indptr[v]:indptr[v + 1]]))
                picks, t = _single(method, len(pool), math.ceil(fraction * len(pool)), u)
                touches += t
                nxt.update((pool[p], None) for p in picks)
            frontier = list(nxt)
            counts[layer] += len(frontier)
            with np.errstate(over="ignore"):
                keys = (np.array(frontier, dtype=np.uint64) * np.uint64(1000003) + np.uint64(layer * 7919)
                        + np.uint64(group * 104729))
                checksum = (checksum + int(mix64(keys).sum(dtype=np.uint64))) % 2**64
    return counts, checksum, touches


def _single(method: int, size: int, draws: int, u: Uniforms) -> tuple[list[int], int]:
    out, touches, _ = sample_wor(method, np.ones((1, size)), np.array([draws]), True, u)
    return [int(p) for p in out[0] if p >= 0], int(touches[0])
