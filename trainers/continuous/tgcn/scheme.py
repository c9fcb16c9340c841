"""`tgcn`: streaming T-GCN's multi-device training of DyGNN (Wang et al.; §4, Alg. 6-7, Fig. 4-5).

**Grid (§4.1).** Training events are cut into time intervals (``--intervals``, default 11 "constant range"
pieces as §6.4; equal width in time, or equal counts), and vertices into G contiguous ranges of equal
size (the partition "not affected by degrees"). The ranges cut grid positions: by default
(``--id-order permuted``) a fixed pseudo-random permutation of the vertex ids, since the paper assumes ids
carry no order while real streams number users first (equal id ranges then give one rank no training
events: Wikipedia at G = 2); ``--id-order given`` cuts the ids as they come (docs/tgcn-streaming.md).
Grid (k, i, j) holds the events of interval k from source range i to destination range j, in stream
order. Grid rank i owns source range i: the S-state (h^s, C^s, last S-update time) of its vertices lives
there, and it trains every grid (k, i, ·).

**Destination blocks and the swap schedule (§4.2, Alg. 6).** Block j carries the G-state (h^g, C^g, last
G-update time) of range j, updated by whoever holds it, and a read-only copy of range j's S-state taken
when the interval starts. Before each of the G training steps of an interval the blocks move between
grid ranks in pairs: for G = 8 Alg. 6 exactly ((0,1)(2,3)(4,5)(6,7) then (0,4)(1,2)(3,7)(5,6), four
times); for any other power of two, the reflected Gray code: at step s rank r holds block r XOR g(s),
g(s) = s XOR (s >> 1), so each swap pairs r with r XOR 2^k. Either way every rank meets every block once
per interval and the last step is at home (tests simulate G = 2, 4, 8, 16 and check G = 2, 4 for real).

**What an event reads (§4.1: "the input node embeddings ... are the results from the ... previous time
interval").** A source u reads E_u = merge(live h^s_u, h^g_u as the interval started); a destination or
negative v reads E_v = merge(h^s_v as the interval started, live h^g_v from the block). The S-update of u
and the G-update of v are applied at once (DyGNN, dgbench.models.dygnn), so later events of the grid see
them; S- and G-state of one vertex meet again when the interval ends and its block is home. The grids
of one step touch disjoint state, so the result depends on the grid order only: a one-process run with
``--grid-ranks G`` (virtual ranks, trained one after another) equals the G-rank run exactly.

**Parameters** are data parallel: per step, each rank trains its grid in chronological mini-batches of
``--batch-size`` events; mini-batch m of every rank forms one optimiser step (gradients summed by one
all-reduce, the loss divided by the step's global event count). Negatives: one per event, uniform over
the negative-pool vertices of the held destination block (the only embeddings there).

**Ping-pong pipeline (§4.3).** Two buffers: while step s computes on the current block and grid, the next
grid's mini-batches are built on a background thread (the "load", host arrays to tensors; its bytes are
counted as ``grid_load_bytes``) and the read-only half of the next block (the S copy) is exchanged with
the next partner asynchronously. The live G half can only leave once the step's updates are in it, so it
is exchanged after the step. ``--no-pipeline`` does the same work in order; the numbers are identical.

**Alg. 7 pre-pass.** ``--sparsify f`` keeps ceil(f d) of every source's d training events per epoch
(:func:`dgbench.trainers.continuous.tgcn.sampling.sparsify.sparsify_events`, by ``--sparsify-sampler``, SIS by
default) before the grid is cut, as the paper's Sampling(E) -> Partition(E') workflow; throughput counts
the events trained.

**Baseline.** ``--live`` (one grid range) reads live S- and G-state everywhere: DyGNN as its own paper
trains it, one event after another, which T-GCN compares against on one device (§6.2).

**Evaluation.** After each epoch the states are gathered and every rank scores the run's fixed evaluation
sets through the evaluator of every scheme (dgbench/tasks/evaluator.py): a batch's positives and
negatives from the embeddings at the batch's start, as the family's loop scores, then the batch's
interactions update their endpoints (DyGNN, immediately); the state is restored between sets.
"""
from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.nn import functional as F

from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.models.dygnn import DyGNN
from dgbench.models.temporal import BatchInputs, StateLayout
from dgbench.options import Options, option
from dgbench.tasks.evalset import EvaluationSet
from dgbench.tasks.evaluator import Evaluator, SplitFigures, split_name
from dgbench.tasks.options import evaluation_sets
from dgbench.trainers.continuous.data import BatchPlan, BatchPlanner, EventStream, StreamProblem, gap_statistics
from dgbench.trainers.continuous.loop import BatchCounters
from dgbench.trainers.continuous.tgcn.sampling.reference import METHODS
from dgbench.trainers.continuous.tgcn.sampling.sparsify import sparsify_events
from dgbench.trainers.continuous.state import NodeState
from dgbench.trainers.contract import ContinuousScheme, DrySend, Partition, register_scheme
from dgbench.trainers.epochs import Selection, run_epochs
from dgbench.trainers.gradients import GradientSync

if TYPE_CHECKING:
    from dgbench.trainers.experiment import ResolvedRun

GRAD_TAG = "grad_allreduce"  # the continuous family's name for the gradient all-reduce
SWAP_LIVE_TAG, SWAP_SNAPSHOT_TAG, SWAP_ID_TAG = "tgcn_swap_live", "tgcn_swap_snapshot", "tgcn_swap_id"
EVAL_TAG = "tgcn_eval_gather"
ALG6_PAIRS = (((0, 1), (2, 3), (4, 5), (6, 7)), ((0, 4), (1, 2), (3, 7), (5, 6)))


# ---------------------------------------------------------------- schedule and grid
def swap_partners(parts: int) -> list[np.ndarray]:
    """partner[r] of every rank for the swap before each of the ``parts`` training steps of an interval."""
    if parts < 1 or parts & (parts - 1):
        raise DgbenchError(f"tgcn's swap schedule needs a power-of-two number of grid ranks, got {parts}")
    ranks = np.arange(parts, dtype=np.int64)
    if parts == 8:  # Alg. 6
        out = []
        for _ in range(4):
            for pairs in ALG6_PAIRS:
                partner = ranks.copy()
                for a, b in pairs:
                    partner[a], partner[b] = b, a
                out.append(partner)
        return out
    gray = [s ^ (s >> 1) for s in range(parts)] + [0]  # the last step is at home
    return [ranks ^ (gray[s] ^ gray[s - 1]) for s in range(1, parts + 1)]


def held_blocks(parts: int) -> list[np.ndarray]:
    """The block every rank holds at each training step (rank r receives its partner's block)."""
    held, out = np.arange(parts, dtype=np.int64), []
    for partner in swap_partners(parts):
        held = held[partner]
        out.append(held.copy())
    return out


ID_ORDERS = ("permuted", "given")
PERMUTATION_SEED = 20_230_425  # fixed: the grid's permutation depends on the vertex count only


def grid_positions(num_nodes: int, id_order: str) -> np.ndarray:
    """position[id]: where vertex ``id`` sits in the order the grid's ranges cut: a fixed pseudo-random
    permutation (``permuted``) or the ids themselves (``given``)."""
    if id_order == "given":
        return np.arange(num_nodes, dtype=np.int64)
    if id_order != "permuted":
        raise DgbenchError(f"unknown id order {id_order!r}: one of {ID_ORDERS}")
    return np.random.default_rng([PERMUTATION_SEED, num_nodes]).permutation(num_nodes).astype(np.int64)


def vertex_ranges(num_nodes: int, parts: int) -> np.ndarray:
    """Bounds of ``parts`` contiguous id ranges of (nearly) equal size: range r is [b[r], b[r+1])."""
    return (np.arange(parts + 1, dtype=np.int64) * num_nodes) // parts


def interval_bounds(t: np.ndarray, intervals: int, split: str) -> np.ndarray:
    """Positions cutting time-sorted ``t`` into intervals: equal width in time, or equal event counts."""
    n = len(t)
    if split == "count" or n == 0 or t[0] == t[-1]:
        return (np.arange(intervals + 1, dtype=np.int64) * n) // intervals
    edges = t[0] + (t[-1] - t[0]) * np.arange(1, intervals) / intervals
    return np.concatenate([[0], np.searchsorted(t, edges, side="left"), [n]]).astype(np.int64)


@dataclass
class Grid:
    """grids[k][i][j]: event ids of time interval k from source range i to destination range j."""

    grids: list[list[list[np.ndarray]]]
    events: int

    @classmethod
    def cut(cls, stream: EventStream, events: np.ndarray, ranges: np.ndarray, intervals: int, split: str,
            positions: np.ndarray | None = None) -> "Grid":
        """``ranges`` cut grid positions (:func:`grid_positions`; the ids themselves when None)."""
        parts = len(ranges) - 1
        cuts = interval_bounds(_event_times(stream, events), intervals, split)
        grids = []
        for k in range(intervals):  # one interval's endpoints at a time (a streamed stream reads just those)
            chunk = events[cuts[k]:cuts[k + 1]]
            src, dst = stream.src[chunk], stream.dst[chunk]
            if positions is not None:
                src, dst = positions[src], positions[dst]
            src_block = np.searchsorted(ranges, src, side="right") - 1
            dst_block = np.searchsorted(ranges, dst, side="right") - 1
            key = src_block * parts + dst_block
            order = np.argsort(key, kind="stable")  # stream order within each grid
            counts = np.bincount(key, minlength=parts * parts)
            pieces = np.split(chunk[order], np.cumsum(counts)[:-1])
            grids.append([[pieces[i * parts + j] for j in range(parts)] for i in range(parts)])
        return cls(grids, len(events))


def _event_times(stream: EventStream, events: np.ndarray) -> np.ndarray:
    """The times of sorted ``events``; a contiguous range is read as one slice (block by block when streamed)."""
    if len(events) and int(events[-1]) - int(events[0]) + 1 == len(events):
        return stream.t[int(events[0]):int(events[-1]) + 1]
    return stream.t[events]


# ---------------------------------------------------------------- state
@dataclass
class Block:
    """Destination block ``index``: live G-state and the S-state copied when the interval started."""

    index: int
    g_live: torch.Tensor  # (n, 2d + 1): h^g, C^g, last G-update time
    s_copy: torch.Tensor  # (n, 2d + 1): h^s, C^s, last S-update time


@dataclass
class HomeRange:
    """Grid rank i's vertex range: live S-state, its G-state as the interval started, the block it holds."""

    index: int
    s_live: torch.Tensor
    g_copy: torch.Tensor
    block: Block

    @classmethod
    def empty(cls, index: int, size: int, d: int) -> "HomeRange":
        part = torch.zeros(size, 2 * d + 1)
        part[:, 2 * d] = -1.0  # never updated
        return cls(index, part.clone(), part.clone(), Block(index, part.clone(), part.clone()))

    def start_interval(self) -> None:
        """The block is home: take the copies every read of this interval uses."""
        assert self.block.index == self.index
        self.g_copy = self.block.g_live.clone()
        self.block.s_copy = self.s_live.clone()

    def rows(self) -> torch.Tensor:
        """Full DyGNN rows [h^s C^s | h^g C^g | t_g | t_s] of this range (block at home)."""
        d2 = self.s_live.shape[1] - 1
        g = self.block.g_live
        return torch.cat([self.s_live[:, :d2], g[:, :d2], g[:, d2:], self.s_live[:, d2:]], dim=1)


def _source_rows(home: HomeRange, local: torch.Tensor) -> torch.Tensor:
    d2 = home.s_live.shape[1] - 1
    s, g = home.s_live[local], home.g_copy[local]
    return torch.cat([s[:, :d2], g[:, :d2], g[:, d2:], s[:, d2:]], dim=1)


def _destination_rows(block: Block, local: torch.Tensor) -> torch.Tensor:
    d2 = block.g_live.shape[1] - 1
    s, g = block.s_copy[local], block.g_live[local]
    return torch.cat([s[:, :d2], g[:, :d2], g[:, d2:], s[:, d2:]], dim=1)


# ---------------------------------------------------------------- one rank's training
@dataclass
class Chunk:
    """One mini-batch of one grid, as tensors (built on the loader thread when pipelined)."""

    src_local: torch.Tensor
    dst_local: torch.Tensor
    neg_local: torch.Tensor
    ids: torch.Tensor  # role-separated slots: u, N + v, N + negative
    t: torch.Tensor
    nbytes: int


@dataclass
class RankFigures:
    compute_s: float = 0.0
    load_s: float = 0.0
    load_exposed_s: float = 0.0
    grid_load_bytes: int = 0
    swaps: int = 0
    async_swap_bytes: int = 0
    sync_swap_bytes: int = 0
    trace: list[list[list[int]]] = field(default_factory=list)  # [interval][step]: blocks held by local ranks

    def summary(self) -> dict[str, Any]:
        return {"tgcn_compute_s": self.compute_s, "tgcn_load_s": self.load_s,
                "tgcn_load_exposed_s": self.load_exposed_s,
                "tgcn_load_overlap": 1 - self.load_exposed_s / self.load_s if self.load_s > 0 else 0.0,
                "tgcn_grid_load_bytes": self.grid_load_bytes, "tgcn_swaps": self.swaps,
                "tgcn_async_swap_bytes": self.async_swap_bytes, "tgcn_sync_swap_bytes": self.sync_swap_bytes,
                "tgcn_swap_trace": self.trace}


class GridTrainer:
    """DyGNN over the grid on this process: one grid rank (G ranks) or every grid rank in turn (one process)."""

    def __init__(self, ctx: DistContext, stream: EventStream, model: DyGNN, options: "TgcnOptions", batch_size: int,
                 lr: float, seed: int):
        self.ctx, self.stream, self.model, self.options = ctx, stream, model, options
        self.batch_size, self.seed = batch_size, seed
        self.parts = options.grid_ranks or ctx.world_size
        self.local = list(range(self.parts)) if ctx.world_size == 1 else [ctx.rank]
        self.ranges = vertex_ranges(stream.num_nodes, self.parts)
        self.positions = grid_positions(stream.num_nodes, options.id_order)  # position[id]
        self.ids_at = np.argsort(self.positions)  # id at each grid position
        self.held = held_blocks(self.parts)
        self.partners = swap_partners(self.parts)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.gradients = GradientSync(ctx.comm, list(model.parameters()), GRAD_TAG)
        self.dtype = torch.get_default_dtype()
        pool = np.zeros(stream.num_nodes, dtype=bool)
        pool[self.positions[stream.negative_pool]] = True
        self.pool = [np.flatnonzero(pool[a:b]) for a, b in zip(self.ranges[:-1], self.ranges[1:])]
        self.figures = RankFigures()
        self.losses: list[float] = []
        self.loader = ThreadPoolExecutor(max_workers=1) if not options.no_pipeline else None
        self.homes: dict[int, HomeRange] = {}
        self.events_trained = 0
        self.evaluation: list[EvaluationSet] = []  # the run's fixed evaluation sets (set by train_grid)

    # ---- data
    def epoch_grid(self, epoch: int) -> Grid:
        a, b = self.stream.ranges["train"]
        events = np.arange(a, b, dtype=np.int64)
        if self.options.sparsify > 0:
            kept = sparsify_events(self.stream.src[a:b], self.stream.t[a:b], self.options.sparsify,
                                   self.options.sparsify_sampler, self.seed, epoch, self.options.sparsify_decay)
            events = a + kept
        return Grid.cut(self.stream, events, self.ranges, self.options.intervals, self.options.interval_split,
                        self.positions)

    def build_chunks(self, grid: Grid, k: int, step: int, rank: int) -> list[Chunk]:
        """Mini-batches of grid (k, rank, held block) with their negatives (drawn from the block)."""
        start = time.perf_counter()
        block = int(self.held[step][rank])
        events = grid.grids[k][rank][block]
        lo_src, lo_dst = self.ranges[rank], self.ranges[block]
        n = self.stream.num_nodes
        chunks = []
        candidates = self.pool[block] if len(self.pool[block]) else np.arange(self.ranges[block + 1] - lo_dst)
        for m, first in enumerate(range(0, len(events), self.batch_size)):
            part = events[first:first + self.batch_size]
            rng = np.random.default_rng([self.seed, 14, k, rank, block, m])
            neg = candidates[rng.integers(0, len(candidates), len(part))]
            src = self.positions[self.stream.src[part]] - lo_src
            dst = self.positions[self.stream.dst[part]] - lo_dst
            ids = np.concatenate([self.ids_at[src + lo_src], n + self.ids_at[dst + lo_dst],
                                  n + self.ids_at[neg + lo_dst]])
            t = torch.from_numpy(self.stream.t[part]).to(self.dtype)
            chunk = Chunk(torch.from_numpy(src), torch.from_numpy(dst), torch.from_numpy(neg), torch.from_numpy(ids),
                          t, 0)
            chunk.nbytes = sum(x.numel() * x.element_size() for x in (chunk.src_local, chunk.dst_local,
                                                                      chunk.neg_local, chunk.t))
            chunks.append(chunk)
        self.figures.load_s += time.perf_counter() - start
        return chunks

    def step_chunks(self, grid: Grid, k: int, step: int) -> dict[int, list[Chunk]]:
        return {r: self.build_chunks(grid, k, step, r) for r in self.local}

    # ---- one mini-batch of one grid rank
    def chunk_loss(self, home: HomeRange, chunk: Chunk, global_count: int) -> torch.Tensor:
        model, block, b = self.model, home.block, len(chunk.t)
        if self.options.live:
            return self._live_chunk_loss(home, chunk, global_count)
        rows = torch.cat([_source_rows(home, chunk.src_local), _destination_rows(block, chunk.dst_local),
                          _destination_rows(block, chunk.neg_local)])
        inputs = BatchInputs(rows, chunk.t, chunk.t.new_zeros(b, model.edge_dim))
        inputs.root_ids = chunk.ids
        out = model(inputs)
        loss = (F.binary_cross_entropy_with_logits(out.pos_logits, torch.ones_like(out.pos_logits), reduction="sum")
                + F.binary_cross_entropy_with_logits(out.neg_logits, torch.zeros_like(out.neg_logits),
                                                     reduction="sum")) / global_count
        d = model.memory_dim
        new = out.new_rows
        home.s_live = home.s_live.index_copy(0, chunk.src_local, torch.cat([new[:b, :2 * d], new[:b, 4 * d + 1:]], 1))
        block.g_live = block.g_live.index_copy(0, chunk.dst_local, new[b:, 2 * d:4 * d + 1])
        return loss

    def _live_chunk_loss(self, home: HomeRange, chunk: Chunk, global_count: int) -> torch.Tensor:
        """One range, no copies: every read sees the live S- and G-state (plain sequential DyGNN)."""
        b, d = len(chunk.t), self.model.memory_dim
        ids = torch.cat([chunk.src_local, chunk.dst_local, chunk.neg_local])
        inputs = BatchInputs(home.rows()[ids], chunk.t, chunk.t.new_zeros(b, self.model.edge_dim))
        inputs.root_ids = ids
        out = self.model(inputs)
        loss = (F.binary_cross_entropy_with_logits(out.pos_logits, torch.ones_like(out.pos_logits), reduction="sum")
                + F.binary_cross_entropy_with_logits(out.neg_logits, torch.zeros_like(out.neg_logits),
                                                     reduction="sum")) / global_count
        endpoints, new = ids[:2 * b], out.new_rows
        home.s_live = home.s_live.index_copy(0, endpoints, torch.cat([new[:, :2 * d], new[:, 4 * d + 1:]], 1))
        home.block.g_live = home.block.g_live.index_copy(0, endpoints, new[:, 2 * d:4 * d + 1])
        return loss

    # ---- swaps
    def _exchange(self, tensor: torch.Tensor, partner: int, tag: str, asynchronous: bool):
        world = self.ctx.world_size
        send = [0] * world
        send[partner] = len(tensor)
        recv_rows = int(self.ranges[self.held_block_of(partner) + 1] - self.ranges[self.held_block_of(partner)])
        recv = [0] * world
        recv[partner] = recv_rows
        nbytes = tensor.numel() * tensor.element_size()
        if asynchronous:
            self.figures.async_swap_bytes += nbytes
            return self.ctx.comm.all_to_all_single_async(tensor, send, recv, tag)
        self.figures.sync_swap_bytes += nbytes
        return self.ctx.comm.all_to_all_single(tensor, send, recv, tag)

    def _exchange_id(self, index: int, partner: int) -> int:
        """The block's id travels with it, so the trace records what arrived, not what was scheduled."""
        splits = [0] * self.ctx.world_size
        splits[partner] = 1
        got = self.ctx.comm.all_to_all_single(torch.tensor([[index]], dtype=torch.int64), splits, splits, SWAP_ID_TAG)
        return int(got[0, 0])

    def held_block_of(self, rank: int) -> int:
        return self._held_now[rank]

    def swap(self, step: int, prefetched: tuple | None) -> None:
        """Move the blocks as the schedule says before training step ``step``."""
        self.figures.swaps += 1
        partner = self.partners[step]
        if self.ctx.world_size == 1:  # virtual ranks: the same permutation, in memory
            blocks = {r: self.homes[r].block for r in self.local}
            for r in self.local:
                self.homes[r].block = blocks[int(partner[r])]
            self._held_now = self.held[step].copy()
            return
        home, rank = self.homes[self.ctx.rank], self.ctx.rank
        other = int(partner[rank])
        if other == rank:
            return
        if prefetched is None:
            s_copy = self._exchange(home.block.s_copy, other, SWAP_SNAPSHOT_TAG, False)
        else:
            s_copy, wait = prefetched
            wait()
        g_live = self._exchange(home.block.g_live, other, SWAP_LIVE_TAG, False)
        received = self._exchange_id(home.block.index, other)
        self._held_now = self.held[step].copy()
        home.block = Block(received, g_live, s_copy)

    def prefetch_snapshot(self, step: int) -> tuple | None:
        """Start sending the read-only half of the held block to the next step's partner."""
        if self.ctx.world_size == 1 or self.options.no_pipeline:
            return None
        rank = self.ctx.rank
        other = int(self.partners[step][rank])
        if other == rank:
            return None
        return self._exchange(self.homes[rank].block.s_copy, other, SWAP_SNAPSHOT_TAG, True)

    # ---- epochs
    def reset(self) -> None:
        d = self.model.memory_dim
        self.homes = {r: HomeRange.empty(r, int(self.ranges[r + 1] - self.ranges[r]), d) for r in self.local}
        self._held_now = np.arange(self.parts)

    def train_epoch(self, epoch: int, timer) -> tuple[float, int]:
        self.model.train()
        self.reset()
        self.losses = []
        self.figures = RankFigures()  # the record keeps the last epoch's
        grid = self.epoch_grid(epoch)
        steps = [(k, s) for k in range(self.options.intervals) for s in range(self.parts)]
        pending: Future | None = None
        current = self.step_chunks(grid, 0, 0) if steps else {}
        prefetched = None
        for index, (k, s) in enumerate(steps):
            if s == 0:
                for r in self.local:
                    self.homes[r].start_interval()
                self.figures.trace.append([])
            self.swap(s, prefetched)
            self.figures.trace[-1].append([self.homes[r].block.index for r in self.local])
            nxt = steps[index + 1] if index + 1 < len(steps) else None
            if pending is not None:
                waited = time.perf_counter()
                current = pending.result()
                self.figures.load_exposed_s += time.perf_counter() - waited
            elif index > 0:
                current = self.step_chunks(grid, k, s)
            pending = self.loader.submit(self.step_chunks, grid, *nxt) if nxt and self.loader else None
            # the next step's snapshot half can travel now unless the next step starts a new interval
            prefetched = self.prefetch_snapshot(nxt[1]) if nxt and nxt[1] > 0 else None
            self.train_step(grid, k, s, current)
        self.events_trained = sum(len(grid.grids[k][r][j]) for k in range(self.options.intervals)
                                  for r in self.local for j in range(self.parts))
        return (float(np.mean(self.losses)) if self.losses else 0.0), grid.events

    def train_step(self, grid: Grid, k: int, s: int, chunks: dict[int, list[Chunk]]) -> None:
        """Every mini-batch index m of this step: each grid rank's m-th chunk, one summed optimiser step."""
        counts = [len(grid.grids[k][r][int(self.held[s][r])]) for r in range(self.parts)]
        batches = max((math.ceil(c / self.batch_size) for c in counts), default=0)
        for m in range(batches):
            global_count = sum(min(self.batch_size, max(0, c - m * self.batch_size)) for c in counts)
            self.optimizer.zero_grad(set_to_none=True)
            started = time.perf_counter()
            total = torch.zeros(())
            for r in self.local:
                if m < len(chunks[r]):
                    loss = self.chunk_loss(self.homes[r], chunks[r][m], global_count)
                    loss.backward()
                    total = total + loss.detach()
                    self.figures.grid_load_bytes += chunks[r][m].nbytes
            self.figures.compute_s += time.perf_counter() - started
            summed = self.gradients.synchronise(total.reshape(1))
            self.optimizer.step()
            self.losses.append(float(summed[0]) if summed is not None else float(total))

    def predicted_bytes(self) -> dict[str, int]:
        """What this rank sends per epoch by tag: before each step it sends the block it holds (its live G
        half and its S copy, 2d + 1 values per vertex each, and its id); one flat gradient all-reduce (parameters and
        the loss) per optimiser step. (Evaluation's state gather, like every scheme's evaluation traffic, falls
        outside the epoch's counters.)"""
        if self.ctx.world_size == 1:
            return {}
        rank, d = self.ctx.rank, self.model.memory_dim
        size = torch.finfo(self.dtype).bits // 8
        before = [np.arange(self.parts)] + self.held[:-1]
        rows = sum(int(self.ranges[b[rank] + 1] - self.ranges[b[rank]]) for b in before)
        block = self.options.intervals * rows * (2 * d + 1) * size
        params = sum(p.numel() for p in self.model.parameters())
        return {SWAP_LIVE_TAG: block, SWAP_SNAPSHOT_TAG: block, SWAP_ID_TAG: self.options.intervals * self.parts * 8,
                GRAD_TAG: len(self.losses) * (params + 1) * size}

    # ---- evaluation: gathered state, the run's evaluation sets
    def full_rows(self) -> torch.Tensor:
        """Every vertex's row, in id order (the ranges hold grid positions)."""
        if self.ctx.world_size == 1:
            by_position = torch.cat([self.homes[r].rows() for r in self.local])
        else:
            by_position = self.ctx.comm.all_gather_uneven(self.homes[self.ctx.rank].rows(), EVAL_TAG)
        return by_position[torch.from_numpy(self.positions)]

    @torch.no_grad()
    def evaluate(self, which: tuple[str, ...] = ("val", "test")) -> dict[str, dict[str, float]]:
        """Validation then test (of ``which``) of every evaluation set from the same trained state (restored
        between sets), through the evaluator every scheme uses; every rank computes the same. Test alone
        still carries the state through the validation events (their scores are not taken)."""
        self.model.eval()
        trained = self.full_rows()
        out = {}
        for index, evaluation in enumerate(self.evaluation):
            rows = trained.clone()
            for split in ("val", "test") if "test" in which else ("val",):
                figures = self._evaluate_set(evaluation, split, rows, score=split in which)
                if figures is not None:
                    out[split_name(split, index, evaluation)] = figures.as_metrics()
        return out

    def scoring_state(self) -> tuple[dict[str, torch.Tensor], dict[int, HomeRange]]:
        """A copy of what the scores depend on: the parameters and this rank's ranges (S-state, G-state
        and the block it holds; all ranges are home after an epoch)."""
        homes = {r: HomeRange(home.index, home.s_live.clone(), home.g_copy.clone(),
                              Block(home.block.index, home.block.g_live.clone(), home.block.s_copy.clone()))
                 for r, home in self.homes.items()}
        return {name: value.detach().clone() for name, value in self.model.state_dict().items()}, homes

    def restore_scoring_state(self, kept: tuple[dict[str, torch.Tensor], dict[int, HomeRange]]) -> None:
        parameters, self.homes = kept
        self.model.load_state_dict(parameters)

    def _evaluate_set(self, evaluation: EvaluationSet, split: str, rows: torch.Tensor,
                      score: bool = True) -> SplitFigures | None:
        negatives = evaluation.get(split, "negatives")
        planner = BatchPlanner(self.stream, None, 0, "recent", self.seed, lambda src: np.ones(len(src), dtype=bool),
                               lambda ids: None)
        planner.candidates = {split: (evaluation.get(split, "negative_src"), negatives)}
        first = self.stream.ranges[split][0]
        scores = np.full((len(negatives), 1 + negatives.shape[1]), np.nan)
        for index, (a, b) in enumerate(planner.batch_bounds(split, self.batch_size)):
            plan = planner.plan(split, index, a, b)
            scores[plan.events - first] = self._score_then_update(plan, rows)
        if not score:  # the passes were for the state they leave in ``rows``
            return None
        return Evaluator(evaluation).score(split, scores[:, 0], np.where(negatives >= 0, scores[:, 1:], np.nan))

    def _score_then_update(self, plan: BatchPlan, rows: torch.Tensor) -> np.ndarray:
        """(b, 1 + K) logits from every root's E(t-) at the batch's start (as the family's loop scores), then
        the batch's interactions update their endpoints (immediately, DyGNN)."""
        b = len(plan.events)
        logits = self._score_candidates(plan, rows)
        ids = torch.from_numpy(np.concatenate([plan.src, plan.dst, plan.dst]))  # no negative needed to update
        inputs = BatchInputs(rows[ids], torch.from_numpy(self.stream.t[plan.events]).to(self.dtype),
                             torch.zeros(b, self.model.edge_dim))
        inputs.root_ids = ids
        rows.index_copy_(0, ids[:2 * b], self.model(inputs).new_rows)
        return logits.double().numpy()

    def _score_candidates(self, plan: BatchPlan, rows: torch.Tensor) -> torch.Tensor:
        """(b, 1 + K) logits of the batch's events and candidates, sharing what the candidates of an event have
        in common: every distinct root vertex is read and embedded once (E(t-) of Eq. 6/7 depends on the
        vertex only, all rows being those at the batch's start), and each event's source is projected once
        by the predictor for its 1 + K candidates (:meth:`EdgePredictor.score_blocks`; the strategies that
        draw a negative source per candidate project each of those). The equations of scoring candidate by
        candidate; products over other row counts may round differently (docs/performance.md)."""
        b, k = len(plan.events), plan.candidates
        distinct, slot = np.unique(plan.roots, return_inverse=True)
        embedded = self.model.embed(None, rows[torch.from_numpy(distinct)], None, None)
        h = embedded.index_select(0, torch.from_numpy(slot.reshape(-1)))
        if plan.fixed_source:  # roots [src, dst, K·dst']: one source block, 1 + K destination blocks
            sources, destinations = h[:b], h[b:(2 + k) * b]
        else:  # roots [src, dst, K·src', K·dst']
            sources = torch.cat([h[:b], h[2 * b:(2 + k) * b]])
            destinations = torch.cat([h[b:2 * b], h[(2 + k) * b:(2 + 2 * k) * b]])
        return self.model.predictor.score_blocks(sources, destinations, b)


# ---------------------------------------------------------------- the scheme
@dataclass(frozen=True)
class TgcnOptions(Options):
    intervals: int = option(11, "Time intervals of the 3D grid (§4.1; §6.4 uses 11).", positive=True)
    interval_split: str = option("width", "Time intervals of equal width in time, or of equal event counts.",
                                 choices=("width", "count"))
    grid_ranks: int = option(0, "Source/destination ranges of the grid (0 = the world size); on one process, "
                                "that many virtual ranks trained in turn (equal to the multi-rank run).", minimum=0)
    no_pipeline: bool = option(False, "Turn off §4.3's ping-pong pipeline (same numbers, no overlap).")
    live: bool = option(False, "One grid range, every read of live state: plain sequential DyGNN (the paper's "
                               "single-device DyGNN baseline); needs one grid rank.")
    sparsify: float = option(0.0, "Alg. 7 pre-pass: keep this fraction of each source's training events per "
                                  "epoch before partitioning (0 = off; the paper samples 0.5).", minimum=0.0,
                             upper=1.0)
    sparsify_sampler: str = option("sis", "Sampler of the pre-pass (SIS, or a baseline with the same law).",
                                   choices=tuple(METHODS))
    sparsify_decay: float = option(0.0, "Time-decay rate of the pre-pass weights (0 = uniform).", minimum=0.0)
    id_order: str = option("permuted", "Order the grid's equal vertex ranges cut: a fixed pseudo-random permutation "
                                       "of the ids (ids carry no order, as the paper assumes), or the ids as given "
                                       "(paper-literal; id-ordered streams can leave a rank without events).",
                           choices=ID_ORDERS)


@register_scheme
class Tgcn(ContinuousScheme[TgcnOptions]):
    name = "tgcn"
    summary = "Streaming T-GCN: time x source x destination grid, Alg. 6 block swaps, ping-pong pipeline (DyGNN)"
    Options = TgcnOptions
    models = ("dygnn",)
    batch_protocol_refusal = ("its grid fixes what an event reads (§4.1: live state of its own range, the other "
                              "role's state as the time interval started), and DyGNN updates immediately")
    conformance = ({"no_pipeline": True, "sparsify": 0.5, "intervals": 3}, {"id_order": "given", "intervals": 2})

    def validate(self, options: TgcnOptions, world_size: int) -> None:
        parts = options.grid_ranks or world_size
        if world_size > 1 and parts != world_size:
            raise DgbenchError(f"--grid-ranks {options.grid_ranks}: with {world_size} ranks the grid has "
                               f"{world_size} ranges (virtual grid ranks need --nproc 1)")
        swap_partners(parts)
        if options.live and parts != 1:
            raise DgbenchError(f"--live reads live state, which only one grid range has (grid ranks: {parts})")

    def streamed_refusal(self, options: TgcnOptions) -> str:
        """The grid is cut one time interval at a time and its mini-batches read their events from the store;
        Alg. 7's sparsification draws ceil(f d) of each source's d training events at once (§5)."""
        if options.sparsify > 0:
            return (f"--sparsify {options.sparsify:g} (Alg. 7, §5) draws each source's kept events from all its "
                    f"training events in one joint draw, which reads every training event at once")
        return ""

    def reference_options(self, options: dict[str, Any], world_size: int) -> dict[str, Any] | None:
        """Its own one-process run over the same grid (virtual grid ranks), not ``single``."""
        return {**options, "grid_ranks": world_size} if world_size > 1 else dict(options)

    def partition(self, problem: StreamProblem, parts: int, options: TgcnOptions) -> Partition:
        grid_parts = options.grid_ranks or parts
        ranges = vertex_ranges(problem.stream.num_nodes, grid_parts)
        positions = grid_positions(problem.stream.num_nodes, options.id_order)
        owner = np.searchsorted(ranges, positions, side="right") - 1
        real_owner = owner if parts > 1 else np.zeros_like(owner)
        return Partition(real_owner.astype(np.int64), "range", {"grid_ranks": grid_parts, "id_order": options.id_order},
                         {"grid_owner": owner.astype(np.int64)})

    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition, options: TgcnOptions
                   ) -> NodeState:
        raise DgbenchError("tgcn places node state itself (home ranges and travelling blocks); it trains "
                           "through its own driver, not the family's loop")

    def record_extras(self, options: TgcnOptions, partition: Partition) -> dict[str, Any]:
        parts = partition.report.get("grid_ranks", 1)
        return {"tgcn_grid_ranks": parts, "tgcn_schedule": "alg6" if parts == 8 else "gray-xor",
                "tgcn_id_order": options.id_order,
                "tgcn_held_blocks": [h.tolist() for h in held_blocks(parts)]}

    def train_rank(self, ctx: DistContext, run: ResolvedRun, partition: Partition, problem: StreamProblem
                   ) -> dict[str, Any] | None:
        return train_grid(ctx, run, partition, problem)

    def dry_run_sends(self, ctx: DistContext, run: ResolvedRun, partition: Partition, problem: StreamProblem
                      ) -> dict[str, DrySend]:
        """What rank ``ctx.rank`` sends in the run's last training epoch (dgbench project), from the grid and
        the swap schedule train_epoch runs: before each step the held block (live G half, S copy and its id)
        goes to that step's partner; one all-reduce of the parameters and the loss per optimiser step (the
        step's longest grid in mini-batches). :meth:`GridTrainer.predicted_bytes`' totals, per peer."""
        options, task, stream = run.scheme_options, run.task, problem.stream
        model = run.model.build(run.model_options, memory_dim=task.memory_dim, edge_dim=stream.edge_dim,
                                time_shift=0.0, time_scale=1.0)  # only its widths and parameter count are read
        trainer = GridTrainer(ctx, stream, model, options, task.batch_size, run.config.lr, run.config.seed)
        if trainer.loader is not None:
            trainer.loader.shutdown()
        grid = trainer.epoch_grid(run.config.epochs - 1)
        rank, world, parts = ctx.rank, ctx.world_size, trainer.parts
        swaps, rows = np.zeros(world, np.int64), np.zeros(world, np.int64)
        before = [np.arange(parts)] + trainer.held[:-1]  # the block each rank holds when step s swaps
        for step, partner in enumerate(trainer.partners):
            other, block = int(partner[rank]), int(before[step][rank])
            if other != rank:
                swaps[other] += options.intervals
                rows[other] += options.intervals * int(trainer.ranges[block + 1] - trainer.ranges[block])
        steps = sum(max(math.ceil(len(grid.grids[k][r][int(trainer.held[s][r])]) / task.batch_size)
                        for r in range(parts)) for k in range(options.intervals) for s in range(parts))
        size = torch.finfo(trainer.dtype).bits // 8
        block_elements = tuple(int(n) for n in rows * (2 * model.memory_dim + 1))
        reduced = [0] * world
        reduced[rank] = steps * (sum(p.numel() for p in model.parameters()) + 1)
        calls = int(swaps.sum())
        return {SWAP_LIVE_TAG: DrySend("all_to_all", size, block_elements, calls),
                SWAP_SNAPSHOT_TAG: DrySend("all_to_all", size, block_elements, calls),
                SWAP_ID_TAG: DrySend("all_to_all", 8, tuple(int(n) for n in swaps), calls),
                GRAD_TAG: DrySend("all_reduce", size, tuple(reduced), steps)}


def train_grid(ctx: DistContext, run: ResolvedRun, partition: Partition, problem: StreamProblem) -> dict[str, Any]:
    """This rank's part of a tgcn run, in the shape the continuous family's record expects."""
    task, options = run.task, run.scheme_options
    assert isinstance(options, TgcnOptions)
    torch.manual_seed(run.config.seed)  # identical initial weights on every rank
    stream = problem.stream
    gap_mean, gap_std = gap_statistics(stream)  # one bounded pass when the stream is streamed
    model = run.model.build(run.model_options, memory_dim=task.memory_dim, edge_dim=stream.edge_dim,
                            time_shift=gap_mean, time_scale=gap_std)
    if not isinstance(model, DyGNN):
        raise DgbenchError(f"scheme 'tgcn' trains DyGNN (§2.2), not '{run.model.name}'")
    trainer = GridTrainer(ctx, stream, model, options, task.batch_size, run.config.lr, run.config.seed)
    trainer.evaluation = evaluation_sets(run.config.dataset, task.negatives, task.extra_negatives, task.eval_negatives,
                                         task.max_events)
    selection = Selection(run.config.eval_every, validate=lambda: trainer.evaluate(("val",)),
                          test=lambda: trainer.evaluate(("test",)), keep=trainer.scoring_state,
                          restore=trainer.restore_scoring_state)
    figures = run_epochs(ctx, epochs=run.config.epochs, train_epoch=trainer.train_epoch, evaluate=trainer.evaluate,
                         label=f"tgcn/{run.model.name}", unit="events", selection=selection)
    steps = options.intervals * trainer.parts
    for f in figures:
        grad = f["comm_by_tag"].get(GRAD_TAG, {})
        f.update(grad_allreduce_s=grad.get("seconds", 0.0), grad_allreduce_bytes=grad.get("bytes", 0.0),
                 iterations=max(1, len(trainer.losses)), grid_steps=steps)
    if trainer.loader is not None:
        trainer.loader.shutdown()
    counters = {**BatchCounters().summary(), "batches": len(trainer.losses), "events": trainer.events_trained,
                **trainer.figures.summary(), "tgcn_predicted_bytes": trainer.predicted_bytes()}
    return {"figures": figures, "counters": counters, "microbatches": {}, "losses": trainer.losses,
            "state_row_width": model.layout.width, "parameters": sum(p.numel() for p in model.parameters()),
            "partition": partition if ctx.is_main else None,
            "selection": selection.summary() if selection.active else None}
