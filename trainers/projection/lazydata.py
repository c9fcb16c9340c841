"""Discrete data built step by step on demand: the dry run's and a real rank's.

:class:`~dgbench.trainers.discrete.data.DiscreteData` builds every step's Ã_t, Ã_t X_t frames, degree features and
target keys. A real rank needs only the steps its placement reads (:class:`RankDiscreteData`: each step
built on first use and kept, so a ``snapshot`` rank holds its own steps; docs/schemes.md). A dry run needs
far less: the partition, the sizes
(per-step nonzeros of Ã_t, N, T) and rank 0's own steps for its probe forward. At ESDG's weak-scaling
size for P = 128 (N = 2^21, T = 256, f = 3: 1.6 B input edges) the whole data is ~70 GiB, so the dry
run builds this subclass instead: the same per-step arithmetic (:func:`~dgbench.models.sparse.gcn_normalize`,
the degree features, the target keys, ESDG §5.5's precomputed Ã_t X_t), each step read from the store
only when a placement or plan asks for it, a few recent steps kept. Per-step nonzeros come from one
streaming pass that counts the distinct (dst, src) entries plus self loops (what ``gcn_normalize`` keeps).

A smoothed step (edge-life, M-product; ESDG Table 1, §5.4) is built from the raw steps of its window, each
raw step read once and a window of them kept (:func:`dgbench.loaders.smoothing.smoothed_entries`, the
arithmetic of the whole-data path); its per-step counts come from one streaming pass. The link-prediction pairs a
placement may ask for (vertex / instance pair scoring) are built on first use (:class:`LazyPairs`); the
snapshot placement never asks, so they are never built for it.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from dgbench.models.sparse import CsrArrays, gcn_normalize
from dgbench.loaders.smoothing import (M_PRODUCT, RAW, WeightedAdjacency, check_smoothing,
                                       coalesced_snapshot, frame_mean, smoothed_entries)
from dgbench.trainers.discrete.data import DiscreteData, first_aggregation

KEEP_STEPS = 4  # steps kept per lazy sequence: a rank's block, and a mover's previous step (graph difference)


class LazySteps(Sequence):
    """``count`` per-step values, ``compute(t)`` on access; the ``keep`` most recently used are kept
    (``keep`` None: every value computed is kept)."""

    def __init__(self, count: int, compute: Callable[[int], Any], keep: int | None = KEEP_STEPS):
        self.count, self.compute, self.keep = count, compute, keep
        self._cache: OrderedDict[int, Any] = OrderedDict()

    def __len__(self) -> int:
        return self.count

    def _one(self, t: int) -> Any:
        if t < 0:
            t += self.count
        if not 0 <= t < self.count:
            raise IndexError(f"step {t} of {self.count}")
        if t in self._cache:
            self._cache.move_to_end(t)
            return self._cache[t]
        value = self.compute(t)
        self._cache[t] = value
        while self.keep is not None and len(self._cache) > self.keep:
            self._cache.popitem(last=False)
        return value

    def keep_only(self, keep: int | None) -> None:
        """From now on keep the ``keep`` most recently used values (None: all); drops the older ones."""
        self.keep = keep
        while keep is not None and len(self._cache) > keep:
            self._cache.popitem(last=False)

    def clear(self) -> None:
        """Drop every value held (each is computed again if asked for)."""
        self._cache.clear()

    def held(self) -> list[int]:
        """The steps whose values are held now, ascending."""
        return sorted(self._cache)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._one(t) for t in range(*index.indices(self.count))]
        return self._one(int(index))

    def __iter__(self) -> Iterator[Any]:
        return (self._one(t) for t in range(self.count))


class LazyFrames:
    """The [T, N, F] array of per-step frames, indexed like it: ``[a:b]`` and ``[:, rows]`` / ``[a:b, rows]``
    build a dense array of the selected steps only."""

    def __init__(self, steps: LazySteps, num_nodes: int, width: int):
        self.steps, self.shape = steps, (len(steps), num_nodes, width)
        self.dtype = np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> np.ndarray:
        rest: tuple = ()
        if isinstance(index, tuple):
            index, rest = index[0], index[1:]
        if not isinstance(index, slice):
            frame = self.steps[int(index)]
            return frame[rest] if rest else frame
        chosen = range(*index.indices(self.shape[0]))
        if not len(chosen):
            return np.zeros((0, *self.shape[1:]), self.dtype)[(slice(None), *rest)]
        return np.stack([self.steps[t][rest] if rest else self.steps[t] for t in chosen])


class LazyTargets(dict):
    """``target_keys``: snapshot t's distinct keys ``src · N + dst``, read from the store on access."""

    def __init__(self, data: "LazyDiscreteData"):
        super().__init__()
        self.data = data
        self._steps = range(1, data.store.num_snapshots)

    def __missing__(self, t: int) -> np.ndarray:
        if t not in self._steps:
            raise KeyError(t)
        snap = self.data.read_snapshot(t)
        return sorted_distinct(snap.src.astype(np.int64) * self.data.num_nodes + snap.dst)

    def __contains__(self, t: object) -> bool:
        return t in self._steps

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[int]:
        return iter(self._steps)

    def keys(self) -> Any:  # type: ignore[override]
        return list(self._steps)


class LazyPairs(Sequence):
    """``data.split_pairs(split, epoch)``, built on first use (placements that score pairs across ranks)."""

    def __init__(self, data: DiscreteData, split: str, epoch: int):
        self.data, self.split, self.epoch = data, split, epoch
        self._pairs: list | None = None

    def _all(self) -> list:
        if self._pairs is None:
            self._pairs = self.data.split_pairs(self.split, self.epoch)
        return self._pairs

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._all())


class LazyDiscreteData(DiscreteData):
    """:class:`~dgbench.trainers.discrete.data.DiscreteData` whose per-step arrays are computed on access (see the
    module docstring). Same constructor and the same numbers, smoothed inputs included."""

    keep_steps: int | None = KEEP_STEPS  # per-step values kept per lazy sequence

    def _read_inputs_and_targets(self) -> None:
        steps = self.num_steps
        self._last_input: Any = None
        self.target_keys = LazyTargets(self)
        if self.smoothing != RAW:  # the window's raw steps, coalesced, and their degree features
            check_smoothing(self.smoothing, self.smoothing_window)
            self._raw_parts = LazySteps(steps, self._raw_step, self.smoothing_window)
        self.degree_features = LazySteps(steps, self._degree_features, self.keep_steps)
        self.adjacency = LazySteps(steps, self._normalised, self.keep_steps)
        self.raw_edges_per_step = self.store.edges_per_snapshot()[:steps].astype(np.int64)
        self._edges: np.ndarray | None = None
        self._nnz: np.ndarray | None = None

    @property  # type: ignore[override]
    def edges_per_step(self) -> np.ndarray:
        """Entries the model aggregates per input step: every stored row of a raw step (as
        :class:`DiscreteData` counts them); a smoothed step's distinct entries, counted in one streaming pass."""
        if self._edges is None:
            self._edges = self.raw_edges_per_step.copy() if self.smoothing == RAW else self._smoothed_counts()[0]
        return self._edges

    @edges_per_step.setter
    def edges_per_step(self, value: np.ndarray) -> None:
        self._edges = value

    # the readers below repeat DiscreteData's per-step arithmetic for one step (tests/test_projection_lazy.py
    # and tests/test_rank_memory.py hold them equal to it)
    def _degree_features(self, t: int) -> np.ndarray:
        if self.smoothing == M_PRODUCT:  # TM-GCN averages the features over the window too (ESDG §5.4)
            return frame_mean([self._raw_parts[s][1] for s in self._window(t)])
        if self.smoothing != RAW:
            return self._raw_parts[t][1]
        return degree_features(self._input_snapshot(t), self.num_nodes)

    def _normalised(self, t: int) -> CsrArrays:
        if self.smoothing != RAW:
            window = [self._raw_parts[s][0] for s in self._window(t)]
            return gcn_normalize(*smoothed_entries(window, self.smoothing, self.num_nodes), self.num_nodes)
        snap = self._input_snapshot(t)
        return gcn_normalize(snap.src, snap.dst, snap.weight, self.num_nodes)

    def _window(self, t: int) -> range:
        """The raw steps a smoothed step t combines, oldest first (cut at step 0, as the streaming smoothing)."""
        return range(max(0, t - self.smoothing_window + 1), t + 1)

    def _raw_step(self, t: int) -> tuple[WeightedAdjacency, np.ndarray]:
        """Raw step t read once: its coalesced entries and its degree features (both what a smoothing mixes)."""
        snap = self.read_snapshot(t)
        return (coalesced_snapshot(snap.src, snap.dst, snap.weight, self.num_nodes),
                degree_features(snap, self.num_nodes))

    def _input_snapshot(self, t: int) -> Any:
        """Input snapshot t; the last one read is kept, so a step's Ã_t and degree features read it once."""
        if self._last_input is None or self._last_input.index != t:
            self._last_input = self.read_snapshot(t)
        return self._last_input

    def _first_frame(self, t: int) -> np.ndarray:
        return first_aggregation(self.adjacency[t], self.degree_features[t])

    def _precompute_first_aggregation(self) -> Any:
        return LazyFrames(LazySteps(self.num_steps, self._first_frame, self.keep_steps), self.num_nodes,
                          self.in_features)

    def nonzeros_per_step(self) -> np.ndarray:
        """Nonzeros of every step's Ã_t (distinct (dst, src) entries and the N self loops), one streaming pass."""
        if self._nnz is None:
            if self.smoothing != RAW:
                self._nnz = self._smoothed_counts()[1]
                return self._nnz
            counts = []
            for snap in map(self.read_snapshot, range(self.num_steps)):
                counts.append(distinct_with_loops(snap.dst.astype(np.int64) * self.num_nodes + snap.src,
                                                  self.num_nodes))
            self._nnz = np.array(counts, np.int64)
        return self._nnz

    def _smoothed_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per smoothed input step: its distinct entries (the window's union) and its Ã_t's nonzeros (those and
        the self loops), from one pass over the raw steps holding a window of keys; both cached."""
        self._edges, self._nnz = smoothed_step_counts(map(self.read_snapshot, range(self.num_steps)),
                                                      self.num_nodes, self.smoothing_window)
        return self._edges, self._nnz


def smoothed_step_counts(snapshots: Iterator[Any], num_nodes: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Per smoothed step of ``snapshots`` (raw, in order): the distinct (dst, src) entries of the union of its
    ``window`` raw steps (cut at step 0) and those with the N self loops (Ã_t's nonzeros). Each raw step's keys
    are sorted once; a union merges the window's sorted runs; nothing hashes (``np.unique`` hashes int64 keys
    and took ~27 s for one 6.3 M-edge step, the P = 128 weak-scaling store's size, where a sort takes ~0.3 s)."""
    recent: deque[np.ndarray] = deque(maxlen=window)
    loops = np.arange(num_nodes, dtype=np.int64) * (num_nodes + 1)  # dst·N + src of the self loops, ascending
    edges, nonzeros = [], []
    for snap in snapshots:
        recent.append(sorted_distinct(snap.dst.astype(np.int64) * num_nodes + snap.src))
        union = merged_distinct(list(recent))
        edges.append(len(union))
        nonzeros.append(len(union) + num_nodes - count_present(union, loops))
    return np.array(edges, np.int64), np.array(nonzeros, np.int64)


def sorted_distinct(keys: np.ndarray) -> np.ndarray:
    """``np.unique(keys)`` by a sort (the same ascending distinct keys, without hashing)."""
    return _without_repeats(np.sort(keys))


def merged_distinct(runs: list[np.ndarray]) -> np.ndarray:
    """The distinct keys of several ascending distinct runs, ascending (a stable sort merges the runs)."""
    if len(runs) == 1:
        return runs[0]
    union = np.concatenate(runs)
    union.sort(kind="stable")
    return _without_repeats(union)


def _without_repeats(ordered: np.ndarray) -> np.ndarray:
    """An ascending array with each run of equal keys kept once."""
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def count_present(ordered: np.ndarray, queries: np.ndarray) -> int:
    """How many of ``queries`` occur in the ascending array ``ordered``."""
    if not len(ordered):
        return 0
    at = np.minimum(np.searchsorted(ordered, queries), len(ordered) - 1)
    return int(np.count_nonzero(ordered[at] == queries))


@contextmanager
def rank_block_kept(data: DiscreteData, world: int) -> Iterator[None]:
    """While rank 0 is built and probed, keep every step it builds (its block of ceil(T/P) steps, plus the few
    recent ones): loading its views reads each step's Ã_t up to three times (Ã_t X_t, the mover's graph
    difference with t-1, the move itself), and a smoothed Ã_t costs its window's raw steps each time. A kept
    step is built once; on exit only the usual few are kept. A placement that reads every step while it is
    built (``vertex``'s plans) holds as many recent steps meanwhile. Data that is not lazy is left as it is."""
    if not isinstance(data, LazyDiscreteData):
        yield
        return
    sequences = [data.adjacency, data.degree_features, data.first_layer_input.steps]
    kept = [steps.keep for steps in sequences]
    for steps in sequences:
        steps.keep_only(None if steps.keep is None else -(-data.num_steps // world) + KEEP_STEPS)
    try:
        yield
    finally:
        for steps, keep in zip(sequences, kept):
            steps.keep_only(keep)


def degree_features(snap: Any, num_nodes: int) -> np.ndarray:
    """In- and out-degree of every vertex in one snapshot, [N, 2] (ESDG §6.1; :class:`DiscreteData`'s features)."""
    return np.stack([np.bincount(snap.dst, minlength=num_nodes), np.bincount(snap.src, minlength=num_nodes)],
                    axis=1).astype(np.float32)


def distinct_with_loops(keys: np.ndarray, num_nodes: int) -> int:
    """Distinct keys dst·N + src together with the N self loops: the nonzeros ``gcn_normalize`` keeps."""
    n = np.int64(num_nodes)
    ordered = np.sort(np.r_[keys, np.arange(n, dtype=np.int64) * (n + 1)])  # a sort: np.unique hashes, ~20x slower
    return int((ordered[1:] != ordered[:-1]).sum()) + 1


class RankDiscreteData(LazyDiscreteData):
    """A real rank's :class:`~dgbench.trainers.discrete.data.DiscreteData`: each step's Ã_t, degree features and
    Ã_t X_t frame built on first use and kept, so the rank reads and holds only the steps its placement
    asks for (a ``snapshot`` rank: its local step ranges). The target keys of every step are read for
    the pair sampling (the draws of all steps share one generator) but not kept beyond the concatenated
    keys of each split. A smoothed step also reads the raw steps of its window before it."""

    keep_steps = None

    def _read_inputs_and_targets(self) -> None:
        super()._read_inputs_and_targets()
        self._handed_over: set[int] = set()  # steps a placement copied into its own views (hand_over_steps)

    def steps_held(self) -> list[int]:
        """The input steps this rank built: held here, or handed over to the placement's views."""
        return sorted(self._handed_over.union(self.adjacency.held()))

    def hand_over_steps(self) -> None:
        """For placements that copy each step's Ã_t and Ã_t X_t into views they keep (a resident ``snapshot``
        rank's block-diagonal operator): drop this data's own copies, so the rank holds each once. A step
        asked for again is rebuilt from the store (the same numbers); the degree features stay (X⁰)."""
        self._handed_over.update(self.adjacency.held())
        self.adjacency.clear()
        self.first_layer_input.steps.clear()
        self._last_input = None

    def keep_recent_steps_only(self) -> None:
        """Keep a few recently built steps instead of all: for placements that copy out what they need of
        each step (a ``vertex`` rank: its own rows), so the rank never holds every step at once."""
        for steps in (self.adjacency, self.degree_features, self.first_layer_input.steps):
            steps.keep_only(KEEP_STEPS)


def lazy_partition_problem(run: Any, kind: type[DiscreteData] | None = None) -> DiscreteData:
    """:func:`dgbench.trainers.discrete.family.partition_problem` with :class:`LazyDiscreteData` (the same steps, in the
    same order; the exactness tests compare the dry run built on it with real runs, tag by tag). ``kind``: another
    data class to build instead (the tests' whole :class:`DiscreteData`)."""
    from dgbench.trainers.discrete import family
    from dgbench.trainers.discrete.presence import apply_presence
    smoothing = family.smoothing_of(run)
    task = run.task
    data = (kind or LazyDiscreteData)(run.config.dataset, theta=task.theta, seed=run.config.seed,
                                      group_length=task.group_length, fingerprint=run.fingerprint,
                                      smoothing=smoothing, smoothing_window=task.smoothing_window,
                                      fixed_training_pairs=task.paper_protocol)
    data.evaluation = family._evaluation(run)
    apply_presence(data, task.presence)
    data.build_model = None if family.is_baseline(run) else \
        (lambda: run.model.build(run.model_options, in_features=data.in_features, hidden=task.hidden))
    data.hidden = task.hidden
    return data
