"""Moving snapshots to the compute device per checkpoint block: whole (base) or as graph differences (GD).

ESDG §3.2: the first snapshot of a block travels in the standard sparse representation of
(index, value) pairs; after it, consecutive snapshots (especially after temporal smoothing) share most
edges, so only the indices of A_i^ext (edges leaving) and A_{i+1}^ext (edges arriving) travel, plus all
values of the new snapshot (Ã's normalisation changes every value). The device rebuilds the snapshot
bit-exactly from the previous one it holds. Both methods read from pinned host memory when CUDA is
present (§3.1, §6.2).

Two encodings of the indices, both always counted so a record shows the GD/base ratio under each:

* ``coo`` (the paper's, the one moved): an index is a (row, col) pair of int64 (PyTorch's COO layout),
  a value a float32: base 20 B per non-zero; GD 16 B per changed edge + 4 B per value;
* ``csr`` (our compact one): base = int64 row pointers + int32 columns + float32 values (~8 B per
  non-zero); GD = int32 positions of the removed entries in the previous snapshot + int64 keys
  (row·N + col) of the added ones + all values.

``bytes_by_mode`` keys: ``base`` / ``gd`` (the paper's COO encoding; the active mode measured, the other
counted for the same snapshots) and ``base_csr`` / ``gd_csr`` (the compact encoding, counted).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dgbench.models.sparse import CsrArrays

BASE, GRAPH_DIFFERENCE = "base", "gd"
COO, CSR = "coo", "csr"
COO_INDEX_BYTES = 16  # (row, col) as two int64
VALUE_BYTES = 4


@dataclass
class GraphDifference:
    """Snapshot t relative to t-1: removed entry positions, added keys (row*N+col), all values."""

    removed: np.ndarray  # int32 positions in t-1's entries
    added: np.ndarray  # int64 keys
    val: np.ndarray  # float32, in t's (row, col) order

    @property
    def nbytes(self) -> int:
        """Bytes in the compact (CSR-keyed) encoding."""
        return int(self.removed.nbytes + self.added.nbytes + self.val.nbytes)

    @property
    def coo_nbytes(self) -> int:
        """Bytes in the paper's (index, value) encoding: (row, col) int64 pairs of A_i^ext and A_{i+1}^ext."""
        return int((len(self.removed) + len(self.added)) * COO_INDEX_BYTES + self.val.nbytes)


def coo_nbytes(a: CsrArrays) -> int:
    """Bytes of a snapshot as (index, value) pairs: int64 row and col plus a float32 value per non-zero."""
    return int(len(a.col) * (COO_INDEX_BYTES + VALUE_BYTES))


def entry_keys(a: CsrArrays) -> np.ndarray:
    """row * num_cols + col of every stored entry, ascending (CSR order)."""
    rows = np.repeat(np.arange(a.shape[0], dtype=np.int64), np.diff(a.rowptr))
    return rows * a.shape[1] + a.col


def graph_difference(previous: CsrArrays, current: CsrArrays) -> GraphDifference:
    before, after = entry_keys(previous), entry_keys(current)
    kept = np.isin(before, after, assume_unique=True)
    new = ~np.isin(after, before, assume_unique=True)
    return GraphDifference(np.flatnonzero(~kept).astype(np.int32), after[new], current.val)


def _host(array: np.ndarray, pinned: bool) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.pin_memory() if pinned else tensor


def _csr_from_keys(keys: torch.Tensor, val: torch.Tensor, shape: tuple[int, int], device: torch.device) -> CsrArrays:
    rows = keys // shape[1]
    rowptr = torch.searchsorted(rows, torch.arange(shape[0] + 1, device=device))
    return CsrArrays(rowptr, keys % shape[1], val, shape)


def rebuild(previous_keys: torch.Tensor, diff: GraphDifference, shape: tuple[int, int],
            device: torch.device) -> tuple[CsrArrays, torch.Tensor]:
    """On the device: drop the removed entries, merge in the added keys, attach the values."""
    keep = torch.ones(previous_keys.shape[0], dtype=torch.bool, device=device)
    keep[torch.from_numpy(diff.removed).to(device, torch.int64)] = False
    keys, _ = torch.sort(torch.cat([previous_keys[keep], torch.from_numpy(diff.added).to(device)]))
    return _csr_from_keys(keys, torch.from_numpy(diff.val).to(device), shape, device), keys


class SnapshotMover:
    """Moves runs of consecutive snapshots to ``device`` in the paper's (index, value) encoding, from
    pinned host memory when the device is a GPU, and counts the bytes of both modes in both encodings."""

    def __init__(self, adjacency: list[CsrArrays], device: torch.device, mode: str = BASE):
        if mode not in (BASE, GRAPH_DIFFERENCE):
            raise ValueError(f"transfer mode must be '{BASE}' or '{GRAPH_DIFFERENCE}', not {mode!r}")
        self.adjacency, self.device, self.mode = adjacency, device, mode
        self.pinned = device.type == "cuda"
        self._differences: dict[int, GraphDifference] = {}
        self._host: dict[tuple[str, int], tuple[torch.Tensor, ...]] = {}  # pinned payloads, built once
        self._counted: dict[tuple[int, int], dict[str, int]] = {}  # bytes_of per run of steps, once forgotten
        self.bytes_by_mode = {BASE: 0, GRAPH_DIFFERENCE: 0, f"{BASE}_{CSR}": 0, f"{GRAPH_DIFFERENCE}_{CSR}": 0}

    def release_host_copies(self) -> None:
        """Drop the host payloads kept for later moves (a placement that keeps its snapshots resident moves
        each once)."""
        self._host.clear()

    def forget(self, steps: range) -> None:
        """Keep only the byte counts of moving ``steps`` (a CPU device's views keep the moved snapshots for the
        run): drop the host payloads and graph differences, so later counts need no snapshot of the data."""
        self._counted[(steps.start, steps.stop)] = self.bytes_of(steps)
        self._host.clear()
        for t in steps:
            self._differences.pop(t, None)

    @property
    def bytes_moved(self) -> int:
        return self.bytes_by_mode[self.mode]

    def difference(self, t: int) -> GraphDifference:
        if t not in self._differences:
            self._differences[t] = graph_difference(self.adjacency[t - 1], self.adjacency[t])
        return self._differences[t]

    def bytes_of(self, steps: range) -> dict[str, int]:
        """What moving ``steps`` (the first whole) costs in each mode and encoding, without moving them."""
        if (steps.start, steps.stop) in self._counted:
            return dict(self._counted[(steps.start, steps.stop)])
        out = dict.fromkeys(self.bytes_by_mode, 0)
        for i, t in enumerate(steps):
            a = self.adjacency[t]
            out[BASE] += coo_nbytes(a)
            out[f"{BASE}_{CSR}"] += a.nbytes
            out[GRAPH_DIFFERENCE] += coo_nbytes(a) if i == 0 else self.difference(t).coo_nbytes
            out[f"{GRAPH_DIFFERENCE}_{CSR}"] += a.nbytes if i == 0 else self.difference(t).nbytes
        return out

    def _whole(self, t: int) -> tuple[CsrArrays, torch.Tensor]:
        """Snapshot t moved as (row, col, value) triples and turned into CSR on the device; its keys."""
        if ("whole", t) not in self._host:
            keys = entry_keys(self.adjacency[t])
            n = self.adjacency[t].shape[1]
            self._host[("whole", t)] = (_host(keys // n, self.pinned), _host(keys % n, self.pinned),
                                        _host(self.adjacency[t].val, self.pinned))
        rows, cols, val = (x.to(self.device, non_blocking=self.pinned) for x in self._host[("whole", t)])
        shape = self.adjacency[t].shape
        keys = rows * shape[1] + cols
        return _csr_from_keys(keys, val, shape, self.device), keys

    def _difference(self, previous_keys: torch.Tensor, t: int) -> tuple[CsrArrays, torch.Tensor]:
        """Snapshot t from t-1's keys on the device: (row, col) of the edges leaving and arriving, all values."""
        diff, shape = self.difference(t), self.adjacency[t].shape
        if ("diff", t) not in self._host:
            removed = entry_keys(self.adjacency[t - 1])[diff.removed]
            self._host[("diff", t)] = tuple(_host(x, self.pinned) for x in (
                removed // shape[1], removed % shape[1], diff.added // shape[1], diff.added % shape[1], diff.val))
        gone_row, gone_col, new_row, new_col, val = (x.to(self.device, non_blocking=self.pinned)
                                                     for x in self._host[("diff", t)])
        keep = ~torch.isin(previous_keys, gone_row * shape[1] + gone_col)
        keys, _ = torch.sort(torch.cat([previous_keys[keep], new_row * shape[1] + new_col]))
        return _csr_from_keys(keys, val, shape, self.device), keys

    def count(self, steps: range) -> None:
        """Count a move of ``steps`` in every mode and encoding (what :meth:`move` counts)."""
        for mode, moved in self.bytes_of(steps).items():
            self.bytes_by_mode[mode] += moved

    def move(self, steps: range) -> list[CsrArrays]:
        """The snapshots ``steps`` on the device: the first whole, the rest per ``mode``."""
        self.count(steps)
        out: list[CsrArrays] = []
        keys: torch.Tensor | None = None
        for i, t in enumerate(steps):
            if i == 0 or self.mode == BASE:
                on_device, keys = self._whole(t)
            else:
                assert keys is not None
                on_device, keys = self._difference(keys, t)
            out.append(on_device)
        return out


def paper_block_transfers(blocks: int) -> int:
    """ESDG §3.1 counts every block's inputs as moved twice per epoch (forward, and the backward's rerun):
    2 nb. The loop here fuses the last block's forward with its rerun, so it moves 2 nb - 1 (nb > 1)."""
    return 2 * blocks
