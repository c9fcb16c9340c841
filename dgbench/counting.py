"""Counting what a rank would send, without ranks: the dry run's world and its per-tag counter.

The objects that communicate (node states, placements, schedules) count their own collectives into a
:class:`TagCounter` beside the real ones, and code that only moves planned rows runs unchanged on
:class:`CountingComm`. The projection tool (trainers/projection/) drives them; see docs/projection.md.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dgbench.dist import DRY_RUN_BACKEND, Comm, DistContext
from dgbench.errors import DgbenchError

INT_BYTES = 8  # ids and row counts travel as int64
ALL_TO_ALL, ALL_REDUCE, ALL_GATHER, POINT_TO_POINT = "all_to_all", "all_reduce", "all_gather", "p2p"
PLAN, UNIFORM, COLLECTIVE = "plan", "uniform (assumed)", "collective"
CONTROL_TAGS = ("counts",)  # row counts: no volume in dgbench.dist.Comm.totals, counted here all the same


class DryRunUnsupported(DgbenchError):
    """A code path asked the counting world for something only real ranks can answer."""


@dataclass
class CountingComm(Comm):
    """A :class:`~dgbench.dist.Comm` that counts what this rank would send and sends nothing.

    Collectives return zeros of the shape the real one would (received rows from the splits given),
    so code that only moves planned rows runs unchanged. What needs the other ranks' answers (the row
    counts of :meth:`exchange_counts`, an uneven gather) is refused: the dry run plans those from every
    rank's lists instead. ``peers[tag][q]`` counts elements sent to rank q."""

    peers: dict[str, np.ndarray] = field(default_factory=dict)

    def _add(self, tag: str, per_peer: np.ndarray, element_size: int, calls: int = 1) -> None:
        per_peer = np.asarray(per_peer, np.int64).copy()
        per_peer[self.rank] = 0
        if tag not in self.peers:
            self.peers[tag] = np.zeros(self.world_size, np.int64)
        self.peers[tag] += per_peer
        stats = self.stats[tag]
        stats.calls += calls
        stats.elements += int(per_peer.sum())
        stats.bytes += int(per_peer.sum()) * element_size

    def all_to_all_single(self, tensor: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int],
                          tag: str = "all_to_all") -> torch.Tensor:
        row = math.prod(tensor.shape[1:])
        self._add(tag, np.asarray([int(s) for s in send_splits], np.int64) * row, tensor.element_size())
        return tensor.new_zeros((sum(int(r) for r in recv_splits), *tensor.shape[1:]))

    def all_to_all_single_async(self, tensor: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int],
                                tag: str = "all_to_all") -> tuple[torch.Tensor, Callable[[], None]]:
        return self.all_to_all_single(tensor, send_splits, recv_splits, tag), lambda: None

    def all_reduce(self, tensor: torch.Tensor, tag: str = "all_reduce", op=None) -> torch.Tensor:
        stats = self.stats[tag]
        stats.calls += 1
        stats.elements += tensor.numel()
        stats.bytes += tensor.numel() * tensor.element_size()
        return tensor

    def all_reduce_async(self, tensor: torch.Tensor, tag: str = "all_reduce") -> Callable[[], None]:
        self.all_reduce(tensor, tag)
        return lambda: None

    def send_async(self, tensor: torch.Tensor, peer: int, tag: str = "send") -> Callable[[], None]:
        per_peer = np.zeros(self.world_size, np.int64)
        per_peer[peer] = tensor.numel()
        self._add(tag, per_peer, tensor.element_size())
        return lambda: None

    def recv(self, out: torch.Tensor, peer: int, tag: str = "send") -> torch.Tensor:
        return out.zero_()

    def exchange_counts(self, send_counts: Sequence[int], tag: str = "counts") -> list[int]:
        raise DryRunUnsupported(f"dry run: rank {self.rank} asked the other ranks for their row counts ({tag}); "
                                f"only their plans can answer that")

    def all_gather_uneven(self, tensor: torch.Tensor, tag: str = "all_gather") -> torch.Tensor:
        raise DryRunUnsupported(f"dry run: an uneven all-gather ({tag}) needs the other ranks' rows")

    def barrier(self) -> None:
        return None

    def axis(self, rank: int, size: int) -> "CountingComm":
        """A sub-group's counting comm (dgbench.dist.make_mesh in a dry run), counting into the same stats."""
        return CountingComm(rank, size, self.device, self.stats)


def dry_context(rank: int, world_size: int) -> DistContext:
    """Rank ``rank`` of a counting world of ``world_size`` ranks, computing on the CPU."""
    device = torch.device("cpu")
    return DistContext(rank, world_size, DRY_RUN_BACKEND, device, CountingComm(rank, world_size, device))


@dataclass
class TagVolume:
    """Everything one collective tag moves in an epoch.

    ``pairs[s, q]``: elements rank s sends rank q over the epoch (all-to-all, all-gather, p2p; zero
    for an all-reduce). ``sent[u, s]`` / ``received[u, q]``: elements per rank in unit u of the epoch
    (the whole epoch for the discrete family, one batch for the continuous one), ``calls``: collective
    calls per unit (every rank takes part in each). For an all-reduce, ``sent`` is each rank's payload
    (what :class:`~dgbench.dist.Comm` counts)."""

    tag: str
    kind: str
    element_bytes: int
    pairs: np.ndarray
    sent: np.ndarray
    received: np.ndarray
    calls: np.ndarray
    pattern: str = PLAN

    @property
    def elements(self) -> int:
        return int(self.sent.sum())

    @property
    def bytes(self) -> int:
        return self.elements * self.element_bytes

    def summary(self) -> dict[str, Any]:
        sent = self.sent.sum(0) * self.element_bytes
        received = self.received.sum(0) * self.element_bytes
        nonzero = self.pairs[self.pairs > 0]
        return {"kind": self.kind, "element_bytes": self.element_bytes, "elements": self.elements,
                "bytes": self.bytes, "calls": int(self.calls.sum()), "pattern": self.pattern,
                "per_rank_sent_bytes": sent.tolist(), "per_rank_received_bytes": received.tolist(),
                "max_rank_sent_bytes": int(sent.max(initial=0)), "pairs_nonzero": int(nonzero.size),
                "max_pair_bytes": int(nonzero.max(initial=0)) * self.element_bytes}


class TagCounter:
    """Accumulates tags unit by unit: ``add(tag, unit, sender_vector_or_matrix)``."""

    def __init__(self, world_size: int, units: int):
        self.world, self.units = world_size, units
        self.tags: dict[str, TagVolume] = {}

    def _volume(self, tag: str, kind: str, element_bytes: int, pattern: str = PLAN) -> TagVolume:
        if tag not in self.tags:
            p, u = self.world, self.units
            self.tags[tag] = TagVolume(tag, kind, element_bytes, np.zeros((p, p), np.int64),
                                       np.zeros((u, p), np.int64), np.zeros((u, p), np.int64),
                                       np.zeros(u, np.int64), pattern)
        volume = self.tags[tag]
        if (volume.kind, volume.element_bytes) != (kind, element_bytes):
            raise DgbenchError(f"dry run: tag '{tag}' counted as {kind}/{element_bytes} B and "
                               f"{volume.kind}/{volume.element_bytes} B")
        return volume

    def move(self, tag: str, kind: str, element_bytes: int, unit: int, sender: int | None, receiver: int | None,
             elements: np.ndarray, calls: int = 0) -> None:
        """``elements[q]``: from ``sender`` to each q (receiver None), or from each q to ``receiver``."""
        volume = self._volume(tag, kind, element_bytes)
        elements = np.asarray(elements, np.int64).copy()
        if sender is not None:
            elements[sender] = 0
            volume.pairs[sender] += elements
            volume.sent[unit, sender] += elements.sum()
            volume.received[unit] += elements
        else:
            assert receiver is not None
            elements[receiver] = 0
            volume.pairs[:, receiver] += elements
            volume.sent[unit] += elements
            volume.received[unit, receiver] += elements.sum()
        volume.calls[unit] = max(volume.calls[unit], calls)

    def reduce(self, tag: str, element_bytes: int, unit: int, rank: int, elements: int, calls: int = 1) -> None:
        volume = self._volume(tag, ALL_REDUCE, element_bytes, COLLECTIVE)
        volume.sent[unit, rank] += elements
        volume.received[unit, rank] += elements
        volume.calls[unit] = max(volume.calls[unit], calls)

    def matrix(self, tag: str, kind: str, element_bytes: int, pairs: np.ndarray, calls: int, pattern: str) -> None:
        """A whole epoch's (sender, receiver) matrix at once (the discrete family's one unit)."""
        volume = self._volume(tag, kind, element_bytes, pattern)
        pairs = np.asarray(pairs, np.int64).copy()
        np.fill_diagonal(pairs, 0)
        volume.pairs += pairs
        volume.sent[0] += pairs.sum(1)
        volume.received[0] += pairs.sum(0)
        volume.calls[0] = max(volume.calls[0], calls)
