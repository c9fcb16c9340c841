"""Host-side data of a discrete-time run: normalised snapshots, input features, link-prediction pairs.

Every rank computes rank-independent quantities — Ã_t, the precomputed first-layer Ã_t X_t (ESDG §5.5),
the sampled pairs — from the store itself, so they are bit-identical everywhere without communication.
:class:`DiscreteData` builds every step; a rank of a raw run builds only the steps its placement reads
(:class:`dgbench.trainers.projection.lazydata.RankDiscreteData`, the same arithmetic per step).

Protocols. Whole sequence (ESDG §6.4, ``group_length`` 0): one pass over every input step, the
recurrent state carried from step 0, a loss at every training step. Snapshot groups (BLAD §3.1, Eq.
1, ``group_length`` L > 0): every target step S is an independent sample, the group
G = (G_{S-L+1}, ..., G_S) run from a fresh state with the loss on S only. Eq. 1 writes the group as
S-l..S and calls l its length; here the length L counts the group's snapshots (L = l + 1, Eq. 2's
"group", Table 3's T). The first L-1 targets have fewer earlier snapshots, so their groups are cut at
step 0 (GUESS: the paper does not say; this keeps the task's pairs those of the whole-sequence
protocol).

Task (ESDG §6.4): the embedding of step t predicts the edges of snapshot t+1. The model reads
snapshots 0..T-2; steps 0..T-4 train (targets 1..T-3), step T-3 validates (target T-2) and step
T-2 tests (target T-1). Per target a fraction θ of its edges are positives (without replacement),
plus as many random non-edges; both are a deterministic function of (seed, split, epoch, step),
never of the rank. All steps of a split are sampled together, in a few vectorised draws of one
generator seeded by (seed, split, epoch): per-step generators and calls cost more than the draws.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dgbench.errors import DgbenchError
from dgbench.memory import current_rss_bytes
from dgbench.models.sparse import CsrArrays, csr_tensor, gcn_normalize
from dgbench.store import SNAPSHOTS, Snapshot, SnapshotStore, open_store
from dgbench.loaders.smoothing import M_PRODUCT, RAW, smooth_adjacencies, window_mean
from dgbench.tasks.evalset import EvaluationSet
from dgbench.tasks.evaluator import pair_id

TRAIN, VAL, TEST = "train", "val", "test"
_SPLIT_CODE = {TRAIN: 0, VAL: 1, TEST: 2}
MIN_SNAPSHOTS = 4
NEGATIVE_DRAW_ROUNDS = 20


@dataclass
class PairBatch:
    """Scored pairs of one step: endpoints and 0/1 labels (positives first). Evaluation pairs also carry
    ``ids``: each pair's place in its evaluation set (:func:`dgbench.tasks.evaluator.pair_id`), kept
    through ``select``."""

    step: int
    src: np.ndarray
    dst: np.ndarray
    label: np.ndarray
    ids: np.ndarray | None = None

    def select(self, mask: np.ndarray) -> "PairBatch":
        return PairBatch(self.step, self.src[mask], self.dst[mask], self.label[mask],
                         None if self.ids is None else self.ids[mask])


def evaluation_pairs(evaluation: "list[EvaluationSet]", split: str) -> list[PairBatch]:
    """The pairs of every evaluation set's ``split`` (positives, then each present negative), one batch
    per input step, with their ids; every set of a run scores the same positives."""
    batches = []
    for index, chosen in enumerate(evaluation):
        steps, src, dst = chosen.get(split, "steps"), chosen.get(split, "src"), chosen.get(split, "dst")
        neg_src, neg_dst = chosen.get(split, "negative_src"), chosen.get(split, "negatives")
        n, k = neg_dst.shape
        rows, columns = np.nonzero(neg_dst >= 0)
        pair_src = np.concatenate([src, neg_src[rows, columns]]).astype(np.int64)
        pair_dst = np.concatenate([dst, neg_dst[rows, columns]]).astype(np.int64)
        label = np.r_[np.ones(n, np.float32), np.zeros(len(rows), np.float32)]
        ids = pair_id(index, np.r_[np.arange(n), rows], np.r_[np.zeros(n, np.int64), columns + 1], n, k)
        step = np.r_[steps, steps[rows]]
        for t in np.unique(step):
            mine = step == t
            batches.append(PairBatch(int(t), pair_src[mine], pair_dst[mine], label[mine], ids[mine]))
    return batches


@dataclass
class SplitTargets:
    """The target edges of a split's steps, concatenated step-major as global keys
    ``i · N² + src · N + dst`` (ascending), so one search covers every step."""

    steps: list[int]
    keys: np.ndarray
    starts: np.ndarray  # offsets of each step's keys, len(steps) + 1
    counts: np.ndarray  # positives (= negatives) per step


def _per_segment(ascending: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """How many of ``ascending`` fall in each [bounds[i], bounds[i+1])."""
    return np.diff(np.searchsorted(ascending, bounds))


def _draw(bounds: np.ndarray, wanted: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``wanted[i]`` uniform integers in [bounds[i], bounds[i+1]) for every i, sorted."""
    sizes = np.diff(bounds)[wanted > 0]
    if not len(sizes):
        return np.empty(0, np.int64)
    if (sizes == sizes[0]).all():  # equal segments (negatives): one scalar-bounded draw
        segment = np.repeat(np.arange(len(wanted)), wanted)
        return np.sort(bounds[segment] + rng.integers(0, sizes[0], size=len(segment)))
    return np.sort(np.concatenate([bounds[i] + rng.integers(0, bounds[i + 1] - bounds[i], size=k)
                                   for i, k in enumerate(wanted.tolist()) if k]))


def _distinct_per_segment(starts: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``counts[i]`` distinct uniform positions in [starts[i], starts[i+1]) for every i, ascending.

    Draws with replacement and redraws exactly the shortfall until each segment has its count:
    never overshooting, this is "the first k distinct values of an i.i.d. uniform sequence",
    a uniform k-subset.
    """
    have = _distinct(_draw(starts, counts, rng))
    while (short := counts - _per_segment(have, starts)).any():
        extra = _distinct(_draw(starts, short, rng))
        at = np.searchsorted(have, extra)
        new = have[np.minimum(at, len(have) - 1)] != extra
        have = np.insert(have, at[new], extra[new])
    return have


def first_aggregation(a: CsrArrays, x: np.ndarray) -> np.ndarray:
    """Ã_t X_t of one step in float64, stored as float32 (ESDG §5.5's parameter-free first aggregation)."""
    matrix = csr_tensor(CsrArrays(torch.from_numpy(a.rowptr), torch.from_numpy(a.col.astype(np.int64)),
                                  torch.from_numpy(a.val.astype(np.float64)), a.shape))
    return (matrix @ torch.from_numpy(x.astype(np.float64))).numpy().astype(np.float32)


def _distinct(ascending: np.ndarray) -> np.ndarray:
    return ascending[np.r_[True, ascending[1:] != ascending[:-1]]] if len(ascending) else ascending


class DiscreteData:
    """Normalised adjacency and features of the input snapshots, and the link-prediction targets."""

    def __init__(self, store_path: str | Path, theta: float = 0.1, seed: int = 0, group_length: int = 0,
                 fingerprint: str | None = None, smoothing: str = RAW, smoothing_window: int = 3,
                 fixed_training_pairs: bool = False):
        if group_length < 0:
            raise DgbenchError(f"--group-length {group_length}: must be >= 0 (0: the whole-sequence protocol)")
        store = open_store(store_path, kind=SNAPSHOTS, fingerprint=fingerprint)  # the store the job started on
        assert isinstance(store, SnapshotStore)
        if store.num_snapshots < MIN_SNAPSHOTS:
            raise DgbenchError(f"{store.path}: link prediction needs at least {MIN_SNAPSHOTS} snapshots "
                               f"(train, validation and test targets), the store has {store.num_snapshots}")
        self.rss_before_bytes = current_rss_bytes()  # the process before this data: a rank's own floor
        self.store, self.theta, self.seed, self.group_length = store, theta, seed, group_length
        self.smoothing, self.smoothing_window = smoothing, smoothing_window
        self.fixed_training_pairs = fixed_training_pairs  # ESDG §6.4: one training set, drawn once
        self.num_nodes = store.num_nodes
        self.num_steps = store.num_snapshots - 1  # input snapshots; the last one is only a target
        self.store_bytes_read = 0  # bytes of the snapshot arrays read from the store (src, dst, weight)
        self.target_keys: dict[int, np.ndarray] = {}
        self._read_inputs_and_targets()
        self.first_layer_input = self._precompute_first_aggregation()
        self._targets: dict[str, SplitTargets] = {}
        self.evaluation: list[EvaluationSet] = []  # the run's evaluation sets (validation and test pairs)


    def nonzeros_per_step(self) -> np.ndarray:
        """Nonzeros of every input step's normalised Ã_t (the edges a layer aggregates)."""
        return np.array([a.val.size for a in self.adjacency], np.int64)

    def read_snapshot(self, t: int) -> Snapshot:
        """Snapshot t from the store, its bytes counted in ``store_bytes_read``."""
        snap = self.store.snapshot(t)
        self.store_bytes_read += sum(a.nbytes for a in (snap.src, snap.dst, snap.weight) if a is not None)
        return snap

    def steps_held(self) -> list[int]:
        """The input steps whose Ã_t this data holds (every one)."""
        return list(range(self.num_steps))

    def figures(self) -> dict[str, Any]:
        """What this rank read from the store and built, for the record's per-rank entries."""
        return {"store_bytes_read": int(self.store_bytes_read), "input_steps_held": self.steps_held(),
                "rss_before_data_bytes": int(self.rss_before_bytes)}

    def _read_inputs_and_targets(self) -> None:
        """Inputs (Ã_t, degree features) of steps 0..T-2, smoothed when the run pairs its model with a
        smoothing (ESDG Table 1, §5.4: TM-GCN's features are M-averaged too), and targets (edges of
        snapshots 1..T-1) from the raw snapshots: a smoothed target would carry the previous snapshots'
        edges over as trivial positives. ``edges_per_step`` counts the inputs the model aggregates."""
        n, steps = self.num_nodes, self.num_steps
        raw: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
        self.degree_features: list[np.ndarray] = []
        for snap in map(self.read_snapshot, range(self.store.num_snapshots)):
            if snap.index >= 1:
                self.target_keys[snap.index] = np.unique(snap.src.astype(np.int64) * n + snap.dst)
            if snap.index < steps:
                raw.append((snap.src, snap.dst, snap.weight))
                self.degree_features.append(np.stack(
                    [np.bincount(snap.dst, minlength=n), np.bincount(snap.src, minlength=n)],
                    axis=1).astype(np.float32))  # in- and out-degree per snapshot (ESDG §6.1)
        inputs = raw if self.smoothing == RAW else list(
            smooth_adjacencies(iter(raw), n, self.smoothing, self.smoothing_window))
        if self.smoothing == M_PRODUCT:
            self.degree_features = window_mean(self.degree_features, self.smoothing_window)
        self.adjacency: list[CsrArrays] = [gcn_normalize(src, dst, w, n) for src, dst, w in inputs]
        self.edges_per_step = np.array([len(src) for src, _, _ in inputs], dtype=np.int64)
        self.raw_edges_per_step = self.store.edges_per_snapshot()[:steps].astype(np.int64)

    def input_edge_lists(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(src, dst) of every input step as the model aggregates them (:meth:`input_edges_of`)."""
        return [self.input_edges_of(t) for t in range(self.num_steps)]

    def input_edges_of(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of input step t as the model aggregates it (smoothed when the run smooths): Ã_t's
        entries (row = dst, column = src) without the diagonal the normalisation adds."""
        a = self.adjacency[t]
        col = np.asarray(a.col).astype(np.int64)
        dst = np.repeat(np.arange(len(a.rowptr) - 1, dtype=np.int64), np.diff(a.rowptr))
        keep = col != dst
        return col[keep], dst[keep]

    @property
    def in_features(self) -> int:
        return 2

    def _precompute_first_aggregation(self) -> np.ndarray:
        """Ã_t X_t for every step, [T, N, 2]: parameter-free, so computed once (ESDG §5.5)."""
        out = np.empty((self.num_steps, self.num_nodes, self.in_features), np.float32)
        for t, (a, x) in enumerate(zip(self.adjacency, self.degree_features)):
            out[t] = first_aggregation(a, x)
        return out

    # ------------------------------------------------------------------ task
    def group_of(self, step: int) -> range:
        """The snapshot group of target step S under the group protocol: steps S-L+1..S, cut at 0."""
        if not self.group_length:
            raise ValueError("group_of: the run uses the whole-sequence protocol (group_length 0)")
        return range(max(0, step - self.group_length + 1), step + 1)

    def steps_of(self, split: str) -> list[int]:
        last_train = self.num_steps - 2  # steps 0 .. T-4
        return {TRAIN: list(range(last_train)), VAL: [self.num_steps - 2], TEST: [self.num_steps - 1]}[split]

    def pairs(self, step: int, split: str, epoch: int = 0) -> PairBatch:
        """The pairs of one step (see :meth:`split_pairs`)."""
        return self.split_pairs(split, epoch)[self.steps_of(split).index(step)]

    def split_pairs(self, split: str, epoch: int = 0) -> list[PairBatch]:
        """Per step of ``split``: positives (fraction θ of target t+1's edges) and as many random
        non-edges, seeded by (seed, split, epoch) only — identical on every rank and scheme. The
        validation and test splits of a run with evaluation sets (``self.evaluation``, set by the family)
        are those sets' fixed pairs instead (:func:`evaluation_pairs`)."""
        if split != TRAIN and self.evaluation:
            return evaluation_pairs(self.evaluation, split)
        targets = self._split_targets(split)
        drawn = epoch if split == TRAIN and not self.fixed_training_pairs else 0  # §6.4: one fixed training set
        rng = np.random.default_rng((self.seed, _SPLIT_CODE[split], drawn))
        positives = targets.keys[_distinct_per_segment(targets.starts, targets.counts, rng)]
        negatives = self._non_edges(targets, rng)
        square = np.int64(self.num_nodes) ** 2
        ends = np.cumsum(targets.counts)
        batches = []
        for i, step in enumerate(targets.steps):
            chosen = np.concatenate([positives[ends[i] - targets.counts[i]:ends[i]],
                                     negatives[ends[i] - targets.counts[i]:ends[i]]]) % square
            label = np.zeros(len(chosen), np.float32)
            label[:targets.counts[i]] = 1
            src, dst = np.divmod(chosen, np.int64(self.num_nodes))
            batches.append(PairBatch(step, src, dst, label))
        return batches

    def release_split_targets(self, split: str) -> None:
        """Drop the concatenated target keys of ``split`` (built again, the same, when pairs are drawn next):
        the loop draws an epoch's training pairs before its pass, so the keys of every training step need not
        stay through the pass (a constant per rank, P = 1's size at every P: 20 MiB at 65k vertices x 13
        training steps, ≈ 0.26 GB at Flickr's size). A rank's data reads the targets from the store again."""
        self._targets.pop(split, None)

    def _split_targets(self, split: str) -> "SplitTargets":
        if split not in self._targets:
            steps = self.steps_of(split)
            keys, sizes = self._concatenated_target_keys(steps)
            self._targets[split] = SplitTargets(
                steps, keys, np.r_[0, np.cumsum(sizes)].astype(np.int64),
                np.array([max(1, int(round(self.theta * n))) if n else 0 for n in sizes], np.int64))
        return self._targets[split]

    def _concatenated_target_keys(self, steps: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Target keys of every step, step i's shifted by i·N², one array, and each step's count. Written one
        step at a time into an array sized by the store's edge counts (an upper bound on distinct keys), then
        shrunk in place: the rank never holds every step's keys twice (a list, then their concatenation)."""
        square = np.int64(self.num_nodes) ** 2
        edges = self.store.edges_per_snapshot()
        out = np.empty(int(sum(int(edges[t + 1]) for t in steps)), np.int64)
        sizes, end = np.zeros(len(steps), np.int64), 0
        for i, t in enumerate(steps):
            step_keys = self.target_keys[t + 1]
            if end + len(step_keys) > len(out):  # a store whose counts fall short: grow (not expected)
                out.resize(end + len(step_keys), refcheck=False)
            np.add(step_keys, i * square, out=out[end:end + len(step_keys)])
            sizes[i], end = len(step_keys), end + len(step_keys)
        out.resize(end, refcheck=False)
        return out, sizes

    def _non_edges(self, targets: "SplitTargets", rng: np.random.Generator) -> np.ndarray:
        """``counts[i]`` uniform non-edges (u ≠ v) of every step i (with replacement), as global
        keys ascending: rejected draws are redrawn (ESDG §6.4's random negatives)."""
        n, square = np.int64(self.num_nodes), np.int64(self.num_nodes) ** 2
        bounds = np.arange(len(targets.steps) + 1, dtype=np.int64) * square
        need, found = targets.counts.copy(), []
        for _ in range(NEGATIVE_DRAW_ROUNDS):
            if not need.any():
                break
            candidate = _draw(bounds, need, rng)
            where = np.minimum(np.searchsorted(targets.keys, candidate), len(targets.keys) - 1)
            local = candidate % square
            fresh = candidate[(targets.keys[where] != candidate) & (local // n != local % n)]
            found.append(fresh)
            need -= _per_segment(fresh, bounds)
        if need.any():
            raise DgbenchError(f"{self.store.path}: too few non-edges to sample link-prediction negatives")
        return found[0] if len(found) == 1 else np.sort(np.concatenate(found))

    def work(self) -> int:
        """Edges summed over the input snapshots: the throughput numerator of ESDG §6.3. Under the group
        protocol, over every training group's snapshots (a snapshot in several groups counts in each)."""
        if not self.group_length:
            return int(self.edges_per_step.sum())
        return int(sum(self.edges_per_step[self.group_of(step).start:step + 1].sum()
                       for step in self.steps_of(TRAIN)))
