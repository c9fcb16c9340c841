"""Sven's node states and its baselines' (TPDS §2.3, §3): DepCache's replicas, DepComm's owner-computed views
and Sven's partitioned rows with Alg. 2's deduplication, the two-level pipeline (§3.3.2) and Eq. 12's choice
of the micro-batch count. Each counts its own collectives for dry runs beside the real ones
(:meth:`count_batch`). See docs/continuous-training.md.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dgbench.counting import ALL_GATHER, ALL_TO_ALL, INT_BYTES, TagCounter
from dgbench.dist import DistContext, all_to_all_autograd
from dgbench.models.temporal import StateLayout
from dgbench.trainers.continuous.state import (AGGREGATE_TAG, BACKWARD_SUFFIX, DISPATCH_TAG, ID_SUFFIX, TIME_SUFFIX,
                                               FetchRoute, NodeState, PendingWrite, ViewFunction, last_wins)
from dgbench.trainers.continuous.sven.formulas import (deduplicate, dispatch_plan, fit_redundancy_curve, granularity,
                                               redundancy_by_batch_size)

if TYPE_CHECKING:  # the plan's module imports the family's state module
    from dgbench.trainers.continuous.data import BatchPlan

CONTROL_TAG = "counts"  # the row-count exchanges, the family loop's control tag


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

    def count_batch(self, counter: TagCounter, plan: BatchPlan, write: tuple[np.ndarray, np.ndarray], unit: int,
                    widths: dict[str, int], float_bytes: int, chunks: int) -> np.ndarray | None:
        """DepCache: two uneven all-gathers of the deduplicated updates (Eq. 7)."""
        rank, everyone = self.ctx.rank, np.ones(counter.world, np.int64)
        updates = len(last_wins(*write)[0])
        counter.move("counts", ALL_TO_ALL, INT_BYTES, unit, rank, None, everyone * 2, calls=2)
        counter.move(AGGREGATE_TAG + ID_SUFFIX, ALL_GATHER, INT_BYTES, unit, rank, None, everyone * updates, 1)
        counter.move(AGGREGATE_TAG, ALL_GATHER, float_bytes, unit, rank, None, everyone * updates * widths["update"], 1)
        return None


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

    def choose_chunks(self, plan: BatchPlan, batch_size: int) -> dict[str, Any]:
        """Eq. 12 after the first batch: eta(bs) profiled on this batch's dispatch list cut into
        micro-batches of bs, bs/2, bs/4, bs/8 events and fitted to eta = A + B/bs; S from the measured
        link: bandwidth (the first batch's dispatch bytes over the seconds its fetch blocked) x the fixed
        cost of one collective / dispatch bytes per event (the events whose rows the link moves in one
        collective's fixed cost, see :func:`~dgbench.trainers.continuous.sven.formulas.granularity`). Every rank
        contributes its measurements and all use their mean, so all pick the same n."""
        comm, world = self.ctx.comm, self.ctx.world_size
        dispatch = comm.stats[DISPATCH_TAG]
        sizes = [max(1, plan.size // k) for k in (1, 2, 4, 8)]
        etas = redundancy_by_batch_size(plan.needed_ids, plan.event_of_needed, sizes)
        a, b = fit_redundancy_curve(sizes, etas)
        # bandwidth over the dispatch's transfer seconds: time waiting for the last rank to arrive moves nothing
        measured = torch.tensor([a, b, dispatch.bytes / max(dispatch.transfer_seconds, 1e-9) if dispatch.bytes else 0.0,
                                 self._collective_latency(), dispatch.bytes / max(len(plan.events), 1)],
                                dtype=torch.float64, device=self.ctx.device)
        comm.all_reduce(measured, CONTROL_TAG)
        a, b, bandwidth, latency, bytes_per_event = (measured / world).tolist()
        speed = bandwidth * latency / bytes_per_event if bytes_per_event > 0 else 0.0
        self.chunks = granularity(a, b, batch_size, speed)
        return {"n": self.chunks, "A": a, "B": b, "S_events": speed, "bandwidth_bytes_per_s": bandwidth,
                "latency_s": latency, "dispatch_bytes_per_event": bytes_per_event, "profiled_batch_sizes": sizes,
                "profiled_eta1": etas}

    def _collective_latency(self, repeats: int = 5) -> float:
        """The fixed cost of one collective: the fastest of a few one-value all-to-alls, each started right
        after a barrier (the row-count exchanges of training also hold the wait for slower ranks)."""
        comm, best = self.ctx.comm, float("inf")
        with comm.without_probes():  # the collective's own cost, not an arrival probe's on top
            for _ in range(repeats):
                comm.barrier()
                start = time.perf_counter()
                comm.exchange_counts([0] * self.ctx.world_size, CONTROL_TAG)
                best = min(best, time.perf_counter() - start)
        return best

    def count_batch(self, counter: TagCounter, plan: BatchPlan, write: tuple[np.ndarray, np.ndarray], unit: int,
                    widths: dict[str, int], float_bytes: int, chunks: int) -> np.ndarray | None:
        """Sven: deduplicated ids out, whole rows back in n micro-batches (Alg. 2, §3.3.2), then the write-back."""
        rank, everyone = self.ctx.rank, np.ones(counter.world, np.int64)
        requested = np.asarray(plan.route.send_counts, np.int64)
        counter.move("counts", ALL_TO_ALL, INT_BYTES, unit, rank, None, everyone * chunks, calls=2)  # per chunk
        counter.move(DISPATCH_TAG + ID_SUFFIX, ALL_TO_ALL, INT_BYTES, unit, rank, None, requested, 1)
        counter.move(DISPATCH_TAG, ALL_TO_ALL, float_bytes, unit, None, rank, requested * widths["row"], chunks)
        self._count_write_back(counter, write, unit, widths, float_bytes)
        return None

    def _count_write_back(self, counter: TagCounter, write: tuple[np.ndarray, np.ndarray], unit: int,
                          widths: dict[str, int], float_bytes: int) -> None:
        """The write-back of every partitioned state: one row per distinct vertex to its owner."""
        rank, everyone = self.ctx.rank, np.ones(counter.world, np.int64)
        unique, _ = last_wins(*write)
        _, counts = dispatch_plan(unique, self.owner, counter.world)
        counter.move("counts", ALL_TO_ALL, INT_BYTES, unit, rank, None, everyone, calls=2)
        counter.move(AGGREGATE_TAG + ID_SUFFIX, ALL_TO_ALL, INT_BYTES, unit, rank, None, counts, 1)
        counter.move(AGGREGATE_TAG, ALL_TO_ALL, float_bytes, unit, rank, None, counts * widths["update"], 1)


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

    def count_batch(self, counter: TagCounter, plan: BatchPlan, write: tuple[np.ndarray, np.ndarray], unit: int,
                    widths: dict[str, int], float_bytes: int, chunks: int) -> np.ndarray | None:
        """DepComm: ids and query times out, views back, their gradients out (Eq. 8), then the write-back."""
        rank, everyone = self.ctx.rank, np.ones(counter.world, np.int64)
        requested = np.asarray(plan.route.send_counts, np.int64)
        counter.move("counts", ALL_TO_ALL, INT_BYTES, unit, rank, None, everyone, calls=2)
        counter.move(DISPATCH_TAG + ID_SUFFIX, ALL_TO_ALL, INT_BYTES, unit, rank, None, requested, 1)
        counter.move(DISPATCH_TAG + TIME_SUFFIX, ALL_TO_ALL, float_bytes, unit, rank, None, requested, 1)
        counter.move(f"{DISPATCH_TAG}:forward", ALL_TO_ALL, float_bytes, unit, None, rank,
                     requested * widths["view"], 1)
        counter.move(DISPATCH_TAG + BACKWARD_SUFFIX, ALL_TO_ALL, float_bytes, unit, rank, None,
                     requested * widths["view"], 1)
        self._count_write_back(counter, write, unit, widths, float_bytes)
        return requested


