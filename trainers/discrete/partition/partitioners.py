"""Vertex partitioners for the `vertex` scheme: owner rank per vertex, the same for all snapshots.

* ``hypergraph``: Mt-KaHyPar on the column-net hypergraph, minimising connectivity-1 (= halo rows
  sent, ESDG §4.1), with its DETERMINISTIC preset: the partition depends only on the input and the
  seed, not on thread count or scheduling (measured: its DEFAULT preset gives a different result
  on each call even with one thread and a fixed seed). Seeds act by relabelling the vertices.
* ``metis``: METIS k-way edge cut on the symmetrised, time-aggregated graph (edge weight = number
  of (snapshot, direction) occurrences); a proxy for the volume, deterministic given the seed.
* ``range``: contiguous id blocks of equal total vertex weight (the baseline).
* ``auto``: the best one installed, in that order, logging a warning when it falls back; the result
  records what was asked and whether it fell back (``VertexPartition.fallback``), and a record whose
  ``auto`` fell back is not ranked officially (dgbench/leaderboard/fallbacks.py).

All balance the vertex weights of :func:`dgbench.trainers.discrete.partition.edges.vertex_weights` within
``imbalance`` (max block ≤ (1 + imbalance) · ceil(total / k); METIS only approximately).

Cost (benchmarks/test_partition_bench.py, esdg-random N=4096, T=16, 8 parts, one thread): the
hypergraph run takes ~30 CPU seconds for 13% fewer halo rows than range (METIS: 0.2 s, 8% fewer).
Its DEFAULT preset is ~3x faster but not reproducible within a process, hence DETERMINISTIC; the
result is the same for any ``threads`` (checked for 1 and 2), so every rank may compute it alike.
"""
from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.partition.edges import (EdgeSource, SnapshotEdges, StreamedEdges, as_snapshot_edges,
                                                      block_imbalance, vertex_weights)
from dgbench.trainers.discrete.partition.halo import halo_rows
from dgbench.trainers.discrete.partition.hypergraph import ColumnNetHypergraph, column_net_hypergraph

log = logging.getLogger(__name__)

METHODS = ("auto", "hypergraph", "metis", "range")
_MODULE_OF = {"hypergraph": "mtkahypar", "metis": "pymetis"}
_INSTALL_HINT = "pip install 'dgbench[partition]' (mtkahypar, pymetis)"
# Mt-KaHyPar and METIS take 32-bit weights; larger totals are scaled down (balance is relative).
_MAX_TOTAL_WEIGHT = 2**30


@dataclass(frozen=True)
class VertexPartition:
    """A partition and how it was made.

    ``connectivity`` is Σ over column nets of weight·(λ-1): the halo rows sent per aggregation over
    all snapshots (times the feature width = floats); ``reported_connectivity`` is the partitioner's
    own km1 figure when it gives one (equal to ``connectivity`` by construction).
    """

    owner: np.ndarray
    method: str
    connectivity: int
    reported_connectivity: int | None
    imbalance: float
    seconds: float
    requested: str = "auto"  # the method asked for (``method`` is the one that ran)

    @property
    def fallback(self) -> bool:
        """``auto`` ran something other than the hypergraph partitioner (not installed here)."""
        return self.requested == "auto" and self.method != "hypergraph"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def available_methods() -> list[str]:
    """The concrete methods whose library is installed here, best first (``range`` always is)."""
    return [m for m in ("hypergraph", "metis") if _installed(_MODULE_OF[m])] + ["range"]


def resolve_method(method: str) -> str:
    """The concrete method ``method`` runs as (``auto`` → best installed, with a warning on fallback)."""
    if method not in METHODS:
        raise DgbenchError(f"unknown partitioning method '{method}' (choose from {', '.join(METHODS)})")
    available = available_methods()
    if method == "auto":
        if available[0] != "hypergraph":
            log.warning("mtkahypar is not installed: vertex partitioning falls back to '%s' (%s)",
                        available[0], _INSTALL_HINT)
        return available[0]
    if method not in available:
        raise DgbenchError(f"partitioning method '{method}' needs {_MODULE_OF[method]}: {_INSTALL_HINT}")
    return method


def partition_vertices(source: EdgeSource | StreamedEdges, num_parts: int, method: str = "auto", seed: int = 0,
                       imbalance: float = 0.03, *, num_vertices: int | None = None,
                       threads: int = 1) -> np.ndarray:
    """Owner rank (int64, 0..num_parts-1) of every vertex; see :func:`partition_vertices_detailed`."""
    return partition_vertices_detailed(source, num_parts, method, seed, imbalance,
                                       num_vertices=num_vertices, threads=threads).owner


def partition_vertices_detailed(source: EdgeSource | StreamedEdges, num_parts: int, method: str = "auto",
                                seed: int = 0, imbalance: float = 0.03, *, num_vertices: int | None = None,
                                threads: int = 1) -> VertexPartition:
    """Partition the vertices of all snapshots into ``num_parts`` blocks (deterministic given seed).

    ``threads`` only affects Mt-KaHyPar's speed (its first use in a process fixes the count). Only the
    hypergraph partitioner builds the column-net hypergraph; the others count the connectivity one step at a
    time (the same Σ w·(λ-1)), so a :class:`StreamedEdges` source is never held whole except by METIS, which
    takes the whole graph.
    """
    edges = source if isinstance(source, StreamedEdges) else as_snapshot_edges(source, num_vertices)
    _check_arguments(edges, num_parts, imbalance)
    concrete = resolve_method(method)
    if isinstance(edges, StreamedEdges) and concrete == "metis" and num_parts > 1:
        edges = edges.materialised()  # METIS takes the whole graph: one pass, then every step at once
    weights = vertex_weights(edges)
    hypergraph = column_net_hypergraph(edges) if concrete == "hypergraph" and num_parts > 1 else None
    started = time.perf_counter()
    reported = None
    if num_parts == 1:
        owner = np.zeros(edges.num_vertices, dtype=np.int64)
    elif hypergraph is not None and hypergraph.num_nets:
        owner, reported = _mtkahypar_partition(hypergraph, weights, num_parts, seed, imbalance, threads)
    elif concrete == "metis":
        assert isinstance(edges, SnapshotEdges)
        owner = _metis_partition(edges, weights, num_parts, seed, imbalance)
    else:  # range, or a graph without a single cross-vertex edge, where every balanced split costs 0
        owner = range_partition(weights, num_parts)
    seconds = time.perf_counter() - started
    return VertexPartition(owner, concrete, _connectivity(edges, hypergraph, owner, num_parts), reported,
                           block_imbalance(owner, weights, num_parts), seconds, requested=method)


def _connectivity(edges: SnapshotEdges | StreamedEdges, hypergraph: ColumnNetHypergraph | None, owner: np.ndarray,
                  num_parts: int) -> int:
    """Σ over nets of w·(λ-1): from the hypergraph when one was built, else summed step by step (one net per
    (step, source), merged or not: the same sum)."""
    if hypergraph is not None:
        return hypergraph.connectivity(owner)
    if num_parts == 1:
        return 0
    return sum(halo_rows(src, dst, owner) for src, dst in edges.steps())


def _check_arguments(edges: SnapshotEdges | StreamedEdges, num_parts: int, imbalance: float) -> None:
    if edges.num_snapshots == 0:
        raise DgbenchError("snapshots: no snapshots to partition")
    if not 1 <= num_parts <= edges.num_vertices:
        raise DgbenchError(f"cannot partition {edges.num_vertices} vertices into {num_parts} parts "
                           f"(need 1 <= parts <= vertices)")
    if not 0 <= imbalance < 1:
        raise DgbenchError(f"imbalance must be in [0, 1), got {imbalance}")


def range_partition(weights: np.ndarray, num_parts: int) -> np.ndarray:
    """Contiguous id blocks: each vertex goes to the block its weight midpoint falls in."""
    cumulative = np.cumsum(weights, dtype=np.float64)
    midpoints = cumulative - np.asarray(weights, dtype=np.float64) / 2
    return np.minimum((midpoints * num_parts / cumulative[-1]).astype(np.int64), num_parts - 1)


def _int32_weights(weights: np.ndarray) -> list[int]:
    total = int(np.sum(weights))
    if total > _MAX_TOTAL_WEIGHT:
        weights = np.maximum(1, np.round(weights * (_MAX_TOTAL_WEIGHT / total))).astype(np.int64)
    return np.asarray(weights, dtype=np.int64).tolist()


_mtkahypar_state: dict[str, object] = {}


def _mtkahypar(threads: int):
    """The process-wide Mt-KaHyPar initializer (its thread pool can be set up only once)."""
    import mtkahypar
    threads = max(1, threads)
    if not _mtkahypar_state:
        _mtkahypar_state.update(initializer=mtkahypar.initialize(threads, False), threads=threads)
    elif threads != _mtkahypar_state["threads"]:
        log.warning("Mt-KaHyPar already runs %d threads in this process; threads=%d is ignored "
                    "(the deterministic preset gives the same partition either way)",
                    _mtkahypar_state["threads"], threads)
    return mtkahypar, _mtkahypar_state["initializer"]


def _mtkahypar_partition(hypergraph, weights: np.ndarray, num_parts: int, seed: int, imbalance: float,
                         threads: int) -> tuple[np.ndarray, int]:
    mtkahypar, initializer = _mtkahypar(threads)
    mtkahypar.set_seed(seed)
    # The deterministic preset ignores set_seed, so the seed picks a relabelling of the vertices.
    relabel = np.random.default_rng(seed).permutation(hypergraph.num_vertices)
    relabelled_weights = np.empty_like(weights)
    relabelled_weights[relabel] = weights
    context = initializer.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
    context.set_partitioning_parameters(num_parts, imbalance, mtkahypar.Objective.KM1)
    context.logging = False
    instance = initializer.create_hypergraph(context, hypergraph.num_vertices, hypergraph.num_nets,
                                             hypergraph.net_lists(relabel),
                                             _int32_weights(relabelled_weights), _int32_weights(hypergraph.weights))
    partitioned = instance.partition(context)
    blocks = np.asarray(partitioned.get_partition(), dtype=np.int64)
    return blocks[relabel], int(partitioned.km1())


def _metis_partition(edges: SnapshotEdges, weights: np.ndarray, num_parts: int, seed: int,
                     imbalance: float) -> np.ndarray:
    if not edges.num_edges:  # no edge at all: every balanced split costs 0
        return range_partition(weights, num_parts)
    import pymetis
    n = edges.num_vertices
    src, dst = np.concatenate(edges.src), np.concatenate(edges.dst)
    off_diagonal = src != dst
    src, dst = src[off_diagonal], dst[off_diagonal]
    pairs, counts = np.unique(np.concatenate([src * n + dst, dst * n + src]), return_counts=True)
    row, column = np.divmod(pairs, n)
    xadj = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=n))])
    options = pymetis.Options(seed=seed, ufactor=max(1, int(round(imbalance * 1000))))
    result = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj.tolist(), column.tolist()),
                                vweights=_int32_weights(weights), eweights=_int32_weights(counts),
                                options=options)
    return np.asarray(result[1], dtype=np.int64)
