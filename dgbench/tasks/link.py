"""The two link-prediction tasks and their evaluation sets: event link prediction on streams, snapshot
link prediction on snapshot stores.

**Event link prediction** (TGL / TGN protocol, Zhou et al. VLDB'22): the stream's chronological split
(the store's ``split``, 70/15/15 by default; with ``max_events`` a prefix split in the same
proportions); every validation and test event (s, d, t) is a positive, ranked against K negative
destinations of the chosen strategy (:mod:`dgbench.tasks.negatives`).

**Snapshot link prediction** (ESDG §6.4): the embedding of step t predicts snapshot t+1; of T snapshots
the targets 1..T-3 train, T-2 validates and T-1 tests (the same rule as
``trainers/discrete/data.py``'s ``steps_of``). The positives of a split are the distinct pairs of its
target snapshot (at most :data:`MAX_SNAPSHOT_POSITIVES`, a seeded uniform sample beyond that), each
ranked against K negative destinations.

Both sets also flag positives with a *new node* (an endpoint absent from everything observed before the
split), so scores are reported for seen and new nodes separately where the data have both.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.store import SNAPSHOTS, STREAM, EdgeStreamStore, SnapshotStore, open_store
from dgbench.tasks import LINK_PREDICTION
from dgbench.tasks import negatives as ns
from dgbench.tasks.evalset import EvaluationSet, EvaluationSpec, ensure_set

EVAL_SPLITS = ("val", "test")
SPLIT_CODES = {"val": 1, "test": 2}
STRATEGY_CODES = {ns.RANDOM: 0, ns.HISTORICAL: 1, ns.INDUCTIVE: 2}
MAX_SNAPSHOT_POSITIVES = 50_000
MIN_SNAPSHOTS = 4


def _rng(spec: EvaluationSpec, split: str) -> np.random.Generator:
    """One generator per (set seed, split, strategy): the sets of two strategies are independent draws."""
    return np.random.default_rng([spec.seed, SPLIT_CODES[split], STRATEGY_CODES[spec.strategy], 16])


# --------------------------------------------------------------------------- streams

def stream_ranges(store: EdgeStreamStore, max_events: int | None = None) -> tuple[int, dict[str, tuple[int, int]]]:
    """Events used and the chronological split: the store's, or a prefix split in its proportions."""
    stop = store.num_events if max_events is None else min(max_events, store.num_events)
    ranges = store.split_ranges()
    if stop < store.num_events:
        scale = stop / store.num_events
        cut = [round(ranges["val"][0] * scale), round(ranges["test"][0] * scale)]
        ranges = {"train": (0, cut[0]), "val": (cut[0], cut[1]), "test": (cut[1], stop)}
    return stop, ranges


READ_EVENTS = 1 << 22  # events read at a time while building a stream's evaluation set
TIE_READ = 1 << 16  # timestamps read at a time when looking for the events tied with a split's edge


def build_stream_set(store: EdgeStreamStore, spec: EvaluationSpec, max_events: int | None,
                     read_events: int = READ_EVENTS) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The evaluation set of a stream, in one pass over the store in blocks of ``read_events``: held at
    once are each split's events (with those tied to its edge timestamps) and what the events before it
    left behind (``ns.Before``), never the whole stream. Equal, array for array, to building it from the
    whole stream in memory."""
    stop, ranges = stream_ranges(store, max_events)
    pool = _destination_pool(store, stop, read_events)
    prefix = _PrefixSummary(store, store.num_nodes, pairs=spec.strategy != ns.RANDOM, read_events=read_events)
    arrays: dict[str, np.ndarray] = {}
    details: dict[str, Any] = {"events": stop, "splits": {}}
    for split in EVAL_SPLITS:
        start, end = ranges[split]
        before = prefix.up_to(start)
        lo, hi = _tied_window(store, start, end, stop)
        src, dst, t = _read_events(store, lo, hi)
        part = ns.StreamSplit(src, dst, t, store.num_nodes, start - lo, end - lo, pool, before)
        negatives = ns.stream_negatives(spec.strategy, part, spec.negatives, _rng(spec, split))
        rows = slice(start - lo, end - lo)
        arrays.update({f"{split}_events": np.arange(start, end, dtype=np.int64), f"{split}_src": src[rows],
                       f"{split}_dst": dst[rows], f"{split}_t": t[rows],
                       f"{split}_negative_src": negatives.src, f"{split}_negatives": negatives.dst,
                       f"{split}_new_node": ns.stream_new_nodes(part)})
        details["splits"][split] = _counts(negatives.dst, arrays[f"{split}_new_node"])
    return arrays, details


def _read_events(store: EdgeStreamStore, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """src, dst (int64) and t (float64) of events [start, stop)."""
    return (store.read("src", start, stop).astype(np.int64), store.read("dst", start, stop).astype(np.int64),
            store.read("t", start, stop).astype(np.float64))


def _destination_pool(store: EdgeStreamStore, stop: int, read_events: int) -> np.ndarray:
    """The random strategy's pool: every destination of the events used, ascending."""
    return distinct_vertices((store.read("dst", lo, min(lo + read_events, stop)) for lo in range(0, stop, read_events)),
                             store.num_nodes)


def distinct_vertices(blocks: Iterable[np.ndarray], num_nodes: int) -> np.ndarray:
    """``np.unique`` of vertex-id ``blocks`` concatenated, ascending, in one pass of bounded memory (a flag per
    vertex): the destination pool of a stream read block by block."""
    seen = np.zeros(num_nodes, dtype=bool)
    for block in blocks:
        seen[block] = True
    return np.flatnonzero(seen).astype(np.int64)


def _tied_window(store: EdgeStreamStore, start: int, end: int, stop: int) -> tuple[int, int]:
    """Events [lo, hi) ⊇ [start, end): the split and every used event sharing its first or last timestamp
    (they share groups with the split's positives; events are time-sorted, so they lie at its edges)."""
    if start >= end:
        return start, end
    lo, first = start, float(store.read("t", start, start + 1)[0])
    while lo > 0:
        block = store.read("t", max(0, lo - TIE_READ), lo).astype(np.float64)
        tied = len(block) - int(np.searchsorted(block, first, "left"))
        lo -= tied
        if tied < len(block):
            break
    hi, last = end, float(store.read("t", end - 1, end)[0])
    while hi < stop:
        block = store.read("t", hi, min(stop, hi + TIE_READ)).astype(np.float64)
        tied = int(np.searchsorted(block, last, "right"))
        hi += tied
        if tied < len(block):
            break
    return lo, hi


class _PrefixSummary:
    """``ns.Before`` of a growing prefix of the stream, read forward in blocks once."""

    def __init__(self, store: EdgeStreamStore, num_nodes: int, *, pairs: bool, read_events: int) -> None:
        self.store, self.read_events, self.width = store, read_events, np.int64(num_nodes)
        self.seen = np.zeros(num_nodes, dtype=bool)
        self.pairs: np.ndarray | None = np.empty(0, np.int64) if pairs else None
        self.pending: list[np.ndarray] = []
        self.position = 0

    def up_to(self, position: int) -> ns.Before:
        for lo in range(self.position, position, self.read_events):
            hi = min(lo + self.read_events, position)
            src, dst = self.store.read("src", lo, hi), self.store.read("dst", lo, hi)
            self.seen[src] = True
            self.seen[dst] = True
            if self.pairs is not None:
                self._add_pairs(np.unique(src.astype(np.int64) * self.width + dst))
        self.position = max(self.position, position)
        self._merge()
        return ns.Before(self.seen.copy(), None if self.pairs is None else self.pairs.copy())

    def _add_pairs(self, keys: np.ndarray) -> None:
        """Distinct pairs merged once the pending ones outgrow those merged (amortised linear)."""
        self.pending.append(keys)
        assert self.pairs is not None
        if sum(len(k) for k in self.pending) > max(len(self.pairs), self.read_events):
            self._merge()

    def _merge(self) -> None:
        if self.pairs is not None and self.pending:
            self.pairs = np.unique(np.concatenate([self.pairs, *self.pending]))
        self.pending = []


def _counts(negatives: np.ndarray, new_node: np.ndarray) -> dict[str, Any]:
    present = (negatives != ns.MISSING).sum(axis=1)
    return {"positives": int(len(negatives)), "without_negatives": int((present == 0).sum()),
            "short_of_k": int((present < negatives.shape[1]).sum()), "negatives": int(present.sum()),
            "new_node_positives": int(new_node.sum())}


# --------------------------------------------------------------------------- snapshot stores

def snapshot_targets(num_snapshots: int) -> dict[str, int]:
    """The target snapshot of the validation and test splits (ESDG §6.4: T-2 and T-1)."""
    if num_snapshots < MIN_SNAPSHOTS:
        raise DgbenchError(f"link prediction needs at least {MIN_SNAPSHOTS} snapshots (train, validation and "
                           f"test targets), the store has {num_snapshots}")
    return {"val": num_snapshots - 2, "test": num_snapshots - 1}


def build_snapshot_set(store: SnapshotStore, spec: EvaluationSpec) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    targets = snapshot_targets(store.num_snapshots)
    n = store.num_nodes
    width = np.int64(n)
    observed = np.empty(0, np.int64)
    observed_nodes = np.zeros(n, dtype=bool)
    keys_of: dict[int, np.ndarray] = {}
    for snap in store.snapshots(0, max(targets.values()) + 1):
        keys_of[snap.index] = np.unique(snap.src.astype(np.int64) * width + snap.dst)
    arrays: dict[str, np.ndarray] = {}
    details: dict[str, Any] = {"splits": {}}
    first = min(targets.values())
    observed = np.unique(np.concatenate([keys_of[i] for i in range(first)])) if first else observed
    for i in range(first):
        observed_nodes[keys_of[i] // width] = True
        observed_nodes[keys_of[i] % width] = True
    for split in EVAL_SPLITS:
        tau = targets[split]
        if tau > first:  # the test target also observes the validation target (and anything between)
            extra = [keys_of[i] for i in range(first, tau)]
            observed = np.union1d(observed, np.concatenate(extra))
            for keys in extra:
                observed_nodes[keys // width] = True
                observed_nodes[keys % width] = True
        rng = _rng(spec, split)
        positives = keys_of[tau]
        if len(positives) > MAX_SNAPSHOT_POSITIVES:  # the same positives for every strategy
            cap = np.random.default_rng([spec.seed, SPLIT_CODES[split], 99])
            positives = np.sort(cap.choice(positives, MAX_SNAPSHOT_POSITIVES, replace=False))
        target = ns.SnapshotTarget(n, keys_of[tau], observed, positives // width, positives % width)
        negatives = ns.snapshot_negatives(spec.strategy, target, spec.negatives, rng)
        new_node = ns.snapshot_new_nodes(target, observed_nodes)
        arrays.update({f"{split}_steps": np.full(len(positives), tau - 1, np.int64), f"{split}_src": target.src,
                       f"{split}_dst": target.dst, f"{split}_negative_src": negatives.src,
                       f"{split}_negatives": negatives.dst, f"{split}_new_node": new_node})
        details["splits"][split] = {**_counts(negatives.dst, new_node), "target_snapshot": tau,
                                    "target_pairs": int(len(keys_of[tau]))}
    return arrays, details


# --------------------------------------------------------------------------- either kind

def link_prediction_set(store_path: str | Path, strategy: str, negatives: int, seed: int = 0,
                        max_events: int | None = None) -> EvaluationSet:
    """The link-prediction evaluation set of a store (built and written on first use)."""
    ns.check_strategy(strategy)
    if negatives < 1:
        raise DgbenchError(f"--eval-negatives {negatives}: must be >= 1")
    store = open_store(store_path)
    if store.kind == STREAM:
        assert isinstance(store, EdgeStreamStore)
        used = max_events if max_events is not None and max_events < store.num_events else None
        task = LINK_PREDICTION if used is None else f"{LINK_PREDICTION}-first{used}"
        spec = EvaluationSpec(task, strategy, negatives, seed)
        return ensure_set(store_path, spec, store.fingerprint, lambda: build_stream_set(store, spec, used))
    if store.kind == SNAPSHOTS:
        assert isinstance(store, SnapshotStore)
        spec = EvaluationSpec(LINK_PREDICTION, strategy, negatives, seed)
        if strategy == ns.INDUCTIVE:
            ns.refuse_inductive_on_snapshots()
        return ensure_set(store_path, spec, store.fingerprint, lambda: build_snapshot_set(store, spec))
    raise DgbenchError(f"{store_path}: no link-prediction task for stores of kind {store.kind!r}")
