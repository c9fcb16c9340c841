"""Where node memory and mailboxes (N&M) live, per scheme, and how a batch reads and writes them.

One interface, four placements:

* ``single``   (:class:`ResidentState`): the whole table in this process.
* ``depcache`` (:class:`ReplicatedState`): a full copy on every rank; each batch's updated rows are
  sent to every other rank (Sven Eq. 7: (P-1) x updated positions, no deduplication).
* ``depcomm``  (:class:`PartitionedState`, ``deduplicate=False``): rows partitioned by vertex; every
  needed position is fetched from its owner with an all-to-all and every update sent back (Eq. 8).
* ``sven``     (:class:`PartitionedState`, ``deduplicate=True``): the same after Sven Alg. 2 — only
  unique ids cross the wire and are restored with the inverse index (Eq. 9) — optionally pipelined:
  the fetched rows arrive in n micro-batches whose transfer overlaps the memory update of the previous.

Writes carry a priority (the update's position in the global batch) and the highest wins, so the
stored state never depends on which rank computed which event: every scheme stores what ``single`` does.
Each row is a packed state row (:class:`dgbench.models.temporal.StateLayout`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dgbench.dist import DistContext
from trainers.continuous.sven_core import deduplicate, dispatch_plan

DISPATCH_TAG, AGGREGATE_TAG = "nm_dispatch", "nm_aggregate"
ID_SUFFIX = ":ids"


def last_wins(ids: np.ndarray, priority: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique ids and, for each, the position of its highest-priority occurrence (most-recent policy)."""
    if len(ids) == 0:
        return ids, np.zeros(0, dtype=np.int64)
    order = np.lexsort((priority, ids))
    ids_sorted = ids[order]
    last = np.r_[ids_sorted[1:] != ids_sorted[:-1], True]
    return ids_sorted[last], order[last]


@dataclass
class FetchRoute:
    """How one rank's needed positions map to requests (prepared off the critical path).

    ``request_ids`` are grouped by owner (``send_counts`` each); position i of the batch reads
    request row ``inverse[i]`` once the rows are back in request order.
    """

    request_ids: np.ndarray
    send_counts: np.ndarray
    inverse: np.ndarray


class NodeState:
    """Base: a dense table of rows indexed through ``local_index`` (global id -> table row, -1 if not held)."""

    def __init__(self, ctx: DistContext, width: int, empty_rows: Callable[[int], torch.Tensor],
                 owner: np.ndarray):
        self.ctx, self.width, self.empty_rows = ctx, width, empty_rows
        self.owner = np.asarray(owner, dtype=np.int64)
        self.local_index = self._local_index()
        self.table = empty_rows(int((self.local_index >= 0).sum())).to(ctx.device)

    def _local_index(self) -> np.ndarray:
        return np.arange(len(self.owner), dtype=np.int64)

    def reset(self) -> None:
        self.table = self.empty_rows(len(self.table)).to(self.ctx.device)

    def _rows(self, ids: np.ndarray) -> torch.Tensor:
        return self.table[torch.from_numpy(self.local_index[ids]).to(self.ctx.device)]

    def _store(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> None:
        unique_ids, winner = last_wins(ids, priority)
        index = torch.from_numpy(self.local_index[unique_ids]).to(self.ctx.device)
        self.table[index] = rows[torch.from_numpy(winner).to(rows.device)]

    def route(self, ids: np.ndarray) -> FetchRoute:
        return FetchRoute(ids, np.array([len(ids)]), np.arange(len(ids)))

    def fetch(self, route: FetchRoute, on_chunk: Callable[[np.ndarray, torch.Tensor], None] | None = None
              ) -> torch.Tensor:
        """Rows of every needed position; ``on_chunk(positions, rows)`` is called as parts arrive."""
        rows = self._rows(route.request_ids)
        if on_chunk is not None:
            on_chunk(np.arange(len(route.inverse)), rows)
        return rows

    def write(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> None:
        self._store(ids, rows, priority)


class ResidentState(NodeState):
    """``single``: everything local, no communication."""


class ReplicatedState(NodeState):
    """``depcache``: full replica per rank; updates are broadcast through one all-to-all."""

    def write(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> None:
        comm, world = self.ctx.comm, self.ctx.world_size
        counts = comm.exchange_counts([len(ids)] * world)
        device = self.ctx.device
        payload = torch.cat([rows, torch.from_numpy(priority).to(device, rows.dtype)[:, None]], dim=1)
        all_ids = comm.all_to_all_single(torch.from_numpy(ids).to(device).repeat(world)[:, None],
                                         [len(ids)] * world, counts, AGGREGATE_TAG + ID_SUFFIX)
        all_rows = comm.all_to_all_single(payload.repeat(world, 1), [len(ids)] * world, counts, AGGREGATE_TAG)
        self._store(all_ids[:, 0].cpu().numpy(), all_rows[:, :-1], all_rows[:, -1].cpu().numpy().astype(np.int64))


class PartitionedState(NodeState):
    """``depcomm`` / ``sven``: rows owned by ``owner[v]``; fetch and write-back by all-to-all."""

    def __init__(self, ctx: DistContext, width: int, empty_rows: Callable[[int], torch.Tensor],
                 owner: np.ndarray, deduplicate_ids: bool, chunks: int = 1):
        self.deduplicate_ids, self.chunks = deduplicate_ids, chunks
        super().__init__(ctx, width, empty_rows, owner)

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
        rows_in_request_order = torch.empty(len(request), self.width, device=device)
        # Rows go back per chunk; chunk c+1 is in flight while chunk c's rows are used (Sven §pipeline).
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

    def write(self, ids: np.ndarray, rows: torch.Tensor, priority: np.ndarray) -> None:
        comm, device, world = self.ctx.comm, self.ctx.device, self.ctx.world_size
        if self.deduplicate_ids:  # Alg. 2 on the aggregation side: one row per vertex leaves the rank
            ids, keep = last_wins(ids, priority)
            rows, priority = rows[torch.from_numpy(keep).to(rows.device)], priority[keep]
        order, counts = dispatch_plan(ids, self.owner, world)
        recv = comm.exchange_counts(counts)
        payload = torch.cat([rows, torch.from_numpy(priority).to(device, rows.dtype)[:, None]], dim=1)
        index = torch.from_numpy(order).to(device)
        got_ids = comm.all_to_all_single(torch.from_numpy(ids).to(device)[index][:, None], counts, recv,
                                         AGGREGATE_TAG + ID_SUFFIX)[:, 0].cpu().numpy()
        got = comm.all_to_all_single(payload[index], counts, recv, AGGREGATE_TAG)
        self._store(got_ids, got[:, :-1], got[:, -1].cpu().numpy().astype(np.int64))
