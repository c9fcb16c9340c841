"""Placements: where a rank's snapshots live, the block views its layers run through, and what moves.

A placement never changes the model. For each block of timesteps it hands the model a
:class:`~dgbench.models.contract.BlockView` (graph aggregation and attention, layouts, per-vertex
sequences) and scores this rank's share of the link-prediction pairs. Two kinds exist, used by the
discrete schemes (their modules under ``trainers/discrete/<paper>/``):

* :class:`TimePlacement` — ranks split each block's timesteps (single, checkpoint: one rank; snapshot:
  ESDG §4.2, features redistributed [T_local, N, F] <-> [T, N_local, F] for the temporal module), with
  snapshots resident or moved to the device per block, whole or as graph differences (ESDG §3.1-3.2);
* :class:`VertexPlacement` — each rank owns a vertex set for all timesteps (ESDG §4.1); halo rows travel
  along precomputed send/receive lists in one all-to-all per block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dgbench.dist import DistContext, PhaseTimer, all_to_all_autograd
from dgbench.errors import DgbenchError
from dgbench.memory import return_freed_memory
from dgbench.models.contract import LayoutSequence, SequenceMask
from dgbench.models.sparse import CsrArrays, SparseOperator, block_diagonal, graph_attention, spmm
from dgbench.trainers.discrete.partition import (SnapshotEdges, StreamedEdges, VertexPartition, as_snapshot_edges,
                                                 build_rank_halo_plan, partition_vertices_detailed)
from dgbench.trainers.discrete.comm_shape import CommShape, distinct_asks, even_shape, score_patterns, unit_weight
from dgbench.trainers.discrete.data import DiscreteData, PairBatch
from dgbench.trainers.discrete.exchange import RowMove, redistribute, rounds_for
from dgbench.trainers.discrete.transfer import BASE, SnapshotMover


def split_range(start: int, stop: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous, balanced sub-ranges of [start, stop) (the first ones one longer, as np.array_split)."""
    size, longer = divmod(stop - start, parts)
    edges = start + np.r_[0, np.cumsum([size + (i < longer) for i in range(parts)])]
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


class Placement:
    """Shared by every scheme: blocks of timesteps, scoring of pairs, per-run extras."""

    def __init__(self, ctx: DistContext, data: DiscreteData, blocks: int):
        if blocks > data.num_steps:
            raise DgbenchError(f"--blocks {blocks} exceeds the {data.num_steps} input timesteps")
        self.ctx, self.data = ctx, data
        self.blocks = [range(a, b) for a, b in split_range(0, data.num_steps, blocks)]
        self.vertex_rows = data.num_nodes

    def view(self, block: int, timer: PhaseTimer) -> Any:
        raise NotImplementedError

    def owned(self, batch: PairBatch) -> PairBatch:
        """This rank's share of one step's pairs."""
        raise NotImplementedError

    def view_of(self, steps: range, timer: PhaseTimer) -> Any:
        """A view of any range of steps (a snapshot group of the group protocol, BLAD §3.1)."""
        raise DgbenchError(f"{type(self).__name__} has no views of arbitrary step ranges (group protocol)")

    def owned_in(self, batch: PairBatch, steps: range) -> PairBatch:
        """This rank's share of one step's pairs when the step is scored in the view of ``steps``."""
        return self.owned(batch)

    def score_table(self, view: Any, halves: torch.Tensor, batches: list[PairBatch]) -> tuple[torch.Tensor, int]:
        """Scorer halves indexable by (step - first, vertex id) for ``batches`` (this rank's pairs to
        score with it), and first."""
        raise NotImplementedError

    def score(self, view: Any, halves: torch.Tensor, batches: list[PairBatch], bias: torch.Tensor) -> torch.Tensor:
        """Logits of ``batches`` (ESDG §6.4: w · [h_u, h_v] + b, split into per-vertex halves)."""
        return pair_logits(*self.score_table(view, halves, batches), batches, bias)

    def transfer_bytes(self) -> dict[str, int]:
        """Host-to-device bytes moved so far, per transfer mode (empty when nothing streams)."""
        return {}

    def predicted_elements(self, profile: CommProfile, passes: list[int], pairs: list[PairBatch],
                           blocks: list[range] | None = None) -> dict[str, int] | None:
        """Elements all ranks together send in one training epoch, per tag, predicted from the layout
        and the model's widths — independently of the counting in :class:`~dgbench.dist.Comm`.
        ``passes[b]``: forward runs of block b (the schedule's), ``pairs``: the epoch's training pairs,
        ``blocks``: the ranges of steps run as units (default: the placement's blocks; the group
        protocol's groups). None: this placement has no model of its volume."""
        return {} if self.ctx.world_size == 1 else None

    def embedding_index(self, view: Any) -> tuple[np.ndarray, np.ndarray]:
        """The (steps, vertex ids) of a block's [steps, rows, width] embeddings on this rank (node
        classification decodes them)."""
        raise DgbenchError(f"--task node-classification: the {type(self).__name__} layout has no per-vertex "
                           f"embeddings to decode (schemes single, checkpoint, snapshot, vertex, pts do)")

    def comm_shape(self, trainer: Any, units: list[range], passes: list[int], pairs: list[PairBatch]
                   ) -> CommShape:
        """Who sends how much to whom over one training epoch, and each rank's work, read from this placement's
        plan for a dry run (``units``: the schedule's units of work, run ``passes`` times each forward). The
        default knows no plan: every tag spread evenly over the other ranks, the work split evenly."""
        return even_shape(self.data, units, passes, self.ctx.world_size)

    def extra(self) -> dict[str, Any]:
        return {}

    def absorb(self, batch_placement: "Placement") -> None:
        """Take over what a seed batch's placement (BLAD §3.1 mini-batches) counted for the record."""


@dataclass(frozen=True)
class CommProfile:
    """What a model exchanges per block: per layer, the widths moved to / from the vertex layout
    (:attr:`DynamicLayer.temporal_widths`) and the widths of its neighbour exchanges (None: undeclared)."""

    temporal: list[tuple[int, int]]
    spatial: list[tuple[int, ...]] | None

    @classmethod
    def of(cls, model: Any) -> "CommProfile":
        return cls(model.feature_widths(), model.spatial_widths())


def pair_logits(table: torch.Tensor, first: int, batches: list[PairBatch], bias: torch.Tensor) -> torch.Tensor:
    """``table[t - first, u, 0] + table[t - first, v, 1] + b`` for every pair (u, v) of step t."""
    if not batches:
        return table.new_zeros(0)
    rows = table.shape[1]
    # flat positions in the contiguous [steps, rows, 2] table: one index_select per endpoint
    base = np.concatenate([np.full(len(b.src), (b.step - first) * rows, np.int64) for b in batches])
    src = np.concatenate([b.src for b in batches])
    dst = np.concatenate([b.dst for b in batches])
    where = torch.from_numpy(np.concatenate([(base + src) * 2, (base + dst) * 2 + 1])).to(table.device)
    halves = table.reshape(-1).index_select(0, where)
    return halves[:len(src)] + halves[len(src):] + bias


# --------------------------------------------------------------------------- time partitioning

@dataclass
class TimeView(LayoutSequence):
    """A block seen by a time-partitioned rank: its local steps of the block, all N vertices."""

    placement: "TimePlacement"
    block: range
    local: tuple[int, int]  # global steps [a, b) of this rank in the block
    operator: SparseOperator | None
    first_input: torch.Tensor  # [local steps, N, 2]

    @property
    def num_steps(self) -> int:
        return len(self.block)

    @property
    def local_steps(self) -> slice:
        return slice(self.local[0] - self.block.start, self.local[1] - self.block.start)

    @property
    def vertex_rows(self) -> int:
        return self.placement.vertex_rows

    def aggregate(self, x: torch.Tensor | None) -> torch.Tensor:
        if x is None:
            return self.first_input
        if self.operator is None:
            return x
        steps, rows, width = x.shape
        return spmm(self.operator, x.reshape(steps * rows, width)).view(steps, rows, width)

    def input_features(self) -> torch.Tensor:
        return self.placement.input_features(*self.local)

    def attend(self, dst_score: torch.Tensor, src_score: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        steps, rows, heads, width = values.shape
        if self.operator is None:
            return values.new_zeros(values.shape) + 0 * (values.sum() + dst_score.sum() + src_score.sum())
        out = graph_attention(self.operator, dst_score.reshape(-1, heads), src_score.reshape(-1, heads),
                              values.reshape(-1, heads, width))
        return out.view(steps, rows, heads, width)

    def _local_counts(self) -> list[int]:
        return [b - a for a, b in self.placement.local_ranges(self.block)]

    def sequence_mask(self) -> SequenceMask | None:
        """``--presence edges|lifetime``: which (step, vertex) of this rank's vertex range exist (DGC §2.1's V_t)."""
        present = getattr(self.placement.data, "present", None)
        if present is None:
            return None
        a, b = self.placement.vertex_ranges[self.placement.rank]
        return SequenceMask(present=torch.from_numpy(present[self.block.start:self.block.stop, a:b]).to(
            self.first_input.device))

    def to_vertex(self, y: torch.Tensor) -> torch.Tensor:
        """[T_local, N, F] -> [T_block, N_local, F]: one all-to-all (ESDG §4.2 re-distribution), in rounds."""
        p = self.placement
        if p.ctx.world_size == 1:
            return y
        width = y.shape[-1]
        received = redistribute(y.reshape(-1, width), self._move(width, "to_vertex"))
        return received.view(len(self.block), p.vertex_rows, width)

    def to_time(self, z: torch.Tensor) -> torch.Tensor:
        """[T_block, N_local, F] -> [T_local, N, F]: the reverse all-to-all, each arriving row written in place."""
        p = self.placement
        if p.ctx.world_size == 1:
            return z
        width, steps = z.shape[-1], self._local_counts()
        received = redistribute(z.reshape(-1, width), self._move(width, "to_time").reverse())
        return received.view(steps[p.rank], p.data.num_nodes, width)

    def _move(self, width: int, tag: str) -> RowMove:
        """[T_local, N] rows to [T_block, N_local] rows: to each rank its vertex range of every local step,
        step-major, exchanged in rounds sized by the largest rank's frame."""
        p, steps = self.placement, self._local_counts()
        send = [steps[p.rank] * (b - a) for a, b in p.vertex_ranges]
        recv = [count * p.vertex_rows for count in steps]
        largest = max(max(steps) * p.data.num_nodes, len(self.block) * max(b - a for a, b in p.vertex_ranges))
        return RowMove(p.ctx.comm, send, recv, self._frame_rows, None, rounds_for(largest, width), tag)

    def _frame_rows(self, peer: int, start: int, stop: int) -> torch.Tensor:
        """Rows of the local [T_local * N] frame that positions [start, stop) of ``peer``'s segment are: its vertex
        range (a, b), step-major, so position i is step i // (b - a), vertex a + i % (b - a)."""
        a, b = self.placement.vertex_ranges[peer]
        rows = max(b - a, 1)  # an empty range has no positions
        position = torch.arange(start, stop, dtype=torch.int64, device=self.first_input.device)
        return position // rows * self.placement.data.num_nodes + a + position % rows


class TimePlacement(Placement):
    """single / checkpoint / snapshot: ranks split each block's timesteps, vertices for the temporal module."""

    def __init__(self, ctx: DistContext, data: DiscreteData, blocks: int, streamed: bool, transfer: str = BASE):
        super().__init__(ctx, data, blocks)
        self.rank = ctx.rank
        self.vertex_ranges = split_range(0, data.num_nodes, ctx.world_size)
        self.vertex_rows = self.vertex_ranges[ctx.rank][1] - self.vertex_ranges[ctx.rank][0]
        self.streamed = streamed
        # a CPU device's memory is the host's: a streamed run counts its moves but copies nothing
        self.host_is_device = ctx.device.type == "cpu"
        self.mover = SnapshotMover(data.adjacency, ctx.device, transfer)
        self.first_input_bytes = 0
        self._features: dict[tuple[int, int], torch.Tensor] = {}
        self.resident: dict[int, TimeView] = {}
        self._ranges: dict[tuple[int, int], TimeView] = {}  # resident views of other step ranges (groups)
        self._last_key: tuple[int, int] | None = None  # the kept view used last (streamed on a CPU device)
        if not streamed:
            timer = PhaseTimer(ctx.device)
            self.resident = {b: self._load(b, timer) for b in range(len(self.blocks))}
            self.mover.release_host_copies()  # moved once: the resident views hold what the rank needs
            if not data.group_length:  # groups build more views from it
                self._hand_over_steps()

    def local_ranges(self, block: range) -> list[tuple[int, int]]:
        return split_range(block.start, block.stop, self.ctx.world_size)

    def _load(self, block: int, timer: PhaseTimer) -> TimeView:
        return self._load_steps(self.blocks[block], timer)

    def _load_steps(self, steps: range, timer: PhaseTimer) -> TimeView:
        a, b = self.local_ranges(steps)[self.rank]
        with timer.phase("transfer"):
            first = self.data.first_layer_input[a:b]
            self.first_input_bytes += first.nbytes
            first_input = torch.from_numpy(first).to(self.ctx.device)
            parts = self.mover.move(range(a, b)) if b > a else []
            operator = SparseOperator(block_diagonal(parts)) if parts else None
        return TimeView(self, steps, (a, b), operator, first_input)

    def view(self, block: int, timer: PhaseTimer) -> TimeView:
        return self.view_of(self.blocks[block], timer) if self.streamed else self.resident[block]

    def view_of(self, steps: range, timer: PhaseTimer) -> TimeView:
        """The steps split over the ranks like a block; moved per use when streamed, else once. On a CPU device
        (the host's memory) a streamed view is built once and every later use counts the move a GPU run makes."""
        if self.streamed and not self.host_is_device:
            return self._load_steps(steps, timer)
        key = (steps.start, steps.stop)
        self._release_previous_view(key)
        if key not in self._ranges:
            self._ranges[key] = self._load_steps(steps, timer)
            if self.streamed:
                self._keep_the_view_only(steps)
        elif self.streamed:
            a, b = self.local_ranges(steps)[self.rank]
            self.first_input_bytes += self._ranges[key].first_input.nbytes
            if b > a:
                self.mover.count(range(a, b))
        return self._ranges[key]

    def _release_previous_view(self, key: tuple[int, int]) -> None:
        """A streamed view kept on a CPU device keeps its operator, not what its use built from it (Aᵀ for the
        backward, attention's index copies): when another view is asked for, the previous one's go, as a GPU run
        drops the whole view after its block. Each block's backward runs before the next block's view is asked
        for, so a rank holds one block's Aᵀ instead of every block's (the same Aᵀ is rebuilt on the next use).
        Not under the group protocol, whose views may share a graph."""
        if not self.streamed or self.data.group_length:
            return
        previous = self._ranges.get(self._last_key) if self._last_key not in (None, key) else None
        if previous is not None and previous.operator is not None:
            previous.operator.release_derived()
        self._last_key = key

    def _keep_the_view_only(self, steps: range) -> None:
        """A streamed view kept on a CPU device holds the rank's copy of its steps: the data's own copies and the
        mover's payloads go (each step held once, as a resident placement does); later uses only count."""
        a, b = self.local_ranges(steps)[self.rank]
        if b > a:
            self.mover.forget(range(a, b))
        if not self.data.group_length:  # groups share steps: keep
            self._hand_over_steps()

    def _hand_over_steps(self) -> None:
        """The rank's data drops what the views now hold (``RankDiscreteData.hand_over_steps``) and its degree
        features X⁰ too: the views hold Ã X⁰, and a model that reads X⁰ itself (graph attention) has
        :meth:`input_features` copy its steps' frames on first use, rebuilt from the store with the same numbers.
        Kept, X⁰ cost 8 B per (vertex, local step): ≈ 0.6 GB per rank of a Flickr-sized store at P = 4
        (docs/discrete-schemes.md, "Per-rank data"). Whole data (not per rank) is left as it is."""
        if hasattr(self.data, "hand_over_steps"):
            self.data.hand_over_steps()
            self.data.degree_features.clear()

    def owned_in(self, batch: PairBatch, steps: range) -> PairBatch:
        a, b = self.local_ranges(steps)[self.rank]
        return batch if a <= batch.step < b else batch.select(np.zeros(len(batch.src), bool))

    def input_features(self, a: int, b: int) -> torch.Tensor:
        """X⁰ of steps [a, b) on the device (moved on first use; counted with the Ã X⁰ frames)."""
        if (a, b) not in self._features:
            frames = np.stack(self.data.degree_features[a:b]) if b > a else \
                np.zeros((0, self.data.num_nodes, self.data.in_features), np.float32)
            self.first_input_bytes += frames.nbytes
            self._features[(a, b)] = torch.from_numpy(frames).to(self.ctx.device)
        return self._features[(a, b)]

    def owned(self, batch: PairBatch) -> PairBatch:
        for block in self.blocks:
            if batch.step in block:
                a, b = self.local_ranges(block)[self.rank]
                return batch if a <= batch.step < b else batch.select(np.zeros(len(batch.src), bool))
        raise ValueError(f"step {batch.step} is in no block")

    def score_table(self, view: TimeView, halves: torch.Tensor, batches: list[PairBatch]) -> tuple[torch.Tensor, int]:
        return halves, view.local[0]  # a time-partitioned rank holds every vertex of its steps

    def transfer_bytes(self) -> dict[str, int]:
        """Snapshot bytes per mode (the active one measured) plus the precomputed Ã X⁰ frames."""
        if not self.streamed:
            return {}
        return {mode: moved + self.first_input_bytes for mode, moved in self.mover.bytes_by_mode.items()}

    def predicted_elements(self, profile: CommProfile, passes: list[int], pairs: list[PairBatch],
                           blocks: list[range] | None = None) -> dict[str, int] | None:
        """ESDG §4.2: per block, every rank's local steps travel to every other rank's vertex rows and
        back, Σ_r steps_r·(N - rows_r) rows per layer and direction (= T·N·(P-1)/P when even)."""
        if self.ctx.world_size == 1:
            return {}
        rows = [b - a for a, b in self.vertex_ranges]
        to_vertex = sum(w for w, _ in profile.temporal)
        to_time = sum(w for _, w in profile.temporal)
        out = {"to_vertex:forward": 0, "to_vertex:backward": 0, "to_time:forward": 0, "to_time:backward": 0}
        for block, runs in zip(self.blocks if blocks is None else blocks, passes):
            steps = [b - a for a, b in self.local_ranges(block)]
            moved = sum(s * (self.data.num_nodes - r) for s, r in zip(steps, rows))
            out["to_vertex:forward"] += runs * moved * to_vertex
            out["to_time:forward"] += runs * moved * to_time
            out["to_vertex:backward"] += moved * to_vertex
            out["to_time:backward"] += moved * to_time
        return {tag: n for tag, n in out.items() if n}

    def embedding_index(self, view: TimeView) -> tuple[np.ndarray, np.ndarray]:
        """Its local steps, every vertex."""
        return np.arange(*view.local, dtype=np.int64), np.arange(self.data.num_nodes, dtype=np.int64)

    def comm_shape(self, trainer: Any, units: list[range], passes: list[int], pairs: list[PairBatch]
                   ) -> CommShape:
        """ESDG §4.2: per unit, rank r's local steps travel to every rank's vertex rows and back."""
        data, world = self.data, self.ctx.world_size
        rows = np.array([b - a for a, b in self.vertex_ranges], np.int64)
        nnz = data.nonzeros_per_step()
        forward, backward = np.zeros((world, world), np.int64), np.zeros((world, world), np.int64)
        edges, cells, step_work = np.zeros(world), np.zeros(world), np.zeros(world)
        for unit, runs in zip(units, passes):
            ranges = self.local_ranges(unit)
            steps = np.array([b - a for a, b in ranges], np.int64)
            moved = np.outer(steps, rows)
            forward += runs * moved
            backward += moved
            weight = unit_weight(runs)
            edges += weight * np.array([nnz[a:b].sum() for a, b in ranges])
            cells += weight * (steps * data.num_nodes + len(unit) * rows) / 2
            step_work += weight * (steps + len(unit)) / 2  # the graph layer runs local steps, the temporal one all
        return CommShape({"to_vertex:forward": forward, "to_vertex:backward": backward.T,
                          "to_time:forward": forward.T, "to_time:backward": backward}, {}, edges, cells, step_work)

    def extra(self) -> dict[str, Any]:
        return {"transfer_mode": self.mover.mode if self.streamed else "resident",
                **({"transfer_copies": "none: the device is the host"} if self.streamed and self.host_is_device
                   else {}),
                "vertex_ranges": self.vertex_ranges,
                "time_ranges": [self.local_ranges(block) for block in self.blocks]}


# --------------------------------------------------------------------------- vertex partitioning

@dataclass
class HaloBlock:
    """One block of a vertex-partitioned rank: local Ã over [own rows | halo rows] and the exchange lists."""

    operator: SparseOperator
    send_index: torch.Tensor  # rows of the flattened [steps * own, F] input, grouped by destination
    send_splits: list[int]
    recv_splits: list[int]
    first_input: torch.Tensor  # [steps, own, 2]
    features: torch.Tensor  # X⁰ of own rows, [steps, own, 2]


@dataclass
class VertexView(LayoutSequence):
    placement: "VertexPlacement"
    block: range
    halo: HaloBlock

    @property
    def num_steps(self) -> int:
        return len(self.block)

    @property
    def local_steps(self) -> slice:
        return slice(0, len(self.block))

    @property
    def vertex_rows(self) -> int:
        return self.placement.vertex_rows

    def aggregate(self, x: torch.Tensor | None) -> torch.Tensor:
        """Ã x for own vertices: own rows plus halo rows received from their owners (ESDG §4.1)."""
        if x is None:
            return self.halo.first_input
        steps, rows, width = x.shape
        flat = x.reshape(steps * rows, width)
        return spmm(self.halo.operator, torch.cat([flat, self._halo(flat)])).view(steps, rows, width)

    def _halo(self, flat: torch.Tensor) -> torch.Tensor:
        """The halo rows of ``flat`` [steps * own, W] from their owners, in arrival order."""
        return all_to_all_autograd(flat[self.halo.send_index], self.placement.ctx.comm, self.halo.send_splits,
                                   self.halo.recv_splits, tag="halo")

    def input_features(self) -> torch.Tensor:
        return self.halo.features

    def attend(self, dst_score: torch.Tensor, src_score: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """GAT over own rows: the neighbours' [src_score | values] rows travel as one halo exchange."""
        steps, rows, heads, width = values.shape
        flat = torch.cat([src_score.reshape(steps * rows, heads), values.reshape(steps * rows, heads * width)], 1)
        columns = torch.cat([flat, self._halo(flat)])
        out = graph_attention(self.halo.operator, dst_score.reshape(-1, heads), columns[:, :heads],
                              columns[:, heads:].view(-1, heads, width))
        return out.view(steps, rows, heads, width)

    def to_vertex(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def to_time(self, z: torch.Tensor) -> torch.Tensor:
        return z

    def sequence_mask(self) -> SequenceMask | None:
        """``--presence edges|lifetime``: which (step, own vertex) instances exist (DGC §2.1's V_t)."""
        present = getattr(self.placement.data, "present", None)
        if present is None:
            return None
        rows = present[self.block.start:self.block.stop][:, self.placement.own]
        return SequenceMask(present=torch.from_numpy(np.ascontiguousarray(rows)).to(self.halo.features.device))


class VertexPlacement(Placement):
    """Vertex partitioning: every timestep of a vertex lives on its owner; halos are exchanged
    along dgbench.trainers.discrete.partition's plan (send/receive lists per rank and timestep)."""

    def __init__(self, ctx: DistContext, data: DiscreteData, blocks: int, owner: np.ndarray, method: str,
                 report: dict[str, Any] | None = None):
        super().__init__(ctx, data, blocks)
        self.owner, self.method, self.report = owner.astype(np.int64), method, report or {}
        if hasattr(data, "keep_recent_steps_only"):  # built per step: a rank keeps its own rows, not the steps
            data.keep_recent_steps_only()
        # this rank's send/receive lists, one step's edges at a time (every rank's counts, for the volume)
        self.plan = build_rank_halo_plan((data.input_edges_of(t) for t in range(data.num_steps)), self.owner,
                                         ctx.world_size, ctx.rank)
        self.own = self.plan.owned[ctx.rank]
        self.vertex_rows = len(self.own)
        self.part_sizes = [len(p) for p in self.plan.owned]
        self.halos = [self._halo_block(block) for block in self.blocks]
        self._range_halos: dict[tuple[int, int], HaloBlock] = {}  # other step ranges (groups)
        self._release_kept_steps()

    def _release_kept_steps(self) -> None:
        """The halo blocks hold the rank's rows of every step: the few whole steps its per-rank data still kept
        (Ã_t, X⁰ and Ã_t X⁰ of all N vertices, ≈ 5 MiB a step at N = 65,536, at every P) go; a step asked for
        again is rebuilt from the store with the same numbers. Not under the group protocol, whose views are
        built later from the data (docs/discrete-schemes.md, "Per-rank data")."""
        if hasattr(self.data, "hand_over_steps") and not self.data.group_length:
            self.data.hand_over_steps()
            self.data.degree_features.clear()
            return_freed_memory()

    def _halo_block(self, block: range) -> HaloBlock:
        """Exchange lists and local operator of one block; the block's halo rows travel together."""
        rank, size, own = self.ctx.rank, self.ctx.world_size, self.own
        # arrival order: source rank q major, then step, then vertex id — the order q sends in
        incoming = [[self._needed(t, rank, q) for t in block] for q in range(size)]
        outgoing = [[self._needed(t, q, rank) for t in block] for q in range(size)]
        send_index = np.concatenate([i * len(own) + self.plan.local_row[v] for per_step in outgoing
                                     for i, v in enumerate(per_step)])
        send_splits = [sum(len(v) for v in per_step) for per_step in outgoing]
        recv_splits = [sum(len(v) for v in per_step) for per_step in incoming]
        device = self.ctx.device
        operator, first, features = self._local_operator(block, incoming)
        return HaloBlock(SparseOperator(operator.to_torch(device)),
                         torch.from_numpy(send_index.astype(np.int64)).to(device), send_splits, recv_splits,
                         torch.from_numpy(first).to(device), torch.from_numpy(features).to(device))

    def _local_operator(self, block: range, incoming: list[list[np.ndarray]]
                        ) -> tuple[CsrArrays, np.ndarray, np.ndarray]:
        """Block-diagonal Ã over the block's steps: rows = own vertices per step, columns = the
        flattened own rows [steps * own] followed by the received halo rows in arrival order; with the
        own rows of Ã X⁰ and X⁰, [steps, own, F] each (every step's data read once, in step order)."""
        rank, own, steps = self.ctx.rank, self.own, len(block)
        arrived = [sum(len(v) for v in per_step) for per_step in incoming]
        source_start = np.r_[0, np.cumsum(arrived)] + steps * len(own)
        step_start = [np.r_[0, np.cumsum([len(v) for v in per_step])] for per_step in incoming]
        rowptr, cols, vals, first, features = [np.zeros(1, np.int64)], [], [], [], []
        for i, t in enumerate(block):
            a = self.data.adjacency[t]
            first.append(self.data.first_layer_input[t][own])
            features.append(self.data.degree_features[t][own])
            lengths = np.diff(a.rowptr)[own]
            entries = np.repeat(a.rowptr[own] - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(lengths.sum())
            src = np.asarray(a.col)[entries].astype(np.int64)
            source = self.owner[src]
            column = i * len(own) + self.plan.local_row[src]  # right for own sources
            for q in np.unique(source[source != rank]):
                theirs = source == q
                column[theirs] = source_start[q] + step_start[q][i] + np.searchsorted(incoming[q][i], src[theirs])
            rowptr.append(rowptr[-1][-1] + np.cumsum(lengths))
            cols.append(column)
            vals.append(a.val[entries])
        return (CsrArrays(np.concatenate(rowptr), np.concatenate(cols), np.concatenate(vals),
                          (steps * len(own), steps * len(own) + sum(arrived))),
                np.ascontiguousarray(np.stack(first)), np.stack(features))

    def _needed(self, t: int, receiver: int, sender: int) -> np.ndarray:
        """Vertices of ``sender`` whose rows ``receiver`` needs at step t, ascending."""
        return self.plan.recv_vertices_from(t, receiver, sender)

    def view(self, block: int, timer: PhaseTimer) -> VertexView:
        return VertexView(self, self.blocks[block], self.halos[block])

    def view_of(self, steps: range, timer: PhaseTimer) -> VertexView:
        """Own vertices over the steps; the range's exchange lists are built once."""
        key = (steps.start, steps.stop)
        if key not in self._range_halos:
            self._range_halos[key] = self._halo_block(steps)
        return VertexView(self, steps, self._range_halos[key])

    def owned(self, batch: PairBatch) -> PairBatch:
        return batch.select(self.owner[batch.src] == self.ctx.rank)

    def score_table(self, view: VertexView, halves: torch.Tensor,
                    batches: list[PairBatch]) -> tuple[torch.Tensor, int]:
        """This rank's pairs have their source here (``owned``); of the destinations only the halves
        held elsewhere travel: ids are asked for, then the values come back (1 float per distinct
        remote (step, vertex)), so the pair scores add little to the halo volume of ESDG §4.1."""
        steps, n, first = len(view.block), self.data.num_nodes, view.block.start
        if self.ctx.world_size == 1:  # one rank holds every vertex in id order: the table is the halves
            return halves.reshape(steps, n, 2), first
        values, wanted = self._own_and_asked_halves(view, halves, batches)
        own = (np.arange(steps)[:, None] * n + self.own[None, :]).reshape(-1) * 2  # both halves of own rows
        where = torch.from_numpy(np.concatenate([np.stack([own, own + 1], axis=1).reshape(-1), wanted * 2 + 1]))
        table = halves.new_zeros(steps * n * 2).index_put((where.to(self.ctx.device),), values)
        return table.view(steps, n, 2), first

    def score(self, view: VertexView, halves: torch.Tensor, batches: list[PairBatch],
              bias: torch.Tensor) -> torch.Tensor:
        """Training's logits read straight from [own halves | asked halves] instead of a [steps, N, 2] table of
        every vertex (:meth:`score_table`, for the evaluation): the same values added in the same order, and each
        half's gradient summed in the same order, so the same numbers bit for bit, without the whole-N table and
        its whole-N gradient at every P (docs/discrete-schemes.md, "Per-rank data")."""
        if self.ctx.world_size == 1 or not batches:
            return super().score(view, halves, batches, bias)
        values, wanted = self._own_and_asked_halves(view, halves, batches)
        steps, rows, n, first = len(view.block), len(self.own), self.data.num_nodes, view.block.start
        step = np.concatenate([np.full(len(b.src), b.step - first, np.int64) for b in batches])
        src = np.concatenate([b.src for b in batches]).astype(np.int64)
        dst = np.concatenate([b.dst for b in batches]).astype(np.int64)
        dst_place = (step * rows + self.plan.local_row[dst]) * 2 + 1
        remote = self.owner[dst] != self.ctx.rank
        order = np.argsort(wanted, kind="stable")
        asked_at = order[np.searchsorted(wanted[order], step[remote] * n + dst[remote])]
        dst_place[remote] = steps * rows * 2 + asked_at
        where = torch.from_numpy(np.concatenate([(step * rows + self.plan.local_row[src]) * 2, dst_place]))
        picked = values.index_select(0, where.to(values.device))
        return picked[:len(src)] + picked[len(src):] + bias

    def _own_and_asked_halves(self, view: VertexView, halves: torch.Tensor, batches: list[PairBatch]
                              ) -> tuple[torch.Tensor, np.ndarray]:
        """[this rank's halves, flattened | the destination halves its pairs need from other ranks] and the
        (step - first) · N + vertex keys of the latter, in arrival order (grouped by holder)."""
        comm, rank, device = self.ctx.comm, self.ctx.rank, self.ctx.device
        rows, n, first = len(self.own), self.data.num_nodes, view.block.start
        keys = np.unique(np.concatenate([(b.step - first) * n + b.dst.astype(np.int64) for b in batches])
                         if batches else np.empty(0, np.int64))
        holder = self.owner[keys % n]
        remote = holder != rank
        order = np.argsort(holder[remote], kind="stable")
        wanted = keys[remote][order]  # grouped by the rank holding them
        want_splits = np.bincount(holder[remote], minlength=self.ctx.world_size).tolist()
        asked_splits = comm.exchange_counts(want_splits)
        asked = comm.all_to_all_single(torch.from_numpy(wanted).to(device).view(-1, 1), want_splits, asked_splits,
                                       tag="scores:ids").view(-1).cpu().numpy()
        asked_step, asked_vertex = np.divmod(asked, n)
        served = halves.reshape(-1, 2)[:, 1].index_select(
            0, torch.from_numpy(asked_step * rows + self.plan.local_row[asked_vertex]).to(device))
        received = all_to_all_autograd(served.view(-1, 1), comm, asked_splits, want_splits, tag="scores").view(-1)
        return torch.cat([halves.reshape(-1), received]), wanted

    def predicted_elements(self, profile: CommProfile, passes: list[int], pairs: list[PairBatch],
                           blocks: list[range] | None = None) -> dict[str, int] | None:
        """ESDG §4.1: each neighbour exchange moves Σ_t Σ_u (λ_t(u) - 1) rows of its width; the scores
        move one float per distinct remote (step, destination) of each rank's pairs (and its id)."""
        if self.ctx.world_size == 1:
            return {}
        if profile.spatial is None:
            return None
        width = sum(sum(widths) for widths in profile.spatial)
        out = {"halo:forward": 0, "halo:backward": 0}
        for block, runs in zip(self.blocks if blocks is None else blocks, passes):
            rows = int(self.plan.send_counts[block.start:block.stop].sum())
            out["halo:forward"] += runs * rows * width
            out["halo:backward"] += rows * width
        remote = 0
        for batch in pairs:
            sources, destinations = self.owner[batch.src], self.owner[batch.dst]
            for rank in range(self.ctx.world_size):
                mine = (sources == rank) & (destinations != rank)
                remote += len(np.unique(batch.dst[mine]))
        out.update({"scores:forward": remote, "scores:backward": remote, "scores:ids": remote})
        return {tag: n for tag, n in out.items() if n}

    def connectivity_volume(self) -> int:
        """Σ_t Σ_u (λ_t(u) - 1): halo rows moved per aggregation of one feature column (ESDG §4.1)."""
        return self.plan.rows_sent()

    def embedding_index(self, view: VertexView) -> tuple[np.ndarray, np.ndarray]:
        """Every step of the block, its own vertices."""
        return np.arange(view.block.start, view.block.stop, dtype=np.int64), np.asarray(self.own, np.int64)

    def comm_shape(self, trainer: Any, units: list[range], passes: list[int], pairs: list[PairBatch]
                   ) -> CommShape:
        """ESDG §4.1: the halo plan's rows per (sender, receiver) per step; pair scores ask the holders."""
        data, world, plan, owner = self.data, self.ctx.world_size, self.plan, self.owner
        forward, backward = np.zeros((world, world), np.int64), np.zeros((world, world), np.int64)
        own_nnz = np.zeros((data.num_steps, world), np.int64)
        for t, a in enumerate(data.adjacency):
            own_nnz[t] = np.bincount(owner, weights=np.diff(a.rowptr), minlength=world).astype(np.int64)
        sizes = np.array([len(v) for v in plan.owned], np.int64)
        edges, cells, steps = np.zeros(world), np.zeros(world), np.zeros(world)
        for unit, runs in zip(units, passes):
            halo = plan.send_counts[unit.start:unit.stop].sum(0)
            forward += runs * halo
            backward += halo
            weight = unit_weight(runs)
            edges += weight * own_nnz[unit.start:unit.stop].sum(0)
            cells += weight * len(unit) * sizes
            steps += weight * len(unit)
        askers, keys = [], []
        for batch in pairs:
            crossing = owner[batch.src] != owner[batch.dst]
            askers.append(owner[batch.src][crossing].astype(np.int64))
            keys.append(batch.step * np.int64(data.num_nodes) + batch.dst[crossing])
        asker = np.concatenate(askers) if askers else np.zeros(0, np.int64)
        key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        scores, control = score_patterns(distinct_asks(asker, owner[key % data.num_nodes], key, world), len(units),
                                         world)
        return CommShape({"halo:forward": forward, "halo:backward": backward.T, **scores}, control, edges, cells,
                         steps)

    def extra(self) -> dict[str, Any]:
        return {"partitioner": self.method, "connectivity_volume": self.connectivity_volume(),
                "part_sizes": self.part_sizes, "partition": self.report}


# --------------------------------------------------------------------------- registered schemes

def input_edges(data: DiscreteData) -> SnapshotEdges:
    """The input snapshots' edges as the model aggregates them (smoothed when the run smooths; the last
    snapshot is only a target, so it is not partitioned)."""
    return as_snapshot_edges(data.input_edge_lists(), data.num_nodes)


def partition_owner(data: DiscreteData, parts: int, method: str, seed: int) -> VertexPartition:
    """Owner rank of every vertex from dgbench.trainers.discrete.partition (Mt-KaHyPar minimising the connectivity
    volume; METIS or ranges as fallbacks). Per-rank data builds each step to read its edges and keeps only a few
    recent steps meanwhile: the main rank partitions, and kept every step's Ã_t, X⁰ and Ã_t X⁰ until its
    placement dropped them (≈ 50 MiB more than the other ranks at N = 65,536, T = 16); its placement builds the
    steps again. The partitioner gets the steps' edges one at a time (:class:`StreamedEdges`): every step's
    (src, dst) at once, and the hypergraph that ranges and METIS do not need, had raised the main rank's peak
    above its training's (docs/discrete-schemes.md, "Per-rank data")."""
    if hasattr(data, "keep_recent_steps_only"):
        data.keep_recent_steps_only()
    made = partition_vertices_detailed(StreamedEdges(data.num_nodes, data.num_steps, data.input_edges_of), parts,
                                       method=method, seed=seed)
    return_freed_memory()
    return made
