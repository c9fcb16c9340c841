"""The ``recent`` sampler with state bounded by the vertices, not the stream (docs/continuous-training.md,
section "Streams larger than memory"): TGL's most-recent strategy as PyG's ``LastNeighborLoader`` keeps it.

Each vertex keeps a ring of its last k adjacency entries (neighbour, time, event id, side, and the
event's edge features when the stream has them), updated as the planner's batches pass. The entries of
one vertex are ordered as :class:`~dgbench.trainers.continuous.sampler.TemporalSampler`'s T-CSR orders
them: by time, then source side before destination side, then event id, so a query (vertex, time)
gets exactly the T-CSR's k latest entries strictly before its time. Entries at the latest time folded
so far (a tie group) are kept apart until a later time arrives: a later query at that same time must
not see them, and must still see the k entries before them. Memory: N x k entries plus one tie group.

A batch's queries also see the batch's own earlier events (TGL's protocol queries each root at its
event time). Batches are expected in order; a batch behind the rings (a new epoch) restarts them from
the first event, and a batch ahead of them (a skipped split) folds the events between first.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from dgbench.trainers.continuous.sampler import SampledNeighbors

FOLD_EVENTS = 1 << 18  # events folded per step when the rings catch up over skipped events (~20 MB of temporaries)


@dataclass
class Entries:
    """Adjacency entries (one per event endpoint) as parallel arrays."""

    vertex: np.ndarray
    neighbor: np.ndarray
    time: np.ndarray
    event: np.ndarray
    side: np.ndarray  # 0: the vertex is the event's source, 1: its destination
    features: np.ndarray  # (n, edge_dim); edge_dim may be 0

    def __len__(self) -> int:
        return len(self.vertex)

    def take(self, index: np.ndarray) -> "Entries":
        return Entries(self.vertex[index], self.neighbor[index], self.time[index], self.event[index],
                       self.side[index], self.features[index])

    @staticmethod
    def join(parts: list["Entries"]) -> "Entries":
        return Entries(*(np.concatenate([getattr(p, name) for p in parts]) for name in
                         ("vertex", "neighbor", "time", "event", "side", "features")))

    def order(self) -> np.ndarray:
        """Positions sorted by (vertex, time, side, event): the T-CSR's order."""
        return np.lexsort((self.event, self.side, self.time, self.vertex))


class RecentRing:
    """k most recent temporal neighbours per vertex, equal to ``TemporalSampler(...).sample(..., 'recent')``."""

    def __init__(self, stream: Any, k: int, keep_features: bool = True):
        """``stream``: an :class:`~dgbench.trainers.continuous.data.EventStream` (in memory or streamed)."""
        self.stream, self.k = stream, k
        n = stream.num_nodes
        self.edge_dim = stream.edge_dim if keep_features else 0
        self.neighbor = np.zeros((n, k), dtype=np.int64)
        self.time = np.zeros((n, k), dtype=np.float64)
        self.event = np.full((n, k), -1, dtype=np.int64)
        self.side = np.zeros((n, k), dtype=np.int8)
        self.features = np.zeros((n, k, self.edge_dim), dtype=np.float32)
        self.count = np.zeros(n, dtype=np.int64)
        self._lock = threading.Lock()
        self.reset()

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.neighbor, self.time, self.event, self.side, self.features, self.count))

    def reset(self) -> None:
        self.count[:] = 0
        self.folded = 0  # events [0, folded) are in the rings or the tie group
        self.frontier = -np.inf  # the time of the tie group
        self.ties = self._empty()

    # ------------------------------------------------------------------ queries
    def sample_window(self, start: int, stop: int, nodes: np.ndarray, times: np.ndarray, k: int,
                      strategy: str = "recent", uniforms: np.ndarray | None = None) -> SampledNeighbors:
        """The k latest entries strictly before each query time, over events before ``stop`` (the batch
        [start, stop) included); then the batch is folded into the rings."""
        if strategy != "recent":
            raise ValueError(f"the bounded sampler serves --sampler recent only, not '{strategy}'")
        if k != self.k:
            raise ValueError(f"the rings hold {self.k} neighbours per vertex, {k} were asked")
        with self._lock:
            self._catch_up(start)
            batch = self._entries(start, stop)
            out = self._query(np.asarray(nodes, dtype=np.int64), np.asarray(times, dtype=np.float64), batch)
            self._fold(batch)
            self.folded = stop
        return out

    def _catch_up(self, start: int) -> None:
        if start < self.folded:
            self.reset()
        while self.folded < start:
            stop = min(start, self.folded + FOLD_EVENTS)
            self._fold(self._entries(self.folded, stop))
            self.folded = stop

    def _query(self, nodes: np.ndarray, times: np.ndarray, batch: Entries) -> SampledNeighbors:
        k = self.k
        wanted = np.unique(nodes)
        pool = Entries.join([self._ring_entries(wanted), self.ties.take(np.isin(self.ties.vertex, wanted)),
                             batch.take(np.isin(batch.vertex, wanted))])
        pool = pool.take(pool.order())
        shape = (len(nodes), k)
        if len(pool) == 0 or k == 0:
            return SampledNeighbors(np.zeros(shape, np.int64), np.full(shape, -1, np.int64), np.zeros(shape),
                                    np.zeros(shape, dtype=bool), np.zeros((*shape, self.edge_dim), np.float32))
        stamps = np.unique(np.concatenate([pool.time, times]))
        stride = np.int64(len(stamps) + 1)
        keys = pool.vertex * stride + np.searchsorted(stamps, pool.time)
        end = np.searchsorted(keys, nodes * stride + np.searchsorted(stamps, times), side="left")
        first = np.searchsorted(keys, nodes * stride, side="left")
        offset = np.arange(k, dtype=np.int64)[None, :] - k  # the k latest, oldest first
        mask = offset >= -(end - first)[:, None]
        position = np.where(mask, end[:, None] + offset, 0)
        return SampledNeighbors(np.where(mask, pool.neighbor[position], 0), np.where(mask, pool.event[position], -1),
                                np.where(mask, pool.time[position], 0.0), mask,
                                np.where(mask[..., None], pool.features[position], np.float32(0)))

    # ------------------------------------------------------------------ state
    def _fold(self, batch: Entries) -> None:
        """Add ``batch`` (time-sorted events after those folded): the new tie group is every entry at the
        batch's last time; every earlier entry joins its vertex's ring, which keeps its k latest."""
        if len(batch) == 0:
            return
        latest = float(batch.time.max())
        pending = Entries.join([self.ties, batch])
        if latest == self.frontier:
            self.ties = pending
            return
        at_latest = pending.time == latest
        self.ties, settled = pending.take(at_latest), pending.take(~at_latest)
        self.frontier = latest
        self._settle(settled)

    def _settle(self, entries: Entries) -> None:
        if len(entries) == 0:
            return
        vertices = np.unique(entries.vertex)
        merged = Entries.join([self._ring_entries(vertices), entries])
        merged = merged.take(merged.order())
        group_end = np.searchsorted(merged.vertex, vertices, side="right")
        group_start = np.searchsorted(merged.vertex, vertices, side="left")
        kept_start = np.maximum(group_start, group_end - self.k)
        kept = group_end - kept_start
        self.count[vertices] = kept
        slot = np.arange(self.k)[None, :]
        valid = slot < kept[:, None]
        source = np.where(valid, kept_start[:, None] + slot, 0)
        rows = np.broadcast_to(vertices[:, None], valid.shape)[valid]
        cols = np.broadcast_to(slot, valid.shape)[valid]
        take = source[valid]
        self.neighbor[rows, cols] = merged.neighbor[take]
        self.time[rows, cols] = merged.time[take]
        self.event[rows, cols] = merged.event[take]
        self.side[rows, cols] = merged.side[take]
        self.features[rows, cols] = merged.features[take]

    def _ring_entries(self, vertices: np.ndarray) -> Entries:
        counts = self.count[vertices]
        valid = np.arange(self.k)[None, :] < counts[:, None]
        rows = np.broadcast_to(vertices[:, None], valid.shape)[valid]
        cols = np.broadcast_to(np.arange(self.k)[None, :], valid.shape)[valid]
        return Entries(rows, self.neighbor[rows, cols], self.time[rows, cols], self.event[rows, cols],
                       self.side[rows, cols], self.features[rows, cols])

    def _entries(self, start: int, stop: int) -> Entries:
        """Both adjacency entries of each event in [start, stop): source side first, as in the T-CSR."""
        s = self.stream
        src, dst, t = s.src[start:stop], s.dst[start:stop], s.t[start:stop]
        event = np.arange(start, stop, dtype=np.int64)
        if self.edge_dim:
            features = np.asarray(s.edge_features[start:stop], dtype=np.float32)
        else:
            features = np.zeros((stop - start, 0), dtype=np.float32)
        n = stop - start
        return Entries(np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([t, t]),
                       np.concatenate([event, event]),
                       np.concatenate([np.zeros(n, np.int8), np.ones(n, np.int8)]),
                       np.concatenate([features, features]))

    def _empty(self) -> Entries:
        return Entries(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64),
                       np.zeros(0, np.int8), np.zeros((0, self.edge_dim), np.float32))
