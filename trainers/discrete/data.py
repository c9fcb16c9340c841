"""Host-side data of a discrete-time run: normalised snapshots, input features, link-prediction pairs.

Every rank builds the same :class:`DiscreteData` from the store (reading is cheap next to
training), so rank-independent quantities — Ã_t, the precomputed first-layer Ã_t X_t (ESDG §5.5),
the sampled pairs — are bit-identical everywhere without communication.

Task (ESDG §6.4): the embedding of step t predicts the edges of snapshot t+1. The model reads
snapshots 0..T-2; steps 0..T-4 train (targets 1..T-3), step T-3 validates (target T-2) and step
T-2 tests (target T-1). Per target a fraction θ of its edges are positives, plus as many random
non-edges; both are a deterministic function of (seed, split, epoch, step), never of the rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dgbench.errors import DgbenchError
from dgbench.models.sparse import CsrArrays, csr_tensor, gcn_normalize
from dgbench.store import SNAPSHOTS, SnapshotStore, open_store

TRAIN, VAL, TEST = "train", "val", "test"
_SPLIT_CODE = {TRAIN: 0, VAL: 1, TEST: 2}
MIN_SNAPSHOTS = 4
NEGATIVE_DRAW_ROUNDS = 20


@dataclass
class PairBatch:
    """Scored pairs of one step: endpoints and 0/1 labels (positives first)."""

    step: int
    src: np.ndarray
    dst: np.ndarray
    label: np.ndarray

    def select(self, mask: np.ndarray) -> "PairBatch":
        return PairBatch(self.step, self.src[mask], self.dst[mask], self.label[mask])


class DiscreteData:
    """Normalised adjacency and features of the input snapshots, and the link-prediction targets."""

    def __init__(self, store_path: str | Path, theta: float = 0.1, seed: int = 0):
        store = open_store(store_path, kind=SNAPSHOTS)
        assert isinstance(store, SnapshotStore)
        if store.num_snapshots < MIN_SNAPSHOTS:
            raise DgbenchError(f"{store.path}: link prediction needs at least {MIN_SNAPSHOTS} snapshots "
                               f"(train, validation and test targets), the store has {store.num_snapshots}")
        self.store, self.theta, self.seed = store, theta, seed
        self.num_nodes = store.num_nodes
        self.num_steps = store.num_snapshots - 1  # input snapshots; the last one is only a target
        self.adjacency: list[CsrArrays] = []
        self.degree_features: list[np.ndarray] = []
        self.target_keys: dict[int, np.ndarray] = {}
        for snap in store.snapshots():
            keys = np.unique(snap.src.astype(np.int64) * self.num_nodes + snap.dst)
            if snap.index >= 1:
                self.target_keys[snap.index] = keys
            if snap.index < self.num_steps:
                self.adjacency.append(gcn_normalize(snap.src, snap.dst, snap.weight, self.num_nodes))
                self.degree_features.append(np.stack(
                    [np.bincount(snap.dst, minlength=self.num_nodes), np.bincount(snap.src, minlength=self.num_nodes)],
                    axis=1).astype(np.float32))  # in- and out-degree per snapshot (ESDG §6.4)
        self.edges_per_step = store.edges_per_snapshot()[:self.num_steps].astype(np.int64)
        self.first_layer_input = self._precompute_first_aggregation()

    @property
    def in_features(self) -> int:
        return 2

    def _precompute_first_aggregation(self) -> np.ndarray:
        """Ã_t X_t for every step, [T, N, 2]: parameter-free, so computed once (ESDG §5.5)."""
        out = np.empty((self.num_steps, self.num_nodes, self.in_features), np.float32)
        for t, (a, x) in enumerate(zip(self.adjacency, self.degree_features)):
            matrix = csr_tensor(CsrArrays(torch.from_numpy(a.rowptr), torch.from_numpy(a.col.astype(np.int64)),
                                          torch.from_numpy(a.val.astype(np.float64)), a.shape))
            out[t] = (matrix @ torch.from_numpy(x.astype(np.float64))).numpy().astype(np.float32)
        return out

    # ------------------------------------------------------------------ task
    def steps_of(self, split: str) -> list[int]:
        last_train = self.num_steps - 2  # steps 0 .. T-4
        return {TRAIN: list(range(last_train)), VAL: [self.num_steps - 2], TEST: [self.num_steps - 1]}[split]

    def pairs(self, step: int, split: str, epoch: int = 0) -> PairBatch:
        """Positives (fraction θ of target t+1's edges) and as many random non-edges, seeded by
        (seed, split, epoch, step) only — identical on every rank and scheme."""
        keys = self.target_keys[step + 1]
        n = np.int64(self.num_nodes)
        rng = np.random.default_rng((self.seed, _SPLIT_CODE[split], epoch if split == TRAIN else 0, step))
        count = max(1, int(round(self.theta * len(keys)))) if len(keys) else 0
        positives = keys[rng.choice(len(keys), size=count, replace=False)] if count else keys[:0]
        negatives = self._non_edges(keys, count, rng)
        chosen = np.concatenate([positives, negatives])
        label = np.r_[np.ones(len(positives), np.float32), np.zeros(len(negatives), np.float32)]
        return PairBatch(step, chosen // n, chosen % n, label)

    def _non_edges(self, keys: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        n = self.num_nodes
        found: list[np.ndarray] = []
        have = 0
        for _ in range(NEGATIVE_DRAW_ROUNDS):
            if have >= count:
                break
            draw = rng.integers(0, n, size=(2, 2 * (count - have) + 8), dtype=np.int64)
            candidate = draw[0] * n + draw[1]
            where = np.searchsorted(keys, candidate).clip(max=max(len(keys) - 1, 0))
            is_edge = (keys[where] == candidate) if len(keys) else np.zeros(len(candidate), bool)
            fresh = candidate[(~is_edge) & (draw[0] != draw[1])]
            found.append(fresh)
            have += len(fresh)
        return np.concatenate(found)[:count] if found else np.empty(0, np.int64)

    def work(self) -> int:
        """Edges summed over the input snapshots: the throughput numerator of ESDG §6.3."""
        return int(self.edges_per_step.sum())
