"""One interface over the compiled kernels and the Python reference for the static samplers of T-GCN §2.3-§3.

* :func:`sample_without_replacement` — Sample(V, n) of Alg. 4 for many independent weight vectors by
  ``sis`` (sum tree, Alg. 3), ``its-reject`` (§2.4's ITS), ``its-rebuild`` (ITS recomputing its CDF over
  the unselected items before every draw) or ``brs`` (C-SAW's bipartite region search, Alg. 2).
* :func:`frontier_sample` — Alg. 5 (frontier subgraph sampling) by ``sis`` or ``brs`` (the frontier's
  CDF recomputed after every replacement: the O(m)-per-sample "re-calculates the edge selection
  probability" of §2.3).
* :func:`multilayer_sample` — Alg. 4's Sample_batch, node-wise or layer-wise, on a :class:`StaticGraph`.

Random numbers: pass ``uniforms`` (one row per problem) for common random numbers, or a ``seed`` (one
splitmix64 stream per problem, identical in both backends). Weights that are all integers (uniform and
degree weights) draw an integer g = floor(u S) in [0, S); others a real g = u S. Every result carries
element touches (reads and writes of weights, tree nodes, CDF entries and selection flags), identical in
both backends, so the algorithms can be compared without a clock.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.trainers.continuous.tgcn.sampling import native, reference
from dgbench.trainers.continuous.tgcn.sampling.native import ptr
from dgbench.trainers.continuous.tgcn.sampling.reference import METHODS

FRONTIER_METHODS = ("sis", "brs")


@dataclass
class WorSample:
    """indices: (problems, max draws), -1 where a problem had fewer positive weights than draws."""

    indices: np.ndarray
    touches: np.ndarray
    backend: str


@dataclass
class StaticGraph:
    """Undirected CSR (the paper's samplers are defined on static graphs): every event both ways, as the T-CSR
    holds them (``distinct=False``: the paper counts |E| and Avg(D) in events, Table 1), or distinct pairs
    without self-loops (``distinct=True``)."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_vertices(self) -> int:
        return len(self.indptr) - 1

    @property
    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    @classmethod
    def from_edges(cls, src: np.ndarray, dst: np.ndarray, num_vertices: int, distinct: bool = True) -> "StaticGraph":
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        keep = src != dst if distinct else np.ones(len(src), dtype=bool)
        a = np.concatenate([src[keep], dst[keep]])
        b = np.concatenate([dst[keep], src[keep]])
        keys = a * num_vertices + b
        pairs = np.unique(keys) if distinct else np.sort(keys, kind="stable")
        owner, neighbour = pairs // num_vertices, pairs % num_vertices
        indptr = np.zeros(num_vertices + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=num_vertices), out=indptr[1:])
        return cls(indptr, neighbour.astype(np.int64))


def _method(name: str, allowed) -> int:
    if name not in allowed:
        raise DgbenchError(f"unknown sampling method '{name}' (known: {', '.join(allowed)})")
    return METHODS[name]


def _backend(backend: str | None):
    if backend == "python":
        return None
    lib = native.library()
    if backend == "native" and lib is None:
        raise DgbenchError("the native sampler kernels are not available here (see DGBENCH_SIS_BACKEND)")
    return lib


@dataclass
class _Problems:
    """Weight vectors as one flat array with offsets; ``block`` is the (problems, n) array when all are one size."""

    flat: np.ndarray
    offsets: np.ndarray
    block: np.ndarray | None

    @property
    def count(self) -> int:
        return len(self.offsets) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, r: int) -> np.ndarray:
        return self.flat[self.offsets[r]:self.offsets[r + 1]]


def _as_problems(weights) -> _Problems:
    if isinstance(weights, np.ndarray) and weights.ndim == 2:
        block = np.ascontiguousarray(weights, dtype=np.float64)
        flat = block.ravel()
        offsets = np.arange(len(block) + 1, dtype=np.int64) * block.shape[1]
    else:
        rows = [np.asarray(w, dtype=np.float64).ravel() for w in weights]
        block = None
        flat = np.ascontiguousarray(np.concatenate(rows)) if rows else np.zeros(0)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(w) for w in rows], out=offsets[1:])
    bad = ~np.isfinite(flat) | (flat < 0)
    if bad.any():
        r = int(np.searchsorted(offsets, np.flatnonzero(bad)[0], side="right") - 1)
        raise DgbenchError(f"sampling weights of problem {r} must be finite and >= 0")
    return _Problems(flat, offsets, block)


def is_integer_weights(problems: _Problems) -> bool:
    """Integer draws are exact when every weight is an integer and every sum stays below 2^53."""
    if not np.all(problems.flat == np.floor(problems.flat)):
        return False
    sums = np.add.reduceat(problems.flat, problems.offsets[:-1]) if len(problems.flat) else np.zeros(0)
    return bool(np.all(sums < 2.0 ** 53))


def sample_without_replacement(weights, draws, method: str = "sis", *, uniforms: np.ndarray | None = None,
                               seed: int = 0, integer: bool | None = None, backend: str | None = None) -> WorSample:
    """Up to ``draws`` distinct indices of each weight vector, each draw proportional to the weights of the
    items not yet drawn. ``weights``: a (problems, n) array or a list of 1-D arrays; ``draws``: an int or
    one per problem; ``uniforms``: (problems, budget) in [0, 1), of which SIS and ITS-rebuild use one per
    draw and ITS-reject / BRS one per attempt (a DgbenchError says so if the budget runs out)."""
    code = _method(method, METHODS)
    problems = _as_problems(weights)
    count = problems.count
    draws = np.broadcast_to(np.asarray(draws, dtype=np.int64), (count,)).copy()
    if np.any(draws < 0):
        raise DgbenchError("draws must be >= 0")
    integer = is_integer_weights(problems) if integer is None else integer
    if uniforms is not None:
        uniforms = np.ascontiguousarray(uniforms, dtype=np.float64).reshape(count, -1)
    lib = _backend(backend)
    if lib is None:
        indices, touches = _wor_python(code, problems, draws, integer, uniforms, seed)
        return WorSample(indices, touches, "python")
    width = int(draws.max(initial=0))
    out_offsets = np.arange(count + 1, dtype=np.int64) * width
    out = np.full(count * width, -1, dtype=np.int64)
    touches = np.zeros(count, dtype=np.int64)
    budget = 0 if uniforms is None else uniforms.shape[1]
    status = lib.sis_sample_wor(code, count, ptr(problems.offsets), ptr(problems.flat, native.c_double), ptr(draws),
                                ptr(out_offsets), int(integer), ptr(uniforms, native.c_double), budget,
                                seed % 2**64, ptr(out), ptr(touches))
    if status < 0:
        raise DgbenchError(f"{method}: problem {-status - 1} used more than its {budget} uniforms")
    return WorSample(out.reshape(count, width), touches, "native")


def _wor_python(code: int, problems: _Problems, draws: np.ndarray, integer: bool,
                uniforms: np.ndarray | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    width = int(draws.max(initial=0))
    indices = np.full((problems.count, width), -1, dtype=np.int64)
    touches = np.zeros(problems.count, dtype=np.int64)
    sizes = problems.sizes
    for size in np.unique(sizes):
        rows = np.flatnonzero(sizes == size)
        if problems.block is not None:
            block = problems.block
        else:
            block = np.stack([problems.row(r) for r in rows]) if size else np.zeros((len(rows), 0))
        source = (reference.Uniforms(len(rows), buffer=uniforms[rows]) if uniforms is not None
                  else reference.Uniforms(len(rows), seed=seed, streams=rows.astype(np.uint64)))
        out, t, ok = reference.sample_wor(code, block, draws[rows], integer, source)
        if not ok.all():
            raise DgbenchError(f"problem {rows[~ok][0]} used more than its {uniforms.shape[1]} uniforms")
        indices[rows, :out.shape[1]] = out
        touches[rows] = t
    return indices, touches


@dataclass
class FrontierSample:
    """Per repetition and step: the frontier slot drawn and the vertex it held (-1 after the frontier emptied)."""

    slots: np.ndarray
    picked: np.ndarray
    touches: np.ndarray
    backend: str

    def vertex_sets(self) -> list[np.ndarray]:
        """V_sub of every repetition (Alg. 5 returns the set; the induced subgraph is built from it)."""
        return [np.unique(row[row >= 0]) for row in self.picked]


def initial_frontiers(num_vertices: int, m: int, repetitions: int, seed: int) -> np.ndarray:
    """FS of Alg. 5 line 2: m distinct vertices uniformly at random, per repetition."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.choice(num_vertices, size=m, replace=False) for _ in range(repetitions)]).astype(np.int64)


def frontier_sample(graph: StaticGraph, frontiers: np.ndarray, steps: int, method: str = "sis", *,
                    uniforms: np.ndarray | None = None, seed: int = 0, backend: str | None = None) -> FrontierSample:
    """Alg. 5 from each row of ``frontiers`` (repetitions x m) for ``steps`` steps; two uniforms per step."""
    code = _method(method, FRONTIER_METHODS)
    frontiers = np.ascontiguousarray(frontiers, dtype=np.int64)
    reps, m = frontiers.shape
    if uniforms is not None:
        uniforms = np.ascontiguousarray(uniforms, dtype=np.float64).reshape(reps, -1)
    lib = _backend(backend)
    if lib is None:
        source = (reference.Uniforms(reps, buffer=uniforms) if uniforms is not None
                  else reference.Uniforms(reps, seed=seed))
        slots, picked, touches, ok = reference.frontier_sample(code, graph.indptr, graph.indices, frontiers, steps,
                                                               source)
        if not ok.all():
            raise DgbenchError(f"frontier repetition {np.flatnonzero(~ok)[0]} ran out of uniforms")
        return FrontierSample(slots, picked, touches, "python")
    slots = np.empty(reps * steps, dtype=np.int64)
    picked = np.empty(reps * steps, dtype=np.int64)
    touches = np.zeros(reps, dtype=np.int64)
    budget = 0 if uniforms is None else uniforms.shape[1]
    status = lib.sis_frontier(code, ptr(graph.indptr), ptr(graph.indices), ptr(frontiers), reps, m, steps,
                              ptr(uniforms, native.c_double), budget, seed % 2**64, ptr(slots), ptr(picked),
                              ptr(touches))
    if status < 0:
        raise DgbenchError(f"frontier repetition {-status - 1} ran out of uniforms")
    return FrontierSample(slots.reshape(reps, steps), picked.reshape(reps, steps), touches, "native")


@dataclass
class MultilayerSample:
    layer_sizes: np.ndarray  # summed over roots (node-wise) or batches (layer-wise)
    checksum: int
    touches: int
    backend: str


def multilayer_sample(graph: StaticGraph, roots: np.ndarray, depth: int, method: str = "sis", *,
                      layerwise: bool = False, batch: int = 64, fraction: float = 0.5, seed: int = 0,
                      backend: str | None = None) -> MultilayerSample:
    """Alg. 4's Sample_batch with unit weights: node-wise (each vertex of a root's previous layer samples
    ceil(fraction * degree) of its neighbours; the layer is the set of them) or layer-wise (per batch of
    roots, one Sample over the set of the previous layer's neighbours)."""
    code = _method(method, METHODS)
    if not 0 < fraction <= 1:
        raise DgbenchError(f"fraction must be in (0, 1], got {fraction}")
    roots = np.ascontiguousarray(roots, dtype=np.int64)
    lib = _backend(backend)
    if lib is None:
        sizes, checksum, touches = reference.multilayer_sample(code, layerwise, graph.indptr, graph.indices, roots,
                                                               batch, depth, fraction, seed)
        return MultilayerSample(sizes, checksum, touches, "python")
    sizes = np.zeros(depth, dtype=np.int64)
    checksum = np.zeros(1, dtype=np.uint64)
    touches = np.zeros(1, dtype=np.int64)
    status = lib.sis_multilayer(code, int(layerwise), graph.num_vertices, ptr(graph.indptr), ptr(graph.indices),
                                ptr(roots), len(roots), batch, depth, fraction, seed % 2**64, ptr(sizes),
                                ptr(checksum, native.c_uint64), ptr(touches))
    if status < 0:
        raise DgbenchError("multilayer sampling ran out of uniforms")  # seeded streams never do
    return MultilayerSample(sizes, int(checksum[0]), int(touches[0]), "native")
