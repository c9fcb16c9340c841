"""What one batch moves, counted the same way for every continuous scheme: Eq. 1's redundancy ratios (Sven
TPDS §2.3), a rank's batch traffic and the N&M volume a scheme predicts from it (its per-rank Eq. 7-9 form,
trainers/continuous/sven/formulas.py). See docs/continuous-training.md.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def redundancy(ids: np.ndarray) -> float:
    """Eq. 1: N^r / N, the share of positions whose vertex already occurred in the list (0 if empty)."""
    ids = np.asarray(ids).ravel()
    return 0.0 if len(ids) == 0 else 1.0 - len(np.unique(ids)) / len(ids)


def remote_redundancy(ids: np.ndarray, owner: np.ndarray, rank: int) -> float:
    """Per-rank, remote-only variant of Eq. 1: share of ``rank``'s remote positions that repeat an id."""
    ids = np.asarray(ids).ravel()
    remote = ids[np.asarray(owner)[ids] != rank]
    return 0.0 if len(remote) == 0 else 1.0 - len(np.unique(remote)) / len(remote)


@dataclass(frozen=True)
class CommVolume:
    """Bytes of one batch (or summed over batches): dispatch (fetching N&M) and aggregation (writing back)."""

    dispatch_bytes: float
    aggregation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.dispatch_bytes + self.aggregation_bytes

    def __add__(self, other: "CommVolume") -> "CommVolume":
        return CommVolume(self.dispatch_bytes + other.dispatch_bytes, self.aggregation_bytes + other.aggregation_bytes)


@dataclass(frozen=True)
class BatchTraffic:
    """One rank's share of one batch, counted from its ids: what the per-rank forms of Eq. 7-9 read.

    Widths are in values: ``row_width`` the whole N&M row (what Sven dispatches), ``view_width`` the
    updated memory an owner returns (DepComm's dispatch), ``update_width`` one aggregation row
    (memory, message, their times and the write priority)."""

    dispatch_positions: int  # remote positions of the dispatch list
    dispatch_unique: int  # distinct vertices among them
    aggregation_unique: int  # distinct remote vertices written back (after last-wins)
    updates_unique: int  # distinct vertices written back, local or remote
    world_size: int
    row_width: int
    view_width: int
    update_width: int
    bytes_per_value: int
