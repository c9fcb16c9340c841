"""BLAD §3.1's vertex mini-batches: seed vertices in batches, their neighbours sampled in every snapshot.

Steps 1, 2 and 5 of §3.1: an epoch draws a random order of the vertices and cuts it into seed batches of
``--seed-batch B`` (the paper's appendix: 3000); for each batch the sampler draws every input snapshot's
neighbourhood of the seeds, hop by hop (``--fanouts``, default 10,10: two hops), and the snapshot groups of
every training target are then trained on that sampled dynamic graph (:class:`MiniBatchData`) by the
scheme's own placement and schedule, unchanged. docs/blad.md lists the choices the paper leaves open;
the main ones:

* a pair is trained in the batch of its source vertex, so an epoch scores every training pair once; the
  sampler's seeds are the batch's vertices plus the other endpoints of their pairs (their embeddings are
  scored too);
* each sampled vertex's row of Ã_t is sampled once per snapshot (seeds with the first fanout, the first
  hop's new vertices with the second, …) and its kept neighbours are scaled by degree / kept, the
  unbiased estimate of the row's neighbour sum (GraphSAGE-style sampling applied to a GCN row); the
  diagonal is kept as it is; the last hop's vertices keep only their diagonal;
* the model's rows are the union of the batch's sampled vertices over the snapshots (one row space, so
  the recurrent state lines up); each snapshot's sampled vertex count is recorded and is what BLAD's
  balance predicts from;
* validation and test score whole groups on the full graph (no sampling at inference).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.models.sparse import CsrArrays
from dgbench.trainers.discrete.data import TRAIN, DiscreteData, PairBatch, first_aggregation

if TYPE_CHECKING:
    from dgbench.dist import PhaseTimer
    from dgbench.trainers.discrete.loop import DiscreteTrainer
    from dgbench.trainers.discrete.placement import CommProfile, Placement

SEED_ORDER_STREAM = 31  # the generator stream of the seed order (beside the pair draws' split codes)
SAMPLE_STREAM = 37  # the generator stream of the neighbour draws


def parse_fanouts(text: str) -> tuple[int, ...]:
    """``--fanouts 10,10`` -> (10, 10); every hop's fanout >= 1."""
    try:
        fanouts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise DgbenchError(f"--fanouts {text}: give comma-separated integers, one per hop (e.g. 10,10)") from None
    if not fanouts or min(fanouts) < 1:
        raise DgbenchError(f"--fanouts {text}: every hop samples at least one neighbour")
    return fanouts


def _row_entries(a: CsrArrays, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row of each entry, entry index) of every entry of ``rows`` of ``a``."""
    rowptr = np.asarray(a.rowptr)
    starts, counts = rowptr[rows], rowptr[rows + 1] - rowptr[rows]
    total = int(counts.sum())
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(rows, counts), np.repeat(starts, counts) + offsets


def sample_rows(a: CsrArrays, rows: np.ndarray, fanout: int, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to ``fanout`` neighbours (off-diagonal entries) of each row of ``rows``, uniformly without
    replacement: (row, column, value) with each kept value scaled by the row's degree / kept."""
    row, entry = _row_entries(a, rows)
    col = np.asarray(a.col)[entry].astype(np.int64)
    off = col != row
    row, entry, col = row[off], entry[off], col[off]
    order = np.lexsort((rng.random(len(row)), row))
    row, entry, col = row[order], entry[order], col[order]
    first = np.r_[True, row[1:] != row[:-1]] if len(row) else np.zeros(0, bool)
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(row)), 0)) if len(row) else row
    rank = np.arange(len(row)) - group_start
    keep = rank < fanout
    degree = np.bincount(row, minlength=a.shape[0])
    kept = np.bincount(row[keep], minlength=a.shape[0])
    scale = degree[row[keep]] / np.maximum(kept[row[keep]], 1)
    value = np.asarray(a.val)[entry[keep]].astype(np.float64) * scale
    return row[keep], col[keep], value


@dataclass
class SampledStep:
    """One snapshot of a batch: its sampled entries in global ids and the vertices they reach."""

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    vertices: np.ndarray  # the seeds and every vertex a hop reached (sorted)


def sample_step(a: CsrArrays, seeds: np.ndarray, fanouts: tuple[int, ...], rng: np.random.Generator) -> SampledStep:
    """Hop by hop from ``seeds`` (sorted): each new vertex's row sampled once with its hop's fanout."""
    reached, frontier = seeds, seeds
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for fanout in fanouts:
        if not len(frontier):
            break
        rows, cols, values = sample_rows(a, frontier, fanout, rng)
        parts.append((rows, cols, values))
        frontier = np.setdiff1d(cols, reached)
        reached = np.union1d(reached, frontier)
    if not parts:
        empty = np.zeros(0, np.int64)
        return SampledStep(empty, empty, np.zeros(0), reached)
    rows, cols, values = (np.concatenate(p) for p in zip(*parts))
    return SampledStep(rows, cols, values, reached)


def _diagonal(a: CsrArrays) -> np.ndarray:
    """Ã's diagonal (every row holds one: the normalisation adds I)."""
    rowptr, col = np.asarray(a.rowptr), np.asarray(a.col).astype(np.int64)
    rows = np.repeat(np.arange(a.shape[0]), np.diff(rowptr))
    out = np.zeros(a.shape[0], np.float64)
    on = col == rows
    np.add.at(out, rows[on], np.asarray(a.val)[on].astype(np.float64))
    return out


class MiniBatchData:
    """The sampled dynamic graph of one seed batch, as the placements read a :class:`DiscreteData`: every
    input step (only the training groups' steps sampled), rows = the batch's vertices in id order."""

    def __init__(self, full: DiscreteData, vertices: np.ndarray, steps: dict[int, SampledStep],
                 diagonals: dict[int, np.ndarray]):
        n = len(vertices)
        self.full, self.vertices = full, vertices
        self.num_nodes, self.num_steps = n, full.num_steps
        self.group_length, self.seed, self.store = full.group_length, full.seed, full.store
        self.presence, self.present = "all", None
        self.adjacency: list[CsrArrays] = []
        self.sampled_vertices_per_step = np.zeros(self.num_steps, np.int64)
        for t in range(self.num_steps):
            step = steps.get(t)
            diag = diagonals[t][vertices] if t in diagonals else np.zeros(n)
            rows = np.searchsorted(vertices, step.rows) if step else np.zeros(0, np.int64)
            cols = np.searchsorted(vertices, step.cols) if step else np.zeros(0, np.int64)
            values = step.values if step else np.zeros(0)
            loops = np.arange(n, dtype=np.int64)
            self.adjacency.append(_csr(np.r_[rows, loops], np.r_[cols, loops], np.r_[values, diag], n))
            self.sampled_vertices_per_step[t] = len(step.vertices) if step else 0
        self.edges_per_step = np.array([a.nnz - n for a in self.adjacency], np.int64)
        self.raw_edges_per_step = self.edges_per_step
        self.degree_features = [full.degree_features[t][vertices] for t in range(self.num_steps)]
        self.first_layer_input = self._first_aggregation()

    @property
    def in_features(self) -> int:
        return self.full.in_features

    def _first_aggregation(self) -> np.ndarray:
        out = np.empty((self.num_steps, self.num_nodes, self.in_features), np.float32)
        for t, (a, x) in enumerate(zip(self.adjacency, self.degree_features)):
            out[t] = first_aggregation(a, x)
        return out

    def nonzeros_per_step(self) -> np.ndarray:
        return np.array([a.val.size for a in self.adjacency], np.int64)

    def input_edge_lists(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [self.input_edges_of(t) for t in range(self.num_steps)]

    def input_edges_of(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        return DiscreteData.input_edges_of(self, t)  # type: ignore[arg-type]

    def group_of(self, step: int) -> range:
        return self.full.group_of(step)

    def steps_of(self, split: str) -> list[int]:
        return self.full.steps_of(split)

    def work(self) -> int:
        """Sampled edges summed over every training group's snapshots (the epoch's throughput numerator)."""
        return int(sum(self.edges_per_step[self.group_of(step).start:step + 1].sum()
                       for step in self.steps_of(TRAIN)))

    def local(self, batch: PairBatch) -> PairBatch:
        """A pair batch in this graph's row ids."""
        return PairBatch(batch.step, np.searchsorted(self.vertices, batch.src),
                         np.searchsorted(self.vertices, batch.dst), batch.label, batch.ids)


def _csr(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int) -> CsrArrays:
    order = np.lexsort((cols, rows))
    rowptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=n))].astype(np.int64)
    return CsrArrays(rowptr, cols[order].astype(np.int32), values[order].astype(np.float32), (n, n))


@dataclass
class SeedBatch:
    """One seed batch of an epoch: its vertices and its training pairs (global ids, per target)."""

    seeds: np.ndarray
    pairs: list[PairBatch]


@dataclass
class MiniBatching:
    """Seed batches over an epoch's training pairs, their sampled graphs, and the per-batch placements."""

    batch_size: int
    fanouts: tuple[int, ...]
    make_placement: Callable[[MiniBatchData], "Placement"]
    last_epoch: tuple[int, list[PairBatch]] | None = None
    full_placement: Any = None  # the run's placement (evaluation; the record's counts)
    report: dict[str, Any] = field(default_factory=dict)
    _diagonals: dict[int, np.ndarray] = field(default_factory=dict)

    def batches(self, data: DiscreteData, pairs: list[PairBatch], epoch: int) -> list[SeedBatch]:
        """The epoch's seed order cut into batches; a pair goes with its source; batches without a pair
        are skipped (they train nothing). Identical on every rank: seeded by (seed, epoch)."""
        rng = np.random.default_rng((data.seed, SEED_ORDER_STREAM, epoch))
        order = rng.permutation(data.num_nodes)
        batch_of = np.empty(data.num_nodes, np.int64)
        batch_of[order] = np.arange(data.num_nodes) // self.batch_size
        out = []
        for b in range(-(-data.num_nodes // self.batch_size)):
            mine = [p.select(batch_of[p.src] == b) for p in pairs]
            if not any(len(p.src) for p in mine):
                continue
            seeds = np.unique(np.concatenate([order[b * self.batch_size:(b + 1) * self.batch_size]]
                                             + [p.dst for p in mine]))
            out.append(SeedBatch(seeds, mine))
        return out

    def sampled(self, data: DiscreteData, batch: SeedBatch, epoch: int, index: int) -> MiniBatchData:
        """The batch's sampled dynamic graph (every training group's snapshots), the same on every rank."""
        last = max(data.steps_of(TRAIN)) + 1
        steps = {}
        for t in range(last):
            rng = np.random.default_rng((data.seed, SAMPLE_STREAM, epoch, index, t))
            steps[t] = sample_step(data.adjacency[t], batch.seeds, self.fanouts, rng)
            if t not in self._diagonals:
                self._diagonals[t] = _diagonal(data.adjacency[t])
        vertices = np.unique(np.concatenate([s.vertices for s in steps.values()]))
        return MiniBatchData(data, vertices, steps, self._diagonals)

    def train_epoch(self, trainer: DiscreteTrainer, pairs: list[PairBatch], total_pairs: int, epoch: int,
                    timer: PhaseTimer) -> tuple[float, int, dict[str, int]]:
        """Every seed batch's groups on its own sampled graph and placement: (loss, work, bytes moved).
        The schedule's optimiser steps run inside each batch (--group-batch), or once after the epoch."""
        loss, work, moved, sizes = 0.0, 0, {}, []
        for mini, local in self._each_batch(trainer, pairs, epoch, timer):
            loss += trainer.schedule.forward_backward(trainer, trainer.schedule.assign(trainer, local), total_pairs,
                                                      timer)
            work += mini.work()
            for mode, n in trainer.placement.transfer_bytes().items():
                moved[mode] = moved.get(mode, 0) + n
            self.full_placement.absorb(trainer.placement)
            sizes.append(mini.sampled_vertices_per_step[:max(mini.steps_of(TRAIN)) + 1])
        self.last_epoch = (epoch, pairs)
        self._report(sizes, trainer.data)
        return loss, work, moved

    def predicted_elements(self, trainer: DiscreteTrainer, profile: CommProfile) -> dict[str, int]:
        """The last training epoch's predicted elements per tag, summed over its seed batches (each batch's
        graph and placement rebuilt: the sampling is a function of (seed, epoch, batch) only)."""
        out: dict[str, int] = {}
        if self.last_epoch is None:
            return out
        epoch, pairs = self.last_epoch
        for _, local in self._each_batch(trainer, pairs, epoch, None):
            for tag, n in (trainer.schedule.predicted_elements(trainer, profile, local) or {}).items():
                out[tag] = out.get(tag, 0) + n
        return out

    def _each_batch(self, trainer: DiscreteTrainer, pairs: list[PairBatch], epoch: int, timer: PhaseTimer | None
                    ) -> Iterator[tuple[MiniBatchData, list[PairBatch]]]:
        """Each seed batch's sampled graph and local pairs, with the trainer switched to its data and placement
        (switched back after the last)."""
        full_data, full_placement = trainer.data, trainer.placement
        self.full_placement = full_placement
        try:
            for index, batch in enumerate(self.batches(full_data, pairs, epoch)):
                with timer.phase("sample") if timer is not None else nullcontext():
                    mini = self.sampled(full_data, batch, epoch, index)
                trainer.data, trainer.placement = mini, self.make_placement(mini)  # type: ignore[assignment]
                yield mini, [mini.local(p) for p in batch.pairs]
        finally:
            trainer.data, trainer.placement = full_data, full_placement

    def _report(self, sizes: list[np.ndarray], data: DiscreteData) -> None:
        per_step = np.array(sizes) if sizes else np.zeros((0, 0), np.int64)
        spread = per_step.max(1) / np.maximum(per_step.min(1), 1) if per_step.size else np.zeros(0)
        self.report = {"seed_batch": self.batch_size, "fanouts": list(self.fanouts),
                       "batches_last_epoch": len(sizes), "vertices": data.num_nodes,
                       "sampled_vertices_per_snapshot": {
                           "mean": float(per_step.mean()) if per_step.size else 0.0,
                           "min": int(per_step.min()) if per_step.size else 0,
                           "max": int(per_step.max()) if per_step.size else 0,
                           "max_over_min_within_batch": float(spread.max()) if len(spread) else 0.0},
                       "evaluation": "whole groups on the full graph (no sampling at inference)"}

