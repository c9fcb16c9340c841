"""Persistent per-vertex sum trees for temporal SIS: the streaming case of T-GCN's sampler.

The paper rebuilds a sum tree on every Sample() call over a static neighbour set (Alg. 4 l.2). A stream
needs more: each vertex's neighbour list grows at the end, and a query at time t may only see the
events strictly before t. Our extension (not in the paper):

* one growable implicit sum tree per vertex whose leaf p is the p-th event of the vertex's time-sorted
  adjacency (its T-CSR position); appending sets one leaf, O(log d), and doubling the capacity when full
  rebuilds in O(capacity) once per doubling: amortised O(log d) per event;
* a query (vertex, k, prefix P) with P from the T-CSR history bounds computes the sum S_P of leaves [0, P)
  in O(log d), draws g in [0, S_P) and descends without entering a subtree that starts at or after P; k
  draws without replacement zero the chosen leaves and restore them afterwards (2k Modify calls);
* weights are 1 (integer draws, exact), or time decay exp(-alpha (t_q - t_e)) stored as
  exp(alpha (t_e - t_ref)): the factor in t_q is the same for every candidate and cancels when the query
  normalises. t_ref is re-based to the appended time when alpha (t - t_ref) exceeds 600 (stored weights
  stay below e^600; those older than e^-745 relative to the newest underflow to 0, i.e. probability below
  e^-600 next to the newest event). A decayed prefix whose sum underflows (below 1e-290: no event of the
  prefix within ~700/alpha of the vertex's newest appended one) is sampled exactly from weights recomputed
  relative to the prefix's newest event, in O(P).
"""
from __future__ import annotations

import math

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.trainers.continuous.tgcn.sampling import native
from dgbench.trainers.continuous.tgcn.sampling.native import ptr
from dgbench.trainers.continuous.tgcn.sampling.reference import SIS, SumTree, Uniforms, draw, sample_wor

REBASE_EXPONENT = 600.0
UNDERFLOW_SUM = 1e-290


class TemporalSumForest:
    """One growable sum tree per vertex; see the module docstring. ``backend``: None (native if it builds),
    "native" or "python"."""

    def __init__(self, num_vertices: int, alpha: float = 0.0, backend: str | None = None):
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise DgbenchError(f"time-decay rate must be finite and >= 0, got {alpha}")
        self.num_vertices, self.alpha = int(num_vertices), float(alpha)
        lib = None if backend == "python" else native.library()
        if backend == "native" and lib is None:
            raise DgbenchError("the native sampler kernels are not available here (see DGBENCH_SIS_BACKEND)")
        self._lib = lib
        self._handle = lib.sis_forest_new(self.num_vertices, self.alpha) if lib is not None else None
        self._python = None if lib is not None else _PythonForest(self.num_vertices, self.alpha)
        self.touches = 0

    @property
    def backend(self) -> str:
        return "native" if self._lib is not None else "python"

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self._lib.sis_forest_free(self._handle)
            self._handle = None

    def reset(self) -> None:
        if self._lib is not None:
            self._lib.sis_forest_reset(self._handle)
        else:
            self._python = _PythonForest(self.num_vertices, self.alpha)

    def append(self, vertex: np.ndarray, position: np.ndarray, time: np.ndarray) -> None:
        """Events (vertex, T-CSR position within the vertex, time), chronological for every vertex."""
        vertex = np.ascontiguousarray(vertex, dtype=np.int64)
        position = np.ascontiguousarray(position, dtype=np.int64)
        time = np.ascontiguousarray(time, dtype=np.float64)
        if self._lib is not None:
            self.touches += self._lib.sis_forest_append(self._handle, len(vertex), ptr(vertex), ptr(position),
                                                        ptr(time, native.c_double))
        else:
            self.touches += self._python.append(vertex, position, time)

    def sample(self, vertex: np.ndarray, prefix: np.ndarray, k: int, uniforms: np.ndarray) -> np.ndarray:
        """(Q, k) positions (-1 padded) drawn without replacement from each vertex's first ``prefix`` leaves;
        ``uniforms`` (Q, k) in [0, 1), one per draw."""
        vertex = np.ascontiguousarray(vertex, dtype=np.int64)
        prefix = np.ascontiguousarray(prefix, dtype=np.int64)
        uniforms = np.ascontiguousarray(uniforms, dtype=np.float64).reshape(len(vertex), k)
        if self._lib is not None:
            out = np.empty(len(vertex) * k, dtype=np.int64)
            status = self._lib.sis_forest_sample(self._handle, len(vertex), ptr(vertex), ptr(prefix), k,
                                                 ptr(uniforms, native.c_double), ptr(out))
            if status < 0:
                raise DgbenchError(f"query {-status - 1}: its prefix reaches events not appended yet")
            self.touches += status
            return out.reshape(len(vertex), k)
        out, touches = self._python.sample(vertex, prefix, k, uniforms)
        self.touches += touches
        return out

    def leaf(self, vertex: int, position: int) -> float:
        """Stored weight of a leaf (-1 if never appended)."""
        if self._lib is not None:
            return self._lib.sis_forest_leaf(self._handle, vertex, position)
        return self._python.leaf(vertex, position)


class _VertexTree:
    def __init__(self):
        self.cap, self.depth = 0, 0
        self.tree = np.zeros(0)
        self.times = np.zeros(0)
        self.tref: float | None = None


class _PythonForest:
    """Scalar mirror of the forest in sis_kernels.cpp (same draws, same touches)."""

    def __init__(self, num_vertices: int, alpha: float):
        self.alpha = alpha
        self.trees = [_VertexTree() for _ in range(num_vertices)]

    @staticmethod
    def _rebuild(v: _VertexTree) -> int:
        for i in range(v.cap - 1, 0, -1):
            v.tree[i] = v.tree[2 * i] + v.tree[2 * i + 1]
        return 3 * (v.cap - 1)

    def _grow(self, v: _VertexTree, need: int) -> int:
        cap, depth = max(v.cap, 1), v.depth
        while cap < need:
            cap, depth = 2 * cap, depth + 1
        tree = np.zeros(2 * cap)
        tree[cap:cap + v.cap] = v.tree[v.cap:2 * v.cap]
        touches = 2 * v.cap
        times = np.full(cap, np.nan)
        times[:v.cap] = v.times
        v.tree, v.times, v.cap, v.depth = tree, times, cap, depth
        return touches + self._rebuild(v)

    @staticmethod
    def _set(v: _VertexTree, pos: int, value: float) -> int:
        i = v.cap + pos
        v.tree[i] = value
        i //= 2
        while i >= 1:
            v.tree[i] = v.tree[2 * i] + v.tree[2 * i + 1]
            i //= 2
        return 1 + 3 * v.depth

    def append(self, vertex: np.ndarray, position: np.ndarray, time: np.ndarray) -> int:
        touches = 0
        for x, p, t in zip(vertex.tolist(), position.tolist(), time.tolist()):
            v = self.trees[x]
            if p >= v.cap:
                touches += self._grow(v, p + 1)
            weight = 1.0
            if self.alpha > 0:
                if v.tref is None:
                    v.tref = t
                exponent = self.alpha * (t - v.tref)
                if exponent > REBASE_EXPONENT:
                    v.tref = t
                    for i in np.flatnonzero(v.tree[v.cap:2 * v.cap] > 0).tolist():  # libm exp, as the C++
                        v.tree[v.cap + i] = math.exp(self.alpha * (v.times[i] - v.tref))
                    touches += 2 * v.cap + self._rebuild(v)
                    exponent = 0.0
                weight = math.exp(exponent)
            v.times[p] = t
            touches += self._set(v, p, weight)
        return touches

    @staticmethod
    def _prefix_sum(v: _VertexTree, k: int) -> tuple[float, int]:
        if k >= v.cap:
            return float(v.tree[1]), 1
        total, touches, node, lo, size = 0.0, 0, 1, 0, v.cap
        while size > 1:
            half = size >> 1
            if k >= lo + half:
                total += v.tree[2 * node]
                touches += 1
                node, lo = 2 * node + 1, lo + half
            else:
                node = 2 * node
            size = half
        if lo < k:
            total += v.tree[node]
            touches += 1
        return total, touches

    @staticmethod
    def _search_prefix(v: _VertexTree, g: float, k: int) -> tuple[int, int]:
        node, lo, size = 1, 0, v.cap
        while size > 1:
            half = size >> 1
            left, right = v.tree[2 * node], v.tree[2 * node + 1]
            right_allowed = lo + half < k and right > 0
            if right_allowed and (g >= left or left <= 0):
                g -= left
                node, lo = 2 * node + 1, lo + half
            else:
                node = 2 * node
            size = half
        touches = 2 * v.depth
        if v.tree[v.cap + lo] > 0:
            return lo, touches
        for i in range(k - 1, -1, -1):  # rounding only, as in the C++
            touches += 1
            if v.tree[v.cap + i] > 0:
                return i, touches
        return lo, touches

    def sample(self, vertex: np.ndarray, prefix: np.ndarray, k: int, uniforms: np.ndarray) -> tuple[np.ndarray, int]:
        out = np.full((len(vertex), k), -1, dtype=np.int64)
        touches = 0
        integer = not self.alpha > 0
        for q, (x, limit) in enumerate(zip(vertex.tolist(), prefix.tolist())):
            v = self.trees[x]
            if limit <= 0:
                continue
            if limit > v.cap:
                raise DgbenchError(f"query {q}: its prefix reaches events not appended yet")
            source = Uniforms(1, buffer=uniforms[q:q + 1])
            if self.alpha > 0:
                total, t = self._prefix_sum(v, limit)
                touches += t
                if total < UNDERFLOW_SUM:
                    touches += self._sample_underflow(v, limit, k, source, out[q])
                    continue
            saved = []
            for j in range(k):
                total, t = self._prefix_sum(v, limit)
                touches += t
                if total <= 0:
                    break
                g = float(draw(source.next(np.array([0])), np.array([total]), integer)[0])
                leaf, t = self._search_prefix(v, g, limit)
                touches += t
                out[q, j] = leaf
                saved.append((leaf, float(v.tree[v.cap + leaf])))
                touches += self._set(v, leaf, 0.0)
            for leaf, value in reversed(saved):
                touches += self._set(v, leaf, value)
        return out, touches

    def _sample_underflow(self, v: _VertexTree, limit: int, k: int, source: Uniforms, row: np.ndarray) -> int:
        newest = v.times[limit - 1]
        weights = np.array([0.0 if math.isnan(t) else math.exp(self.alpha * (t - newest))
                            for t in v.times[:limit].tolist()])
        picks, touches, _ = sample_wor(SIS, weights[None, :], np.array([k]), False, source, SumTree)
        row[:] = picks[0]
        return 2 * limit + int(touches[0])

    def leaf(self, vertex: int, position: int) -> float:
        v = self.trees[vertex]
        if position >= v.cap or np.isnan(v.times[position]):
            return -1.0
        return float(v.tree[v.cap + position])
