"""Where node memory and mailboxes (N&M) live, per scheme, and how a batch reads and writes them.

One interface (:class:`NodeState`): a batch asks for the *views* of its dispatch list (the model's
:meth:`~dgbench.models.temporal.TemporalModel.node_view` of each position: updated memory and what
the embedding needs of that vertex) and writes back *update rows* (memory, message, their times),
which the holder merges into its rows (:meth:`~dgbench.models.temporal.StateLayout.merge`). Five
placements, the mechanisms of Sven §2.3 and §3 (TPDS), each with the deduplication its paper gives it:

* ``single``   (:class:`ResidentState`): the whole table in this process.
* ``depcache`` (:class:`ReplicatedState`): a full copy on every rank, so dispatch is local; after a
  batch every rank's updates reach every replica through one all-gather, after the redundancy-free
  aggregation (Alg. 2 on the write-back: one row per vertex leaves a rank; Eq. 7's (1 - eta2)).
* ``depcomm``  (:class:`OwnerComputeState`): rows partitioned by vertex; the owner reads its rows
  locally ("local dispatch"), runs the memory update itself and returns the updated memory of every
  requested position (d_mem wide, no deduplication: Eq. 8's first term), then the write-back as Sven's
  (Eq. 8's second term has the same (1 - eta2)). The view's gradient travels back to the owner.
* ``sven``     (:class:`PartitionedState`): rows partitioned by vertex; Alg. 2 on both sides: only
  distinct ids cross the wire and whole N&M rows travel (Eq. 9), restored with the inverse index.
  Sven's two-level pipeline (§3.3.2): the fetched rows arrive in n micro-batches whose transfer
  overlaps the memory update of the previous one, and the write-back is started before the embedding
  and finished after the step.

Writes carry a priority (the update's place in the global batch; mails delivered to neighbours are
negative, so an endpoint's own update wins) and the highest wins, so the stored state never depends on
which rank computed which event: every scheme stores what ``single`` does.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dgbench.dist import DistContext, all_to_all_autograd
from dgbench.models.temporal import StateLayout
from trainers.continuous.sven.formulas import deduplicate, dispatch_plan

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
                view: ViewFunction) -> torch.Tensor:
    """The view of every position (vertex ``ids``, query ``times``), computed once per distinct (vertex,
    time) pair from each distinct vertex's row (``rows_at(positions)``: the rows at those positions)."""
    first, pair = distinct_queries(ids, times.cpu().numpy())
    # distinct vertices of the pairs: ``first`` is sorted by vertex, so each vertex's pairs are a run
    pair_ids = ids[first]
    starts = np.r_[True, pair_ids[1:] != pair_ids[:-1]] if len(first) else np.zeros(0, dtype=bool)
    device = times.device
    vertex_of_pair = torch.from_numpy(np.cumsum(starts) - 1).to(device)
    pair_views = view(rows_at(first[starts]), vertex_of_pair, times[torch.from_numpy(first).to(device)])
    # an embedding lookup: autograd sums the copies' gradients, ~2x faster on CPU than indexing's backward
    return torch.nn.functional.embedding(torch.from_numpy(pair).to(device), pair_views)


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
        self.table = self.layout.empty_rows(len(self.table)).to(self.ctx.device)

    def _rows(self, ids: np.ndarray) -> torch.Tensor:
        return self.table[torch.from_numpy(self.local_index[ids]).to(self.ctx.device)]

    def _store(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> None:
        unique_ids, winner = last_wins(ids, priority)
        if len(unique_ids) == 0:
            return
        device = self.ctx.device
        index = torch.from_numpy(self.local_index[unique_ids]).to(device)
        sets_memory = torch.from_numpy(priority[winner] >= 0).to(device)
        self.table[index] = self.layout.merge(self.table[index], rows[torch.from_numpy(winner).to(rows.device)],
                                              sets_memory)

    def route(self, ids: np.ndarray) -> FetchRoute:
        return FetchRoute(ids, np.array([len(ids)]), np.arange(len(ids)))

    def fetch(self, route: FetchRoute, on_chunk: Callable[[np.ndarray, torch.Tensor], None] | None = None
              ) -> torch.Tensor:
        """Rows of every needed position; ``on_chunk(positions, rows)`` is called as parts arrive."""
        rows = self._rows(route.request_ids)
        if on_chunk is not None:
            on_chunk(np.arange(len(route.inverse)), rows)
        return rows

    def views(self, route: FetchRoute, query_t: torch.Tensor, view: ViewFunction
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(view of every needed position, their raw rows or None). The requester computes the views
        from the rows as they arrive (data-parallel memory update); ``last_fetch_seconds`` /
        ``last_update_seconds`` split the wall time into waiting for rows and computing views. Views are
        computed once per distinct (vertex, query time) pair of a chunk (:func:`distinct_queries`), and
        the view function gets each distinct vertex's row once (its vertex-only parts run once per vertex).
        Where the table is local (``single``, ``depcache``) only those rows are read, and no raw rows
        are returned (the model works from the views)."""
        if type(self).fetch is NodeState.fetch:
            start = time.perf_counter()
            ids = route.request_ids[route.inverse]
            views = _pair_views(ids, query_t, lambda positions: self._rows(ids[positions]), view)
            self.last_fetch_seconds, self.last_update_seconds = 0.0, time.perf_counter() - start
            return views, None
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        compute = [0.0]

        def on_chunk(positions: np.ndarray, rows: torch.Tensor) -> None:
            start = time.perf_counter()
            index = torch.from_numpy(positions).to(self.ctx.device)
            ids = route.request_ids[route.inverse[positions]]
            parts.append((index, _pair_views(ids, query_t[index], lambda chosen: rows[torch.from_numpy(chosen).to(
                rows.device)], view)))
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


class ResidentState(NodeState):
    """``single``: everything local, no communication."""


def _payload(rows: torch.Tensor, priority: np.ndarray) -> torch.Tensor:
    """Update rows with their write priority as a last column (it travels with the row)."""
    return torch.cat([rows, torch.from_numpy(priority).to(rows.device, rows.dtype)[:, None]], dim=1)


class ReplicatedState(NodeState):
    """``depcache``: full replica per rank; each rank's updates, one row per vertex after last-wins
    (the redundancy-free aggregation), reach every replica through one all-gather (Sven Eq. 7)."""

    def begin_write(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> PendingWrite:
        comm, device = self.ctx.comm, self.ctx.device
        ids, keep = last_wins(ids, priority)
        payload = _payload(rows[torch.from_numpy(keep).to(rows.device)], priority[keep])
        every_id = comm.all_gather_uneven(torch.from_numpy(ids).to(device)[:, None], AGGREGATE_TAG + ID_SUFFIX)
        every = comm.all_gather_uneven(payload, AGGREGATE_TAG)
        self._store(every_id[:, 0].cpu().numpy(), every[:, :-1], every[:, -1].cpu().numpy().astype(np.int64))
        return PendingWrite()


class PartitionedState(NodeState):
    """``sven``: rows owned by ``owner[v]``; Alg. 2 fetch of whole rows and write-back, by all-to-all."""

    def __init__(self, ctx: DistContext, layout: StateLayout, owner: np.ndarray, deduplicate_ids: bool = True,
                 chunks: int = 1, overlap_write: bool = False):
        self.deduplicate_ids, self.chunks, self.overlaps_write = deduplicate_ids, chunks, overlap_write
        super().__init__(ctx, layout, owner)

    def _local_index(self) -> np.ndarray:
        """The global -> partition-local id map: owned vertices numbered 0.. in id order, others -1."""
        mine = self.owner == self.ctx.rank
        index = np.full(len(self.owner), -1, dtype=np.int64)
        index[mine] = np.arange(int(mine.sum()))
        return index

    def route(self, ids: np.ndarray) -> FetchRoute:
        if self.deduplicate_ids:  # Sven Alg. 2
            unique_ids, inverse = deduplicate(ids)
        else:
            unique_ids, inverse = ids, np.arange(len(ids))
        order, counts = dispatch_plan(unique_ids, self.owner, self.ctx.world_size)
        position_in_request = np.empty(len(order), dtype=np.int64)
        position_in_request[order] = np.arange(len(order))
        return FetchRoute(unique_ids[order], counts, position_in_request[inverse])

    def fetch(self, route: FetchRoute, on_chunk: Callable[[np.ndarray, torch.Tensor], None] | None = None
              ) -> torch.Tensor:
        comm, device, world = self.ctx.comm, self.ctx.device, self.ctx.world_size
        chunks = max(1, self.chunks)
        chunk_of_request = self._chunk_of_request(route, chunks)
        send = np.bincount(chunk_of_request * world + np.repeat(np.arange(world), route.send_counts),
                           minlength=chunks * world).reshape(chunks, world)
        # One small all-to-all tells each owner how many rows of each chunk every rank wants.
        recv = comm.all_to_all_single(torch.from_numpy(send.T.copy()).to(device), [1] * world, [1] * world,
                                      "counts").T.cpu().numpy()
        request = torch.from_numpy(route.request_ids).to(device)
        received_ids = comm.all_to_all_single(request[:, None], route.send_counts, recv.sum(0),
                                              DISPATCH_TAG + ID_SUFFIX)[:, 0].cpu().numpy()
        rows_in_request_order = torch.empty(len(request), self.width, device=device, dtype=self.table.dtype)
        # Rows go back per chunk; chunk c+1 is in flight while chunk c's rows are used (§3.3.2, level 1).
        served = self._serve_by_chunk(received_ids, recv)
        pending = None
        for c in range(chunks):
            out, wait = comm.all_to_all_single_async(served[c], recv[c], send[c], DISPATCH_TAG)
            if pending is not None:
                self._deliver(route, chunk_of_request, rows_in_request_order, *pending, on_chunk)
            wait()
            pending = (c, out)
        if pending is not None:
            self._deliver(route, chunk_of_request, rows_in_request_order, *pending, on_chunk)
        return rows_in_request_order[torch.from_numpy(route.inverse).to(device)]

    @staticmethod
    def _chunk_of_request(route: FetchRoute, chunks: int) -> np.ndarray:
        """Chunk of each request row: each owner's group is cut into ``chunks`` near-equal parts."""
        within = np.arange(len(route.request_ids)) - np.repeat(np.cumsum(route.send_counts) - route.send_counts,
                                                              route.send_counts)
        group = np.repeat(route.send_counts, route.send_counts)
        return (within * chunks) // np.maximum(group, 1)

    def _serve_by_chunk(self, received_ids: np.ndarray, recv: np.ndarray) -> list[torch.Tensor]:
        """Owner side: the requested rows, sorted into per-chunk send buffers (requester order inside)."""
        rows = self._rows(received_ids)
        chunks, world = recv.shape
        starts = np.r_[0, np.cumsum(recv.T.reshape(-1))]  # requester-major, then chunk
        per_chunk = []
        for c in range(chunks):
            spans = [np.arange(starts[q * chunks + c], starts[q * chunks + c + 1]) for q in range(world)]
            per_chunk.append(rows[torch.from_numpy(np.concatenate(spans)).to(rows.device)])
        return per_chunk

    def _deliver(self, route: FetchRoute, chunk_of_request: np.ndarray, rows_in_request_order: torch.Tensor,
                 chunk: int, rows: torch.Tensor, on_chunk) -> None:
        requests = np.flatnonzero(chunk_of_request == chunk)
        rows_in_request_order[torch.from_numpy(requests).to(rows.device)] = rows
        if on_chunk is not None:
            positions = np.flatnonzero(np.isin(route.inverse, requests))
            index = torch.from_numpy(route.inverse[positions]).to(rows.device)
            on_chunk(positions, rows_in_request_order[index])

    def begin_write(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> PendingWrite:
        """Alg. 2 on the aggregation side (one row per vertex leaves the rank, last-wins), one all-to-all
        to the owners; asynchronous when the placement overlaps it with the embedding."""
        comm, device, world = self.ctx.comm, self.ctx.device, self.ctx.world_size
        ids, keep = last_wins(ids, priority)
        payload = _payload(rows[torch.from_numpy(keep).to(rows.device)], priority[keep])
        order, counts = dispatch_plan(ids, self.owner, world)
        recv = comm.exchange_counts(counts)
        index = torch.from_numpy(order).to(device)
        send_ids = torch.from_numpy(ids).to(device)[index][:, None]
        if not self.overlaps_write:
            got_ids = comm.all_to_all_single(send_ids, counts, recv, AGGREGATE_TAG + ID_SUFFIX)
            got = comm.all_to_all_single(payload[index], counts, recv, AGGREGATE_TAG)
            self._store(got_ids[:, 0].cpu().numpy(), got[:, :-1], got[:, -1].cpu().numpy().astype(np.int64))
            return PendingWrite()
        got_ids, wait_ids = comm.all_to_all_single_async(send_ids, counts, recv, AGGREGATE_TAG + ID_SUFFIX)
        got, wait_rows = comm.all_to_all_single_async(payload[index], counts, recv, AGGREGATE_TAG)

        def finish() -> None:
            wait_ids()
            wait_rows()
            self._store(got_ids[:, 0].cpu().numpy(), got[:, :-1], got[:, -1].cpu().numpy().astype(np.int64))
        return PendingWrite(finish)


class OwnerComputeState(PartitionedState):
    """``depcomm``: the owner runs the memory update of every requested position and returns its view
    (d_mem-wide updated memory), position by position without deduplication (Sven Eq. 8, Fig. 4b); the
    views' gradients return to the owners in the backward pass (all_to_all_autograd)."""

    provides_rows = False

    def __init__(self, ctx: DistContext, layout: StateLayout, owner: np.ndarray):
        super().__init__(ctx, layout, owner, deduplicate_ids=False)

    def views(self, route: FetchRoute, query_t: torch.Tensor, view: ViewFunction
              ) -> tuple[torch.Tensor, None]:
        comm, device = self.ctx.comm, self.ctx.device
        start = time.perf_counter()
        recv = comm.exchange_counts(route.send_counts)
        request = torch.from_numpy(route.request_ids).to(device)
        received_ids = comm.all_to_all_single(request[:, None], route.send_counts, recv,
                                              DISPATCH_TAG + ID_SUFFIX)[:, 0].cpu().numpy()
        order = torch.from_numpy(np.argsort(route.inverse, kind="stable")).to(device)  # request order
        times = comm.all_to_all_single(query_t[order][:, None], route.send_counts, recv,
                                       DISPATCH_TAG + TIME_SUFFIX)[:, 0]
        compute_start = time.perf_counter()
        served = view(self._rows(received_ids), None, times)  # local dispatch + memory update on the owner
        compute = time.perf_counter() - compute_start
        views = all_to_all_autograd(served, comm, list(recv), list(route.send_counts), tag=DISPATCH_TAG)
        self.last_fetch_seconds = time.perf_counter() - start - compute
        self.last_update_seconds = compute
        return views[torch.from_numpy(route.inverse).to(device)], None

