"""Halo exchange plans for vertex partitioning: which ``X_t`` rows each rank sends to whom.

Layout, for rank p and snapshot t (P ranks, vertices owned as in ``plan.owner``):

* **Own rows.** Rank p holds the rows of ``plan.owned[p]`` (its vertices, ascending global id) in
  that order: local row i is global vertex ``owned[p][i]``; ``plan.local_row[v]`` is v's row on
  its owner. The layout is the same in every snapshot (ESDG §4.1: a vertex and all its timesteps
  live on one rank).
* **Send.** ``plan.send_rows(t, p)`` are own-row indices grouped by destination rank q ascending
  (ascending global id within a group); ``plan.send_counts[t, p]`` (length P, 0 at q = p) are the
  split sizes. Send buffer = ``x_own[send_rows(t, p)]``.
* **Receive.** ``plan.recv_vertices(t, p)`` are the global ids arriving, grouped by source rank
  ascending (ascending id within a group) — the order ``all_to_all_single`` fills its output in;
  split sizes ``plan.recv_counts[t, p]`` (= ``send_counts[t, :, p]``).
* **Local index space.** ``x_local = concat(x_own, received)``: rows [0, num_own) are own rows,
  rows [num_own, num_own + num_halo) the halo rows in receive order. :func:`local_subgraph` gives
  snapshot t's edges into p's vertices with ``dst`` as own rows and ``src`` as local rows, so
  ``y_own[dst] += coef * x_local[src]`` is ``(Ã_t X_t)`` restricted to p's vertices.

Invariant: total rows sent over ranks and snapshots = :func:`connectivity_volume` = the column-net
hypergraph's Σ w·(λ-1); floats per aggregation layer = that times the feature width.

Torch sketch (the trainer's job; ``torch.distributed.nn.functional.all_to_all_single`` for autograd)::

    send = x_own[plan.send_rows(t, p)]
    recv = x_own.new_empty((int(plan.recv_counts[t, p].sum()), x_own.shape[1]))
    dist.all_to_all_single(recv, send, plan.recv_counts[t, p].tolist(), plan.send_counts[t, p].tolist())
    x_local = torch.cat([x_own, recv])
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.partition.edges import EdgeSource, SnapshotEdges, as_snapshot_edges
from dgbench.store import SnapshotStore


@dataclass(frozen=True)
class LocalSubgraph:
    """Snapshot t's edges into rank p's vertices, in p's local index space (see the module docstring)."""

    rank: int
    snapshot: int
    src: np.ndarray  # local rows in [0, num_own + num_halo)
    dst: np.ndarray  # own rows in [0, num_own)
    edge_ids: np.ndarray  # positions in snapshot t's edge arrays (to slice weights, coefficients)
    num_own: int
    num_halo: int

    @property
    def num_rows(self) -> int:
        return self.num_own + self.num_halo


@dataclass(frozen=True)
class HaloPlan:
    """Per-snapshot send/receive lists of a vertex partition; build with :func:`build_halo_plan`."""

    num_parts: int
    owner: np.ndarray
    owned: tuple[np.ndarray, ...]
    local_row: np.ndarray
    send_counts: np.ndarray  # (T, P, P): rows rank p sends rank q in snapshot t
    sent_vertices: tuple[np.ndarray, ...]  # per t: global ids sorted by (sender, receiver, id)
    received_vertices: tuple[np.ndarray, ...]  # per t: global ids sorted by (receiver, sender, id)

    @property
    def num_snapshots(self) -> int:
        return len(self.send_counts)

    @property
    def recv_counts(self) -> np.ndarray:
        """(T, P, P): rows rank p receives from rank q in snapshot t."""
        return self.send_counts.transpose(0, 2, 1)

    def send_rows(self, t: int, rank: int) -> np.ndarray:
        """Own-row indices rank sends in snapshot t, grouped by destination rank ascending."""
        start = self.send_counts[t, :rank].sum()
        return self.local_row[self.sent_vertices[t][start:start + self.send_counts[t, rank].sum()]]

    def send_rows_to(self, t: int, rank: int, peer: int) -> np.ndarray:
        """Own-row indices rank sends to ``peer`` in snapshot t."""
        start = self.send_counts[t, :rank].sum() + self.send_counts[t, rank, :peer].sum()
        return self.local_row[self.sent_vertices[t][start:start + self.send_counts[t, rank, peer]]]

    def recv_vertices(self, t: int, rank: int) -> np.ndarray:
        """Global ids rank receives in snapshot t, in arrival order (grouped by source rank)."""
        start = self.send_counts[t, :, :rank].sum()
        return self.received_vertices[t][start:start + self.send_counts[t, :, rank].sum()]

    def recv_vertices_from(self, t: int, rank: int, peer: int) -> np.ndarray:
        """Global ids rank receives from ``peer`` in snapshot t, in arrival order."""
        start = self.send_counts[t, :, :rank].sum() + self.send_counts[t, :peer, rank].sum()
        return self.received_vertices[t][start:start + self.send_counts[t, peer, rank]]

    def rows_sent(self) -> int:
        """Halo rows exchanged over all ranks and snapshots in one aggregation."""
        return int(self.send_counts.sum())

    def volume(self, feature_widths: int | Sequence[int]) -> int:
        """Floats exchanged by aggregations of the given widths (one per layer) over all snapshots."""
        widths = [feature_widths] if isinstance(feature_widths, int) else list(feature_widths)
        return self.rows_sent() * sum(widths)


def _checked_owner(owner: np.ndarray, edges: SnapshotEdges, num_parts: int) -> np.ndarray:
    owner = np.asarray(owner)
    if owner.shape != (edges.num_vertices,) or not np.issubdtype(owner.dtype, np.integer):
        raise DgbenchError(f"owner must be an integer array of shape ({edges.num_vertices},), "
                           f"got {owner.dtype} {owner.shape}")
    if owner.size and (owner.min() < 0 or owner.max() >= num_parts):
        raise DgbenchError(f"owner ranks must lie in 0..{num_parts - 1} (got {owner.min()}..{owner.max()})")
    return owner.astype(np.int64, copy=False)


def _halo_pairs(src: np.ndarray, dst: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (receiver rank, vertex) pairs of one snapshot: ranks that read a row they do not own."""
    receiver = owner[dst]
    crossing = owner[src] != receiver
    num_vertices = len(owner)
    return np.divmod(np.unique(receiver[crossing] * num_vertices + src[crossing]), num_vertices)


def _edges_and_owner(source: EdgeSource, owner: np.ndarray, num_parts: int) -> tuple[SnapshotEdges, np.ndarray]:
    """The edges (a bare snapshot list takes N = len(owner)) and the validated owner array."""
    sized = isinstance(source, (SnapshotEdges, SnapshotStore))
    edges = as_snapshot_edges(source, None if sized else len(owner))
    return edges, _checked_owner(owner, edges, num_parts)


def connectivity_volume(source: EdgeSource, owner: np.ndarray) -> int:
    """Σ over (snapshot t, vertex u) of (ranks reading ``X_t[u]`` other than u's owner) = λ - 1 summed."""
    edges, owner = _edges_and_owner(source, owner, int(np.max(owner)) + 1)
    return sum(halo_rows(s, d, owner) for s, d in edges.steps())


def halo_rows(src: np.ndarray, dst: np.ndarray, owner: np.ndarray) -> int:
    """Rows one snapshot's aggregation sends (its nets' Σ λ - 1) for the int64 vertex→rank map ``owner``."""
    return len(_halo_pairs(src, dst, owner)[1])


def build_halo_plan(source: EdgeSource, owner: np.ndarray, num_parts: int) -> HaloPlan:
    """The send/receive lists of every rank and snapshot for vertex ownership ``owner``."""
    edges, owner = _edges_and_owner(source, owner, num_parts)
    order = np.argsort(owner, kind="stable")
    owned = tuple(np.split(order, np.cumsum(np.bincount(owner, minlength=num_parts))[:-1]))
    local_row = np.empty(edges.num_vertices, dtype=np.int64)
    for vertices in owned:
        local_row[vertices] = np.arange(len(vertices))
    send_counts = np.zeros((edges.num_snapshots, num_parts, num_parts), dtype=np.int64)
    sent, received = [], []
    for t, (src, dst) in enumerate(zip(edges.src, edges.dst)):
        receiver, vertex = _halo_pairs(src, dst, owner)
        sender = owner[vertex]
        send_counts[t] = np.bincount(sender * num_parts + receiver,
                                     minlength=num_parts * num_parts).reshape(num_parts, num_parts)
        sent.append(vertex[np.lexsort((vertex, receiver, sender))])
        received.append(vertex[np.lexsort((vertex, sender, receiver))])
    return HaloPlan(num_parts, owner, owned, local_row, send_counts, tuple(sent), tuple(received))


@dataclass(frozen=True)
class RankHaloPlan:
    """One rank's share of a :class:`HaloPlan`: the lists it receives and sends, plus every rank's counts
    (``send_counts``, for the predicted volume); build with :func:`build_rank_halo_plan`, one step at a time,
    so a rank never holds every step's edges or the other ranks' lists."""

    num_parts: int
    rank: int
    owner: np.ndarray
    owned: tuple[np.ndarray, ...]
    local_row: np.ndarray
    send_counts: np.ndarray  # (T, P, P), as HaloPlan's
    incoming: tuple[tuple[np.ndarray, ...], ...]  # per t, per sender q: ids this rank receives from q, ascending
    outgoing: tuple[tuple[np.ndarray, ...], ...]  # per t, per receiver q: own ids this rank sends q, ascending

    @property
    def num_snapshots(self) -> int:
        return len(self.send_counts)

    def recv_vertices_from(self, t: int, rank: int, peer: int) -> np.ndarray:
        """:meth:`HaloPlan.recv_vertices_from` for the exchanges this rank takes part in."""
        if rank == self.rank:
            return self.incoming[t][peer]
        if peer == self.rank:
            return self.outgoing[t][rank]
        raise ValueError(f"rank {self.rank}'s plan holds no lists from rank {peer} to rank {rank}")

    def rows_sent(self) -> int:
        """Halo rows exchanged over all ranks and snapshots in one aggregation."""
        return int(self.send_counts.sum())


def build_rank_halo_plan(steps: Iterable[tuple[np.ndarray, np.ndarray]], owner: np.ndarray, num_parts: int,
                         rank: int) -> RankHaloPlan:
    """:func:`build_halo_plan`'s lists of one rank (and every rank's counts) from the snapshots' (src, dst)
    given one at a time (``owner``: every vertex's rank; its length is N)."""
    owner = np.asarray(owner).astype(np.int64, copy=False)
    owned = tuple(np.split(np.argsort(owner, kind="stable"), np.cumsum(np.bincount(owner, minlength=num_parts))[:-1]))
    local_row = np.empty(len(owner), dtype=np.int64)
    for vertices in owned:
        local_row[vertices] = np.arange(len(vertices))
    counts, incoming, outgoing = [], [], []
    for src, dst in steps:
        receiver, vertex = _halo_pairs(np.asarray(src, np.int64), np.asarray(dst, np.int64), owner)
        sender = owner[vertex]
        counts.append(np.bincount(sender * num_parts + receiver,
                                  minlength=num_parts * num_parts).reshape(num_parts, num_parts))
        mine = receiver == rank  # ascending ids: the pairs are sorted by (receiver, vertex)
        incoming.append(_grouped(vertex[mine], sender[mine], num_parts))
        mine = sender == rank
        outgoing.append(_grouped(vertex[mine], receiver[mine], num_parts))
    send_counts = np.stack(counts) if counts else np.zeros((0, num_parts, num_parts), np.int64)
    return RankHaloPlan(num_parts, rank, owner, owned, local_row, send_counts, tuple(incoming), tuple(outgoing))


def _grouped(vertex: np.ndarray, peer: np.ndarray, num_parts: int) -> tuple[np.ndarray, ...]:
    """``vertex`` (ascending) split by ``peer`` rank, ascending within each group."""
    order = np.argsort(peer, kind="stable")
    return tuple(np.split(vertex[order], np.cumsum(np.bincount(peer, minlength=num_parts))[:-1]))


def local_subgraph(source: EdgeSource, plan: HaloPlan, rank: int, t: int) -> LocalSubgraph:
    """Snapshot t's edges whose destination ``rank`` owns, remapped to its local index space.

    Pass :class:`SnapshotEdges` (from :func:`as_snapshot_edges`) to avoid re-reading a store.
    """
    edges = as_snapshot_edges(source, len(plan.owner))
    src, dst = edges.src[t], edges.dst[t]
    edge_ids = np.flatnonzero(plan.owner[dst] == rank)
    src, dst = src[edge_ids], dst[edge_ids]
    num_own = len(plan.owned[rank])
    halo = plan.recv_vertices(t, rank)
    halo_order = np.argsort(halo)
    is_own = plan.owner[src] == rank
    local_src = plan.local_row[src]
    local_src[~is_own] = num_own + halo_order[np.searchsorted(halo[halo_order], src[~is_own])]
    return LocalSubgraph(rank, t, local_src, plan.local_row[dst], edge_ids, num_own, len(halo))


def reference_exchange(plan: HaloPlan, t: int, own_rows: Sequence[np.ndarray]) -> list[np.ndarray]:
    """What ``all_to_all_single`` delivers in snapshot t, computed in one process (for testing).

    ``own_rows[p]`` is rank p's ``x_own``; returns each rank's received halo block.
    """
    ranks = range(plan.num_parts)
    outgoing = [np.split(own_rows[p][plan.send_rows(t, p)], np.cumsum(plan.send_counts[t, p])[:-1]) for p in ranks]
    return [np.concatenate([outgoing[p][q] for p in ranks]) for q in ranks]
