"""Where node memory and mailboxes (N&M) live, per scheme, and how a batch reads and writes them.

One interface (:class:`NodeState`): views of the dispatch list in, update rows out, merged by the
holder with the highest write priority winning. Placements (Sven §2.3, §3): resident (``single``),
replicated (``depcache``, Eq. 7), owner-computed views (``depcomm``, Eq. 8), partitioned with Alg. 2
and the two-level pipeline (``sven``, Eq. 9, §3.3.2).
See docs/continuous-training.md (section "Schemes").
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dgbench.counting import TagCounter
from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.models.temporal import PairViews, StateLayout

if TYPE_CHECKING:  # the plan's module imports this one
    from dgbench.trainers.continuous.data import BatchPlan

DISPATCH_TAG, AGGREGATE_TAG = "nm_dispatch", "nm_aggregate"
ID_SUFFIX, TIME_SUFFIX = ":ids", ":times"  # control values travelling with rows (not Eq. 7-9 volume)
BACKWARD_SUFFIX = ":backward"  # DepComm's view gradients, returned to the owners
# (rows of distinct vertices, each query's row among them or None for a row per query, query times) -> views
ViewFunction = Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor], torch.Tensor]


def last_wins(ids: np.ndarray, priority: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique ids and, for each, the position of its highest-priority occurrence (most-recent policy)."""
    if len(ids) == 0:
        return ids, np.zeros(0, dtype=np.int64)
    order = np.lexsort((priority, ids))
    ids_sorted = ids[order]
    last = np.r_[ids_sorted[1:] != ids_sorted[:-1], True]
    return ids_sorted[last], order[last]


def distinct_queries(ids: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of the first occurrence of each distinct (vertex, query time) pair, each position's pair
    index). A view is a function of the vertex's row and the query time alone, and a batch reads every
    row before it writes any, so equal pairs have equal views: on Wikipedia (batch 600, 10 recent
    neighbours) a batch's positions hold each pair 3.4 times on average (a user's recent neighbours are
    mostly the same page), and the memory update runs once per pair instead."""
    order = np.lexsort((times, ids))  # stable: the first position of a pair leads its group
    ids_sorted, times_sorted = ids[order], times[order]
    starts = np.ones(len(ids), dtype=bool)
    starts[1:] = (ids_sorted[1:] != ids_sorted[:-1]) | (times_sorted[1:] != times_sorted[:-1])
    inverse = np.empty(len(ids), dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return order[starts], inverse


def _pair_views(ids: np.ndarray, times: torch.Tensor, rows_at: Callable[[np.ndarray], torch.Tensor],
                view: ViewFunction, keep_pairs: bool = False) -> torch.Tensor | PairViews:
    """The view of every position (vertex ``ids``, query ``times``), computed once per distinct (vertex,
    time) pair from each distinct vertex's row (``rows_at(positions)``: the rows at those positions);
    ``keep_pairs``: as :class:`PairViews` (the pairs' views and each position's pair), not gathered."""
    first, pair = distinct_queries(ids, times.cpu().numpy())
    # distinct vertices of the pairs: ``first`` is sorted by vertex, so each vertex's pairs are a run
    pair_ids = ids[first]
    starts = np.r_[True, pair_ids[1:] != pair_ids[:-1]] if len(first) else np.zeros(0, dtype=bool)
    device = times.device
    # one pair per vertex (--protocol batch queries each vertex once): the rows are already the pairs' rows,
    # so no gather per pair (None: a row per query); evaluation keeps the blocked per-pair GRU path
    one_per_vertex = bool(starts.all()) and torch.is_grad_enabled()
    vertex_of_pair = None if one_per_vertex else torch.from_numpy(np.cumsum(starts) - 1).to(device)
    pair_views = view(rows_at(first[starts]), vertex_of_pair, times[torch.from_numpy(first).to(device)])
    paired = PairViews(pair_views, torch.from_numpy(pair).to(device))
    # the copies' gradients summed per pair with index_add_ (faster on CPU than an embedding's or indexing's)
    return paired if keep_pairs else paired.gathered()


@dataclass
class FetchRoute:
    """How one rank's needed positions map to requests (prepared off the critical path).

    ``request_ids`` are grouped by owner (``send_counts`` each); position i of the batch reads
    request row ``inverse[i]`` once the rows are back in request order.
    """

    request_ids: np.ndarray
    send_counts: np.ndarray
    inverse: np.ndarray


class PendingWrite:
    """A write-back in flight; :meth:`finish` waits for it and stores what arrived."""

    def __init__(self, finish: Callable[[], None] | None = None):
        self._finish = finish

    def finish(self) -> None:
        if self._finish is not None:
            self._finish()
            self._finish = None


class NodeState:
    """Base: a dense table of rows indexed through ``local_index`` (global id -> table row, -1 if not held)."""

    provides_rows = True  # the batch's raw rows reach the requester (False: only views, DepComm)
    overlaps_write = False  # the write-back runs while the embedding computes (Sven §3.3.2)

    def __init__(self, ctx: DistContext, layout: StateLayout, owner: np.ndarray):
        self.ctx, self.layout, self.width = ctx, layout, layout.width
        self.owner = np.asarray(owner, dtype=np.int64)
        self.local_index = self._local_index()
        self.table = layout.empty_rows(int((self.local_index >= 0).sum())).to(ctx.device)
        self.last_fetch_seconds = self.last_update_seconds = 0.0

    def _local_index(self) -> np.ndarray:
        return np.arange(len(self.owner), dtype=np.int64)

    def reset(self) -> None:
        """Every row back to :meth:`StateLayout.empty_rows`, in place: a second table is never allocated."""
        self.table.zero_()
        self.table[:, self.layout.mail_ts_start:] = -1.0

    def _rows(self, ids: np.ndarray) -> torch.Tensor:
        # index_select, not indexing: on CPU a row gather by indexing (``table[index]``) takes ~2-4x as long
        return self.table.index_select(0, torch.from_numpy(self.local_index[ids]).to(self.ctx.device))

    def _store(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> None:
        unique_ids, winner = last_wins(ids, priority)
        if len(unique_ids) == 0:
            return
        device = self.ctx.device
        index = torch.from_numpy(self.local_index[unique_ids]).to(device)
        sets_memory = torch.from_numpy(priority[winner] >= 0).to(device)
        merged = self.layout.merge(self.table.index_select(0, index),
                                   rows.index_select(0, torch.from_numpy(winner).to(rows.device)), sets_memory)
        self.table.index_copy_(0, index, merged.to(self.table.dtype))

    def route(self, ids: np.ndarray) -> FetchRoute:
        return FetchRoute(ids, np.array([len(ids)]), np.arange(len(ids)))

    def fetch(self, route: FetchRoute, on_chunk: Callable[[np.ndarray, torch.Tensor], None] | None = None
              ) -> torch.Tensor:
        """Rows of every needed position; ``on_chunk(positions, rows)`` is called as parts arrive."""
        rows = self._rows(route.request_ids)
        if on_chunk is not None:
            on_chunk(np.arange(len(route.inverse)), rows)
        return rows

    @property
    def views_per_pair(self) -> bool:
        """Whether :meth:`views` takes ``keep_pairs`` (it returns :class:`PairViews`): the local table's views,
        computed here (a placement that overrides :meth:`fetch` or :meth:`views` gives views per position)."""
        return type(self).views is NodeState.views and type(self).fetch is NodeState.fetch

    def views(self, route: FetchRoute, query_t: torch.Tensor, view: ViewFunction, keep_pairs: bool = False
              ) -> tuple[torch.Tensor | PairViews, torch.Tensor | None]:
        """(view of every needed position, their raw rows or None). The requester computes the views
        from the rows as they arrive (data-parallel memory update); ``last_fetch_seconds`` /
        ``last_update_seconds`` split the wall time into waiting for rows and computing views. Views are
        computed once per distinct (vertex, query time) pair of a chunk (:func:`distinct_queries`), and
        the view function gets each distinct vertex's row once (its vertex-only parts run once per vertex).
        Where the table is local (``single``, ``depcache``) only those rows are read, and no raw rows
        are returned (the model works from the views); there ``keep_pairs`` returns them as
        :class:`PairViews` (:attr:`views_per_pair`; elsewhere it is ignored)."""
        if type(self).fetch is NodeState.fetch:
            start = time.perf_counter()
            ids = route.request_ids[route.inverse]
            views = _pair_views(ids, query_t, lambda positions: self._rows(ids[positions]), view, keep_pairs)
            self.last_fetch_seconds, self.last_update_seconds = 0.0, time.perf_counter() - start
            return views, None
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        compute = [0.0]

        def on_chunk(positions: np.ndarray, rows: torch.Tensor) -> None:
            start = time.perf_counter()
            index = torch.from_numpy(positions).to(self.ctx.device)
            ids = route.request_ids[route.inverse[positions]]
            views = _pair_views(ids, query_t[index], lambda chosen: rows[torch.from_numpy(chosen).to(rows.device)],
                                view)
            assert isinstance(views, torch.Tensor)
            parts.append((index, views))
            compute[0] += time.perf_counter() - start

        start = time.perf_counter()
        rows = self.fetch(route, on_chunk)
        self.last_fetch_seconds = time.perf_counter() - start - compute[0]
        self.last_update_seconds = compute[0]
        if len(parts) == 1 and len(parts[0][0]) == len(rows):
            return parts[0][1], rows
        width = parts[0][1].shape[1] if parts else 0
        out = rows.new_zeros(len(rows), width)
        for index, values in parts:
            out = out.index_copy(0, index, values)
        return out, rows

    def begin_write(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> PendingWrite:
        """Write update rows back (merged by their holders); finished before :meth:`begin_write` returns
        unless the placement overlaps it (then :meth:`PendingWrite.finish` completes it)."""
        self._store(ids, rows, priority)
        return PendingWrite()

    def write(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> None:
        self.begin_write(ids, rows, priority).finish()

    def count_batch(self, counter: TagCounter, plan: BatchPlan, write: tuple[np.ndarray, np.ndarray], unit: int,
                    widths: dict[str, int], float_bytes: int, chunks: int) -> np.ndarray | None:
        """Count into ``counter`` what this rank's collectives send for one batch plan, as :meth:`fetch`,
        :meth:`views` and :meth:`begin_write` would (a dry run: trainers/projection/). ``write``: the write-back's
        ids and priorities; ``widths``: row, view and update widths; ``chunks``: micro-batches of the fetch.
        Returns the positions each owner computes views for, where owners compute them (else None)."""
        raise DgbenchError(f"dry run: {type(self).__name__} does not count its collectives (NodeState.count_batch)")

    def choose_chunks(self, plan: BatchPlan, batch_size: int) -> dict[str, Any]:
        """Choose the fetch's micro-batch count after the first batch (``--microbatches 0``) and say how; a
        state that does not pipeline its fetch keeps one."""
        return {"n": 1}


class ResidentState(NodeState):
    """``single``: everything local, no communication."""

    def count_batch(self, counter: TagCounter, plan: BatchPlan, write: tuple[np.ndarray, np.ndarray], unit: int,
                    widths: dict[str, int], float_bytes: int, chunks: int) -> np.ndarray | None:
        return None  # nothing leaves the process
