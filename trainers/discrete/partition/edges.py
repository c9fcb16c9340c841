"""The edge input every partitioning function accepts: a snapshot store or per-snapshot (src, dst).

:func:`as_snapshot_edges` turns either form into :class:`SnapshotEdges` (validated int64 arrays);
call it once and pass the result on to avoid re-reading a store. :class:`StreamedEdges` gives the steps one at a
time instead (a rank's lazily built data: the partitioners then never hold every step's edges). Edges are directed
messages ``src -> dst``: row ``dst`` of ``Y_t = Ã_t X_t`` reads row ``src`` of ``X_t``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.store import Snapshot, SnapshotStore


@dataclass(frozen=True)
class SnapshotEdges:
    """T snapshots over N vertices: ``src[t]``, ``dst[t]`` are int64 arrays of equal length."""

    num_vertices: int
    src: tuple[np.ndarray, ...]
    dst: tuple[np.ndarray, ...]

    @property
    def num_snapshots(self) -> int:
        return len(self.src)

    @property
    def num_edges(self) -> int:
        return sum(len(s) for s in self.src)

    def steps(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(src, dst) of each snapshot in order."""
        return zip(self.src, self.dst)


@dataclass(frozen=True)
class StreamedEdges:
    """T snapshots over N vertices whose (src, dst) ``edges_of(t)`` builds on each call: every pass over
    :meth:`steps` builds them again, one step held at a time (validated as :func:`as_snapshot_edges` does)."""

    num_vertices: int
    num_snapshots: int
    edges_of: Callable[[int], tuple[np.ndarray, np.ndarray]]

    def steps(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for t in range(self.num_snapshots):
            yield _validated_step(self.edges_of(t), self.num_vertices, t, "snapshots")

    def materialised(self) -> SnapshotEdges:
        """Every step's edges at once (what a partitioner that takes the whole graph needs)."""
        src, dst = zip(*self.steps()) if self.num_snapshots else ((), ())
        return SnapshotEdges(self.num_vertices, tuple(src), tuple(dst))


EdgeSource = Union[SnapshotEdges, SnapshotStore, Sequence[Snapshot], Sequence[tuple[np.ndarray, np.ndarray]]]


def as_snapshot_edges(source: EdgeSource, num_vertices: int | None = None) -> SnapshotEdges:
    """Validated edges of ``source``; N is the store's, else ``num_vertices``, else max id + 1."""
    if isinstance(source, SnapshotEdges):
        _check_vertex_count(source.num_vertices, num_vertices)
        return source
    if isinstance(source, SnapshotStore):
        _check_vertex_count(source.num_nodes, num_vertices)
        pairs: list[tuple] = [(s.src, s.dst) for s in source.snapshots()]
        return _validated(pairs, source.num_nodes, where=str(source.path))
    pairs = [(s.src, s.dst) if isinstance(s, Snapshot) else tuple(s) for s in source]
    if num_vertices is None:
        num_vertices = 1 + max((int(np.max(a)) for pair in pairs for a in pair if len(a)), default=-1)
    return _validated(pairs, num_vertices, where="snapshots")


def _check_vertex_count(actual: int, requested: int | None) -> None:
    if requested is not None and requested != actual:
        raise DgbenchError(f"num_vertices={requested} disagrees with the edge source's {actual} vertices")


def _validated(pairs: list[tuple], num_vertices: int, where: str) -> SnapshotEdges:
    if not pairs:
        raise DgbenchError(f"{where}: no snapshots to partition")
    if num_vertices <= 0:
        raise DgbenchError(f"{where}: no vertices to partition")
    srcs, dsts = [], []
    for t, pair in enumerate(pairs):
        src, dst = _validated_step(pair, num_vertices, t, where)
        srcs.append(src)
        dsts.append(dst)
    return SnapshotEdges(int(num_vertices), tuple(srcs), tuple(dsts))


def _validated_step(pair: tuple, num_vertices: int, t: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    if len(pair) != 2:
        raise DgbenchError(f"{where}: snapshot {t} is not a (src, dst) pair")
    src, dst = (_vertex_ids(a, num_vertices, f"{where}: snapshot {t} field '{name}'")
                for a, name in zip(pair, ("src", "dst")))
    if len(src) != len(dst):
        raise DgbenchError(f"{where}: snapshot {t} has {len(src)} src but {len(dst)} dst ids")
    return src, dst


def _vertex_ids(values: np.ndarray, num_vertices: int, what: str) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim != 1 or not (np.issubdtype(values.dtype, np.integer) or values.size == 0):
        raise DgbenchError(f"{what}: expected a 1-d integer array, got {values.dtype} of shape {values.shape}")
    values = values.astype(np.int64, copy=False)
    if values.size and (values.min() < 0 or values.max() >= num_vertices):
        raise DgbenchError(f"{what}: vertex id out of range 0..{num_vertices - 1} "
                           f"(min {values.min()}, max {values.max()})")
    return values


def vertex_weights(edges: SnapshotEdges | StreamedEdges) -> np.ndarray:
    """Load per vertex: its T dense rows plus its in-edges over all snapshots (the rows it aggregates)."""
    in_degree = np.zeros(edges.num_vertices, dtype=np.int64)
    for _, dst in edges.steps():
        in_degree += np.bincount(dst, minlength=edges.num_vertices)
    return in_degree + edges.num_snapshots


def block_imbalance(owner: np.ndarray, weights: np.ndarray, num_parts: int) -> float:
    """max block weight / ceil(total / num_parts) - 1: the measure ``imbalance`` bounds (as Mt-KaHyPar)."""
    blocks = np.bincount(owner, weights=weights, minlength=num_parts)
    return float(blocks.max() / np.ceil(weights.sum() / num_parts) - 1.0)
