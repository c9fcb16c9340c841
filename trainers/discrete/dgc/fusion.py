"""DGC's chunk fusion (§5.1): spatial fusion of a rank's chunks and temporal fusion of its sequences.

* :func:`fuse_chunks` (§5.1.1, Fig. 8): chunks loaded one by one load every row two of them share
  (their own boundary rows, and halo rows both read) twice. The heuristic estimates that redundant
  loading for every pair and repeatedly fuses the pair with the most, while the fused chunk fits the
  memory budget; a chunk "close to" the budget (≥ ``close`` of it) is fused no further.
* :func:`pack_sequences` (§5.1.2, Fig. 9-10): instead of padding every sequence to the longest,
  short sequences are concatenated into rows of the packed [steps, rows] layout (first-fit
  decreasing), and :class:`Packing` gives the masks that keep them apart: ``reset`` is True where a
  sequence starts (M = 0 of Eq. 4-5: the carry restarts), ``present`` is False on the padding that
  is left. Run with :class:`~dgbench.models.contract.SequenceMask`, a packed row gives each of its
  sequences exactly the values of running it alone.

Choices the paper leaves open: the redundancy of a pair is the number of rows both load (one row =
``row_bytes``); a chunk's memory is its loaded rows × ``row_bytes`` — ``dgc`` passes 4 bytes × the
model's summed spatial widths and a fixed ``--fusion-budget-mb``, fusing from the first epoch (§5.1.1
measures each chunk's memory "right after completing the first training epoch" and fuses afterwards;
that measurement is not done here); "close to" is 90 %; ties go to the pair of lowest ids. Sequences
whose carry crosses ranks (one that starts from a received state, or whose final state is sent on) are
``exclusive``: each gets a row of its own at offset 0, so the row's initial carry can be the received
state and the row's final carry is the segment's own.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import torch

from dgbench.errors import DgbenchError

CLOSE_TO_BUDGET = 0.9


# --------------------------------------------------------------------------- spatial fusion

@dataclass(frozen=True)
class Fusion:
    """Groups of chunk indices (each group runs as one batch) and what fusing saved."""

    groups: tuple[tuple[int, ...], ...]
    rows_unfused: int  # Σ over chunks of rows loaded, one by one
    rows_fused: int  # Σ over groups of distinct rows loaded

    @property
    def rows_saved(self) -> int:
        return self.rows_unfused - self.rows_fused


def fuse_chunks(loaded: list[np.ndarray], row_bytes: float, budget: float, close: float = CLOSE_TO_BUDGET) -> Fusion:
    """§5.1.1's heuristic over one rank's chunks; ``loaded[a]`` are the row ids chunk a loads (its own
    instances and its halo), ``budget`` the memory a fused chunk may take (bytes)."""
    if row_bytes <= 0 or budget <= 0:
        raise DgbenchError(f"chunk fusion needs a positive row size and budget (got {row_bytes}, {budget})")
    sets = [set(np.asarray(rows).tolist()) for rows in loaded]
    alive = {a: (a,) for a in range(len(sets))}
    heap = [(-overlap, a, b) for (a, b), overlap in _pair_overlaps(loaded).items()]
    heapq.heapify(heap)
    next_id = len(sets)
    while heap:
        negative, a, b = heapq.heappop(heap)
        if a not in alive or b not in alive:
            continue  # a stale entry: one side was fused already
        union = len(sets[a]) + len(sets[b]) + negative  # |A ∪ B| = |A| + |B| - |A ∩ B|
        if union * row_bytes > budget or max(len(sets[a]), len(sets[b])) * row_bytes >= close * budget:
            continue
        merged = sets[a] | sets[b]
        sets.append(merged)
        alive[next_id] = alive.pop(a) + alive.pop(b)
        for other in alive:
            if other != next_id and (shared := len(merged & sets[other])):
                heapq.heappush(heap, (-shared, min(other, next_id), max(other, next_id)))
        next_id += 1
    groups = tuple(sorted(tuple(sorted(members)) for members in alive.values()))
    fused = sum(len(sets[g]) for g in alive)
    return Fusion(groups, sum(len(np.unique(rows)) for rows in loaded), fused)


def _pair_overlaps(loaded: list[np.ndarray]) -> dict[tuple[int, int], int]:
    """|loaded[a] ∩ loaded[b]| for every pair of chunks sharing a row (a < b)."""
    rows = [np.unique(np.asarray(r, dtype=np.int64)) for r in loaded]
    if not rows or not sum(len(r) for r in rows):
        return {}
    row = np.concatenate(rows)
    chunk = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
    order = np.lexsort((chunk, row))
    row, chunk = row[order], chunk[order]
    starts = np.r_[0, np.flatnonzero(row[1:] != row[:-1]) + 1]
    ends = np.r_[starts[1:], len(row)]
    counts: dict[tuple[int, int], int] = {}
    for a, b in zip(starts[ends - starts > 1], ends[ends - starts > 1]):
        holders = chunk[a:b].tolist()
        for i, first in enumerate(holders):
            for second in holders[i + 1:]:
                counts[(first, second)] = counts.get((first, second), 0) + 1
    return counts


# --------------------------------------------------------------------------- temporal fusion

@dataclass(frozen=True)
class Packing:
    """Where each sequence (segment) sits in the packed [length, rows] layout."""

    length: int
    rows: int
    row: np.ndarray  # per segment
    offset: np.ndarray  # per segment: its first step in the row
    lengths: np.ndarray  # per segment

    @property
    def padded_rows(self) -> int:
        """Rows zero padding would need (one per segment)."""
        return len(self.lengths)

    def reset(self) -> np.ndarray:
        """[length, rows]: True where a segment starts (Eq. 5's M = 0 before it)."""
        out = np.zeros((self.length, self.rows), dtype=bool)
        out[self.offset, self.row] = True
        return out

    def present(self) -> np.ndarray:
        """[length, rows]: True inside a segment, False on padding."""
        out = np.zeros((self.length, self.rows), dtype=bool)
        out.reshape(-1)[self.positions()] = True
        return out

    def positions(self) -> np.ndarray:
        """Flat [length · rows] position of every element of the segments, concatenated in segment
        order and each in time order (the order :meth:`pack` reads and :meth:`unpack` returns)."""
        within = np.arange(self.lengths.sum()) - np.repeat(np.cumsum(self.lengths) - self.lengths, self.lengths)
        steps = np.repeat(self.offset, self.lengths) + within
        return steps * self.rows + np.repeat(self.row, self.lengths)

    def pack(self, values: torch.Tensor) -> torch.Tensor:
        """[Σ lengths, F] -> [length, rows, F] (zeros on padding)."""
        flat = values.new_zeros((self.length * self.rows, *values.shape[1:]))
        index = torch.from_numpy(self.positions()).to(values.device)
        return flat.index_copy(0, index, values).view(self.length, self.rows, *values.shape[1:])

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[length, rows, F] -> [Σ lengths, F]."""
        index = torch.from_numpy(self.positions()).to(packed.device)
        return packed.reshape(self.length * self.rows, *packed.shape[2:]).index_select(0, index)


def pack_sequences(lengths: np.ndarray, exclusive: np.ndarray | None = None, capacity: int | None = None) -> Packing:
    """First-fit decreasing packing of segments into rows of ``capacity`` steps (default: the longest
    segment). ``exclusive[s]`` True: segment s gets a row of its own (offset 0); see the module
    docstring. All exclusive = zero padding (Fig. 9(b))."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) and lengths.min() < 1:
        raise DgbenchError("every packed sequence needs at least one step")
    capacity = int(lengths.max(initial=0)) if capacity is None else int(capacity)
    if len(lengths) and capacity < lengths.max():
        raise DgbenchError(f"a sequence of {int(lengths.max())} steps does not fit rows of {capacity}")
    exclusive = np.zeros(len(lengths), bool) if exclusive is None else np.asarray(exclusive, bool)
    row, offset = np.full(len(lengths), -1, np.int64), np.zeros(len(lengths), np.int64)
    order = np.argsort(-lengths, kind="stable")
    tree = _FirstFit(len(lengths), capacity)
    for s in order[exclusive[order]]:  # exclusive segments open the first rows, longest first
        row[s], offset[s] = tree.open(), 0
    for s in order[~exclusive[order]]:
        row[s], offset[s] = tree.place(int(lengths[s]))
    return Packing(capacity, tree.rows, row, offset, lengths)


class _FirstFit:
    """Rows of fixed capacity; ``place`` puts an item in the lowest-index row with room (a max
    segment tree over the rows' free room, O(log rows) per item)."""

    def __init__(self, max_rows: int, capacity: int):
        self.size = 1
        while self.size < max(max_rows, 1):
            self.size *= 2
        self.capacity = capacity
        self.free = [capacity] * (2 * self.size)  # unopened rows count as empty ones
        self.rows = 0

    def _set(self, leaf: int, value: int) -> None:
        i = leaf + self.size
        self.free[i] = value
        while i > 1:
            i //= 2
            self.free[i] = max(self.free[2 * i], self.free[2 * i + 1])

    def open(self) -> int:
        """A row of its own: nothing else is placed in it."""
        index = self.rows
        self._set(index, 0)
        self.rows += 1
        return index

    def place(self, length: int) -> tuple[int, int]:
        i = 1
        while i < self.size:
            i = 2 * i if self.free[2 * i] >= length else 2 * i + 1
        leaf = i - self.size
        used = self.capacity - self.free[i]
        self._set(leaf, self.free[i] - length)
        self.rows = max(self.rows, leaf + 1)
        return leaf, used
