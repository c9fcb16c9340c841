"""The column-net hypergraph of a dynamic graph, whose connectivity-1 metric is the halo volume.

ESDG §4.1 (vertex partitioning): a vertex owns its rows in every snapshot, and rank p computes
``Y_t[v] = sum_u Ã_t[v, u] X_t[u]`` for its own v, so it needs every ``X_t[u]`` with an edge
``u -> v`` into one of its vertices. One net per (t, u) holds u and every v that reads ``X_t[u]``
(the column-net model of Çatalyürek & Aykanat for row-wise SpMV); its λ - 1 (blocks it spans,
less one) is the number of ranks u's owner must send ``X_t[u]`` to. Nets of one pin never cost
anything and are dropped; identical nets (e.g. an edge that persists over snapshots) are merged
into one net weighted by its multiplicity, which keeps Σ w·(λ-1) unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgbench.trainers.discrete.partition.edges import SnapshotEdges, StreamedEdges

# Fixed seed: the merge hash must not depend on the partitioning seed (nets are the same input).
_HASH_SEED = 0x5EED_CAFE


@dataclass(frozen=True)
class ColumnNetHypergraph:
    """Nets as CSR: pins of net i are ``pins[offsets[i]:offsets[i+1]]`` (sorted, distinct)."""

    num_vertices: int
    pins: np.ndarray
    offsets: np.ndarray
    weights: np.ndarray

    @property
    def num_nets(self) -> int:
        return len(self.weights)

    def connectivity(self, owner: np.ndarray) -> int:
        """Σ over nets of weight · (λ - 1) for the vertex→block map ``owner``."""
        if self.num_nets == 0:
            return 0
        net_of_pin = np.repeat(np.arange(self.num_nets), np.diff(self.offsets))
        num_blocks = int(owner.max()) + 1
        spanned = np.unique(net_of_pin * num_blocks + owner[self.pins]) // num_blocks
        blocks_per_net = np.bincount(spanned, minlength=self.num_nets)
        return int(np.dot(self.weights, blocks_per_net - 1))

    def net_lists(self, relabel: np.ndarray | None = None) -> list[list[int]]:
        """Nets as Python lists (the form partitioner bindings take), pins mapped through ``relabel``."""
        flat = (self.pins if relabel is None else relabel[self.pins]).tolist()
        bounds = self.offsets.tolist()
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def column_net_hypergraph(edges: SnapshotEdges | StreamedEdges) -> ColumnNetHypergraph:
    """The merged column-net hypergraph of all snapshots (see the module docstring); one step's edges at a time
    (only the nets' pins are kept)."""
    pins_per_step, sizes_per_step = zip(*(_snapshot_nets(s, d, edges.num_vertices) for s, d in edges.steps()))
    pins, sizes = np.concatenate(pins_per_step), np.concatenate(sizes_per_step)
    return _merge_identical_nets(edges.num_vertices, pins, sizes)


def _snapshot_nets(src: np.ndarray, dst: np.ndarray, num_vertices: int) -> tuple[np.ndarray, np.ndarray]:
    """Pins and sizes of the nets of one snapshot with at least two pins, ordered by source u."""
    sources = np.unique(src)
    keys = np.unique(np.concatenate([src * num_vertices + dst, sources * num_vertices + sources]))
    net_source, pins = np.divmod(keys, num_vertices)
    sizes = np.bincount(np.searchsorted(sources, net_source), minlength=len(sources))
    keep_net = sizes > 1
    return pins[np.repeat(keep_net, sizes)], sizes[keep_net]


def _merge_identical_nets(num_vertices: int, pins: np.ndarray, sizes: np.ndarray) -> ColumnNetHypergraph:
    """Group nets with the same pin set by a 128-bit set hash, verified exactly, weights = counts."""
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    if len(sizes) == 0:
        return ColumnNetHypergraph(num_vertices, pins, offsets, np.zeros(0, dtype=np.int64))
    table = np.random.default_rng(_HASH_SEED).integers(0, np.iinfo(np.uint64).max, size=(2, num_vertices),
                                                       dtype=np.uint64, endpoint=True)
    hashes = [np.add.reduceat(row[pins], offsets[:-1]) for row in table]  # wraps mod 2^64: intended
    order = np.lexsort((hashes[1], hashes[0], sizes))
    is_new = np.ones(len(order), dtype=bool)
    is_new[1:] = ((sizes[order][1:] != sizes[order][:-1]) | (hashes[0][order][1:] != hashes[0][order][:-1])
                  | (hashes[1][order][1:] != hashes[1][order][:-1]))
    group_sorted = np.cumsum(is_new) - 1
    first_of_group = order[is_new]
    group = np.empty_like(group_sorted)
    group[order] = group_sorted
    representative = first_of_group[group]
    _verify_same_pins(pins, offsets, sizes, representative)
    kept = np.sort(first_of_group)  # first-occurrence order keeps the output independent of hashing
    weights = np.bincount(representative, minlength=len(sizes))[kept]
    kept_pins = pins[np.repeat(np.isin(np.arange(len(sizes)), kept), sizes)]
    kept_offsets = np.concatenate([[0], np.cumsum(sizes[kept])]).astype(np.int64)
    return ColumnNetHypergraph(num_vertices, kept_pins, kept_offsets, weights.astype(np.int64))


def _verify_same_pins(pins: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                      representative: np.ndarray) -> None:
    net_of_pin = np.repeat(np.arange(len(sizes)), sizes)
    rank_in_net = np.arange(len(pins)) - offsets[net_of_pin]
    if not np.array_equal(pins, pins[offsets[representative[net_of_pin]] + rank_in_net]):
        raise AssertionError("128-bit net hash collision: two different nets hashed alike")
