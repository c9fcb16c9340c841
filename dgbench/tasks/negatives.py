"""Negative strategies for link-prediction evaluation sets: random, historical, inductive.

Poursafaei et al. (NeurIPS'22, §4) and DyGLib's ``NegativeEdgeSampler``: K distinct negatives per
positive, never topped up from another strategy (empty slots hold :data:`MISSING`).
See docs/tasks.md (section "Negative strategies").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgbench.errors import DgbenchError

RANDOM, HISTORICAL, INDUCTIVE = "random", "historical", "inductive"
STRATEGIES = (RANDOM, HISTORICAL, INDUCTIVE)
MISSING = -1  # an empty negative slot: the strategy had fewer than K candidates for this positive


@dataclass(frozen=True)
class Ranges:
    """Per positive i, the slice ``values[lo[i]:hi[i]]`` of a shared array (distinct within a row)."""

    values: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def row(self, i: int) -> np.ndarray:
        return self.values[self.lo[i]:self.hi[i]]


@dataclass(frozen=True)
class Negatives:
    """``(n, K)`` negative pairs, MISSING in both arrays where a slot is empty."""

    src: np.ndarray
    dst: np.ndarray


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise DgbenchError(f"unknown negative strategy {strategy!r} (strategies: {', '.join(STRATEGIES)})")
    return strategy


def draw(candidates: Ranges, excluded: Ranges, k: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, k)`` values: per row, k distinct values of its candidate row that are not in its excluded
    row, uniformly without replacement and in random order; fewer than k such values: all of them, the
    remaining slots MISSING. Never anything outside the candidates."""
    n = len(candidates.lo)
    out = np.full((n, k), MISSING, dtype=np.int64)
    for i in range(n):
        row, banned = candidates.row(i), excluded.row(i)
        if not len(row):
            continue
        # k + |banned| distinct positions in random order (Floyd: O(k) in the row's size), banned ones
        # dropped: a uniform k-subset of the allowed values, in random order
        take = min(len(row), k + len(banned))
        chosen = row[rng.choice(len(row), size=take, replace=False)]
        if len(banned):
            chosen = chosen[~np.isin(chosen, banned)]
        chosen = chosen[:k]
        out[i, :len(chosen)] = chosen
    return out


def _decode(keys: np.ndarray, width: int) -> Negatives:
    return Negatives(np.where(keys >= 0, keys // width, MISSING), np.where(keys >= 0, keys % width, MISSING))


def _shared(values: np.ndarray, n: int) -> Ranges:
    """Every row is the whole of ``values``."""
    return Ranges(values, np.zeros(n, np.int64), np.full(n, len(values), np.int64))


# --------------------------------------------------------------------------- event streams

@dataclass(frozen=True)
class Before:
    """What the events before a split leave behind: which vertices they touched and, where a strategy
    needs them, their distinct pairs (``src·N + dst``, ascending; ``None`` when not gathered)."""

    seen: np.ndarray  # bool per vertex
    pairs: np.ndarray | None

    @classmethod
    def of(cls, src: np.ndarray, dst: np.ndarray, num_nodes: int, *, pairs: bool = True) -> Before:
        seen = np.zeros(num_nodes, dtype=bool)
        seen[src] = True
        seen[dst] = True
        keys = np.unique(src.astype(np.int64) * np.int64(num_nodes) + dst) if pairs else None
        return cls(seen, keys)


@dataclass(frozen=True)
class StreamSplit:
    """The split being evaluated: rows ``[start, stop)`` of the given events, which need hold only the
    split and the events sharing a timestamp with it (the whole stream does as well), and ``before``,
    what every event before the split left behind."""

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    num_nodes: int
    start: int
    stop: int
    pool: np.ndarray  # destination pool of the random strategy (sorted, distinct)
    before: Before

    @property
    def keys(self) -> np.ndarray:
        return self.src.astype(np.int64) * np.int64(self.num_nodes) + self.dst.astype(np.int64)


def _groups(labels: np.ndarray, values: np.ndarray, rows: slice) -> Ranges:
    """Per event of ``rows``: the ``values`` of every event with the same label, ascending."""
    order = np.lexsort((values, labels))
    sorted_labels = labels[order]
    change = np.r_[True, sorted_labels[1:] != sorted_labels[:-1]]
    bounds = np.r_[np.flatnonzero(change), len(order)]
    group = np.empty(len(order), np.int64)
    group[order] = np.cumsum(change) - 1
    mine = group[rows]
    return Ranges(values[order].astype(np.int64), bounds[mine], bounds[mine + 1])


def stream_negatives(strategy: str, split: StreamSplit, k: int, rng: np.random.Generator) -> Negatives:
    """``(events in split, k)`` negative pairs of ``strategy`` (MISSING where it has fewer than k)."""
    check_strategy(strategy)
    rows, width = slice(split.start, split.stop), split.num_nodes
    _, time_rank = np.unique(split.t, return_inverse=True)
    n = split.stop - split.start
    if strategy == RANDOM:
        same_source_now = _groups(time_rank.astype(np.int64) * width + split.src, split.dst, rows)
        dst = draw(_shared(split.pool.astype(np.int64), n), same_source_now, k, rng)
        src = np.where(dst >= 0, split.src[rows].astype(np.int64)[:, None], MISSING)
        return Negatives(src, dst)
    keys = split.keys
    now = _groups(time_rank.astype(np.int64), keys, rows)
    observed = split.before.pairs
    if observed is None:
        raise ValueError(f"{strategy} negatives need the pairs observed before the split")
    if strategy == HISTORICAL:
        return _decode(draw(_shared(observed, n), now, k, rng), width)
    return _decode(draw(_inductive_candidates(split, observed), now, k, rng), width)


def _inductive_candidates(split: StreamSplit, observed: np.ndarray) -> Ranges:
    """Per positive at time t: the pairs first seen inside the split strictly before t, never in O_S."""
    inside = split.keys[split.start:split.stop]
    new = ~np.isin(inside, observed)
    unique_keys, first = np.unique(inside[new], return_index=True)
    first_time = split.t[split.start:split.stop][new][first]
    order = np.argsort(first_time, kind="stable")
    by_time = unique_keys[order]
    ends = np.searchsorted(first_time[order], split.t[split.start:split.stop], "left")
    # a row is a prefix of the pairs in order of first appearance: sort each prefix once, lazily, by
    # keeping the values in first-appearance order (draw needs no order within a row)
    return Ranges(by_time, np.zeros(len(ends), np.int64), ends.astype(np.int64))


def stream_new_nodes(split: StreamSplit) -> np.ndarray:
    """Per positive: an endpoint never seen in O_S (the inductive / new-node setting of TGN and DyGLib)."""
    seen, inside = split.before.seen, slice(split.start, split.stop)
    return ~seen[split.src[inside]] | ~seen[split.dst[inside]]


# --------------------------------------------------------------------------- snapshot stores

@dataclass(frozen=True)
class SnapshotTarget:
    """One scored target snapshot: its pairs, every earlier snapshot's pairs (O_S), the positives."""

    num_nodes: int
    target_keys: np.ndarray  # ascending src·N + dst of the target snapshot
    observed_keys: np.ndarray  # ascending distinct pairs of every snapshot before the target
    src: np.ndarray  # the positives scored (a subset of the target's pairs)
    dst: np.ndarray


def refuse_inductive_on_snapshots() -> None:
    raise DgbenchError("inductive negatives need pairs first seen inside the evaluated split before the scored "
                       "step; a snapshot store's validation and test splits are one snapshot each, so there are "
                       "none (use --negatives random or historical)")


def snapshot_negatives(strategy: str, target: SnapshotTarget, k: int, rng: np.random.Generator) -> Negatives:
    check_strategy(strategy)
    if strategy == INDUCTIVE:
        refuse_inductive_on_snapshots()
    n, width = len(target.src), np.int64(target.num_nodes)
    if strategy == RANDOM:
        # the target's destinations of s, and s itself (ESDG §6.4 negatives are non-edges u != v)
        banned = np.union1d(target.target_keys, np.arange(target.num_nodes, dtype=np.int64) * (width + 1))
        base = target.src.astype(np.int64) * width
        excluded = Ranges(banned % width, np.searchsorted(banned, base), np.searchsorted(banned, base + width))
        dst = draw(_shared(np.arange(target.num_nodes, dtype=np.int64), n), excluded, k, rng)
        return Negatives(np.where(dst >= 0, target.src.astype(np.int64)[:, None], MISSING), dst)
    historical = np.setdiff1d(target.observed_keys, target.target_keys, assume_unique=True)
    historical = historical[historical // width != historical % width]
    return _decode(draw(_shared(historical, n), _shared(np.empty(0, np.int64), n), k, rng), width)


def snapshot_new_nodes(target: SnapshotTarget, observed_nodes: np.ndarray) -> np.ndarray:
    """Per positive: an endpoint with no edge in any earlier snapshot (``observed_nodes``: bool per vertex)."""
    return ~observed_nodes[target.src] | ~observed_nodes[target.dst]
