"""Temporal neighbour sampler over a time-sorted per-vertex adjacency (TGL's T-CSR), built once.

Every event (u, v, t) is an interaction of both endpoints, so the adjacency holds it twice (u->v and
v->u). A query (vertex, time) sees only the events strictly before its time; ``recent`` returns the
k latest of them, ``uniform`` k drawn uniformly with replacement (TGL's two strategies). Lookups are
vectorised: adjacency entries are keyed by (vertex, rank of time), so one ``searchsorted`` finds,
for every query at once, where its vertex's events at or after the query time begin.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STRATEGIES = ("recent", "uniform")


@dataclass
class SampledNeighbors:
    """(Q, k) arrays; slots with ``mask`` False are padding (vertex 0, event -1, time 0)."""

    nodes: np.ndarray
    events: np.ndarray
    times: np.ndarray
    mask: np.ndarray


class TemporalSampler:
    """k temporal neighbours per (vertex, time) query, never an event at or after the query time."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, num_nodes: int):
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

    def history_bounds(self, nodes: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[start, end) adjacency positions of each query vertex's events strictly before its time."""
        nodes = np.asarray(nodes, dtype=np.int64)
        rank = np.searchsorted(self.unique_times, np.asarray(times, dtype=np.float64), side="left")
        end = np.searchsorted(self.keys, nodes * self.stride + rank, side="left")
        return self.indptr[nodes], end

    def sample(self, nodes: np.ndarray, times: np.ndarray, k: int, strategy: str = "recent",
               uniforms: np.ndarray | None = None) -> SampledNeighbors:
        """k neighbours per query. ``uniforms`` (Q, k) in [0, 1) drive ``uniform`` so that callers can
        make draws independent of how queries are split across ranks."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown sampling strategy '{strategy}' (known: {', '.join(STRATEGIES)})")
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
        return SampledNeighbors(np.where(mask, self.neighbors[position], 0),
                                np.where(mask, self.events[position], -1),
                                np.where(mask, self.times[position], 0.0), mask)

    def gap_statistics(self) -> tuple[float, float]:
        """Mean and standard deviation of the time between consecutive events of one vertex (the
        shift and scale JODIE-style time projections normalise time differences with)."""
        same_vertex = np.diff(self.keys // self.stride) == 0
        gaps = np.diff(self.times)[same_vertex]
        if len(gaps) == 0:
            return 0.0, 1.0
        std = float(gaps.std())
        return float(gaps.mean()), std if std > 0 else 1.0
