"""Moving snapshots to the compute device per checkpoint block: whole (base) or as graph differences.

ESDG §3.2: consecutive snapshots (especially after temporal smoothing) share most edges, so after
the first snapshot of a block only the *indices* that changed need to travel: the positions of the
removed entries in the previous snapshot and the added (row, col) keys, plus all values (Ã's
normalisation changes every value). The device rebuilds the CSR arrays bit-exactly from the
previous snapshot it already holds. Both modes count the bytes they move.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dgbench.models.sparse import CsrArrays

BASE, GRAPH_DIFFERENCE = "base", "gd"


@dataclass
class GraphDifference:
    """Snapshot t relative to t-1: removed entry positions, added keys (row*N+col), all values."""

    removed: np.ndarray  # int32 positions in t-1's entries
    added: np.ndarray  # int64 keys
    val: np.ndarray  # float32, in t's (row, col) order

    @property
    def nbytes(self) -> int:
        return int(self.removed.nbytes + self.added.nbytes + self.val.nbytes)


def entry_keys(a: CsrArrays) -> np.ndarray:
    """row * num_cols + col of every stored entry, ascending (CSR order)."""
    rows = np.repeat(np.arange(a.shape[0], dtype=np.int64), np.diff(a.rowptr))
    return rows * a.shape[1] + a.col


def graph_difference(previous: CsrArrays, current: CsrArrays) -> GraphDifference:
    before, after = entry_keys(previous), entry_keys(current)
    kept = np.isin(before, after, assume_unique=True)
    new = ~np.isin(after, before, assume_unique=True)
    return GraphDifference(np.flatnonzero(~kept).astype(np.int32), after[new], current.val)


def rebuild(previous_keys: torch.Tensor, diff: GraphDifference, shape: tuple[int, int],
            device: torch.device) -> tuple[CsrArrays, torch.Tensor]:
    """On the device: drop the removed entries, merge in the added keys, attach the values."""
    keep = torch.ones(previous_keys.shape[0], dtype=torch.bool, device=device)
    keep[torch.from_numpy(diff.removed).to(device, torch.int64)] = False
    keys, _ = torch.sort(torch.cat([previous_keys[keep], torch.from_numpy(diff.added).to(device)]))
    rows = keys // shape[1]
    rowptr = torch.searchsorted(rows, torch.arange(shape[0] + 1, device=device))
    return CsrArrays(rowptr, keys % shape[1], torch.from_numpy(diff.val).to(device), shape), keys


class SnapshotMover:
    """Moves runs of consecutive snapshots to ``device`` and counts the bytes moved.

    ``bytes_by_mode`` also counts what the other mode would have moved for the same snapshots, so
    every run reports the gd/base ratio; ``bytes_moved`` is the active mode's (measured) count.
    """

    def __init__(self, adjacency: list[CsrArrays], device: torch.device, mode: str = BASE):
        if mode not in (BASE, GRAPH_DIFFERENCE):
            raise ValueError(f"transfer mode must be '{BASE}' or '{GRAPH_DIFFERENCE}', not {mode!r}")
        self.adjacency, self.device, self.mode = adjacency, device, mode
        self._differences: dict[int, GraphDifference] = {}
        self.bytes_by_mode = {BASE: 0, GRAPH_DIFFERENCE: 0}

    @property
    def bytes_moved(self) -> int:
        return self.bytes_by_mode[self.mode]

    def difference(self, t: int) -> GraphDifference:
        if t not in self._differences:
            self._differences[t] = graph_difference(self.adjacency[t - 1], self.adjacency[t])
        return self._differences[t]

    def move(self, steps: range) -> list[CsrArrays]:
        """The snapshots ``steps`` on the device: the first whole, the rest per ``mode``."""
        moved: list[CsrArrays] = []
        keys: torch.Tensor | None = None
        for i, t in enumerate(steps):
            whole = self.adjacency[t].nbytes
            self.bytes_by_mode[BASE] += whole
            self.bytes_by_mode[GRAPH_DIFFERENCE] += whole if i == 0 else self.difference(t).nbytes
            if i == 0 or self.mode == BASE:
                host = self.adjacency[t]
                on_device = host.to_torch(self.device)
                if self.mode == GRAPH_DIFFERENCE:
                    rows = torch.repeat_interleave(torch.arange(host.shape[0], device=self.device),
                                                   on_device.rowptr.diff())
                    keys = rows * host.shape[1] + on_device.col
            else:
                on_device, keys = rebuild(keys, self.difference(t), self.adjacency[t].shape, self.device)
            moved.append(on_device)
        return moved
