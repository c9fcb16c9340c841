"""Temporal neighbour sampler over a time-sorted per-vertex adjacency (TGL's T-CSR), built once.

Every event (u, v, t) is an interaction of both endpoints, so the adjacency holds it twice (u->v and
v->u). A query (vertex, time) sees only the events strictly before its time; ``recent`` returns the
k latest of them, ``uniform`` k drawn uniformly with replacement (TGL's two strategies), ``sis`` k
distinct ones drawn by T-GCN's sum-tree sampler (SIS, Alg. 3-4) without replacement, uniformly or with
time-decay weights exp(-decay (t_q - t_e)). Lookups are vectorised: adjacency entries are keyed by
(vertex, rank of time), so one ``searchsorted`` finds, for every query at once, where its vertex's
events at or after the query time begin.

``sis`` is streaming: per-vertex sum trees (:class:`~dgbench.trainers.continuous.tgcn.sampling.TemporalSumForest`)
receive the events in time order as queries advance (amortised O(log d) per event), and a query draws
from the first P leaves of its vertex, P from the history bounds, in O(k log d). A query earlier than
the events already appended (a new epoch) starts the trees again from the first event.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from dgbench.trainers.continuous.tgcn.sampling import TemporalSumForest

STRATEGIES = ("recent", "uniform", "sis")


@dataclass
class SampledNeighbors:
    """(Q, k) arrays; slots with ``mask`` False are padding (vertex 0, event -1, time 0). ``edge_features``
    (Q, k, edge_dim): the sampled events' features where the sampler holds them (the bounded ``recent``
    rings of :mod:`dgbench.trainers.continuous.ring`); None: read them from the stream by event id."""

    nodes: np.ndarray
    events: np.ndarray
    times: np.ndarray
    mask: np.ndarray
    edge_features: np.ndarray | None = None


class TemporalSampler:
    """k temporal neighbours per (vertex, time) query, never an event at or after the query time."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, num_nodes: int, decay: float = 0.0):
        """``decay``: rate (per time unit of ``t``) of the ``sis`` strategy's time-decay weights; 0 = uniform."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        t = np.asarray(t, dtype=np.float64)
        event = np.arange(len(src), dtype=np.int64)
        owner = np.concatenate([src, dst])
        times = np.concatenate([t, t])
        self.unique_times = np.unique(times)
        self.stride = np.int64(len(self.unique_times) + 1)
        time_rank = np.searchsorted(self.unique_times, times)
        keys = owner * self.stride + time_rank
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        self.neighbors = np.concatenate([dst, src])[order]
        self.events = np.concatenate([event, event])[order]
        self.times = times[order]
        self.indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=num_nodes), out=self.indptr[1:])
        self.num_nodes, self.decay = num_nodes, float(decay)
        self._forest: TemporalSumForest | None = None
        self._appended = 0  # adjacency entries given to the forest, in time order
        self._forest_lock = threading.Lock()

    def history_bounds(self, nodes: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[start, end) adjacency positions of each query vertex's events strictly before its time."""
        nodes = np.asarray(nodes, dtype=np.int64)
        rank = np.searchsorted(self.unique_times, np.asarray(times, dtype=np.float64), side="left")
        end = np.searchsorted(self.keys, nodes * self.stride + rank, side="left")
        return self.indptr[nodes], end

    def sample_window(self, start: int, stop: int, nodes: np.ndarray, times: np.ndarray, k: int,
                      strategy: str = "recent", uniforms: np.ndarray | None = None) -> SampledNeighbors:
        """:meth:`sample` for the queries of batch [start, stop) (the whole stream is indexed: the window
        matters only to the bounded sampler, :class:`~dgbench.trainers.continuous.ring.RecentRing`)."""
        return self.sample(nodes, times, k, strategy, uniforms)

    def sample(self, nodes: np.ndarray, times: np.ndarray, k: int, strategy: str = "recent",
               uniforms: np.ndarray | None = None) -> SampledNeighbors:
        """k neighbours per query. ``uniforms`` (Q, k) in [0, 1) drive ``uniform`` so that callers can
        make draws independent of how queries are split across ranks."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown sampling strategy '{strategy}' (known: {', '.join(STRATEGIES)})")
        if strategy == "sis":
            return self._sample_sis(np.asarray(nodes, dtype=np.int64), np.asarray(times, dtype=np.float64), k,
                                    uniforms)
        start, end = self.history_bounds(nodes, times)
        count = (end - start)[:, None]
        if strategy == "recent":
            offset = np.arange(k, dtype=np.int64)[None, :] - k  # the k latest, oldest first
            position = end[:, None] + offset
            mask = offset >= -count
        else:
            if uniforms is None:
                uniforms = np.random.default_rng(0).random((len(start), k))
            position = start[:, None] + np.floor(uniforms * count).astype(np.int64)
            mask = np.broadcast_to(count > 0, position.shape).copy()
        position = np.where(mask, position, 0)
        if len(self.keys) == 0:
            mask[:] = False
            position[:] = 0
            return SampledNeighbors(np.zeros_like(position), np.full_like(position, -1),
                                    np.zeros(position.shape), mask)
        return self._gather(position, mask)

    def _gather(self, position: np.ndarray, mask: np.ndarray) -> SampledNeighbors:
        return SampledNeighbors(np.where(mask, self.neighbors[position], 0),
                                np.where(mask, self.events[position], -1),
                                np.where(mask, self.times[position], 0.0), mask)

    def _advance_forest(self, horizon: float) -> TemporalSumForest:
        """Append (in time order) every adjacency entry strictly before ``horizon``; restart if behind."""
        if self._forest is None:
            self._forest = TemporalSumForest(self.num_nodes, self.decay)
            self._append_order = np.argsort(self.times, kind="stable")  # time, then vertex-major position
            self._append_times = self.times[self._append_order]
            self._entry_owner = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))
        target = int(np.searchsorted(self._append_times, horizon, side="left"))
        if target < self._appended:
            self._forest.reset()
            self._appended = 0
        if target > self._appended:
            entries = self._append_order[self._appended:target]
            owner = self._entry_owner[entries]
            self._forest.append(owner, entries - self.indptr[owner], self.times[entries])
            self._appended = target
        return self._forest

    def _sample_sis(self, nodes: np.ndarray, times: np.ndarray, k: int, uniforms: np.ndarray | None
                    ) -> SampledNeighbors:
        """Up to k distinct events strictly before each query time by SIS, oldest first."""
        start, end = self.history_bounds(nodes, times)
        if uniforms is None:
            uniforms = np.random.default_rng(0).random((len(nodes), k))
        if len(nodes) == 0 or k == 0 or len(self.keys) == 0:
            shape = (len(nodes), k)
            return SampledNeighbors(np.zeros(shape, np.int64), np.full(shape, -1, np.int64), np.zeros(shape),
                                    np.zeros(shape, dtype=bool))
        with self._forest_lock:
            forest = self._advance_forest(float(times.max()))
            local = forest.sample(nodes, end - start, k, uniforms)
        local = np.sort(np.where(local >= 0, local, np.iinfo(np.int64).max), axis=1)
        mask = local != np.iinfo(np.int64).max
        position = np.where(mask, start[:, None] + local, 0)
        return self._gather(position, mask)

    def gap_statistics(self) -> tuple[float, float]:
        """Mean and standard deviation of the time between consecutive events of one vertex (the
        shift and scale JODIE-style time projections normalise time differences with)."""
        same_vertex = np.diff(self.keys // self.stride) == 0
        gaps = np.diff(self.times)[same_vertex]
        if len(gaps) == 0:
            return 0.0, 1.0
        std = float(gaps.std())
        return float(gaps.mean()), std if std > 0 else 1.0
