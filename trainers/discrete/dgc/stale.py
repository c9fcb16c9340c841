"""Adaptive stale embedding aggregation (DGC §5.2, Eq. 6-7): send a boundary row only when it moved.

Every boundary exchange (a halo of one layer, keyed by the caller) keeps, on the sending side, the
*last transmitted* copy of each row it sends and, on the receiving side, the last copy received
(the two are equal). In epoch r a row is sent only if the L2 distance between its current value
and the last transmitted copy exceeds θ_r; otherwise the receiver reuses its copy. Comparing with
the previous epoch instead is what §5.2 rejects (small steps accumulate and are never sent).

θ_r = factor_r · D_r, where D_r is the largest such distance of the exchange over all ranks in the
epoch (one all-reduce of one float, tag ``stale:max``):

* ``--stale off``: everything is sent (the baseline; no masks, no all-reduce);
* ``--stale FACTOR`` (a number): static θ = FACTOR · D (Table 2: 0.1D ... 0.9D);
* ``--stale adaptive``: Eq. 6 with norm(l_{r-1}) = (l_1 - l_{r-1}) / l_1 (Eq. 7). As printed,
  factor = 1 / (1 + exp(norm)) falls from 0.5 toward 0.27 as the loss drops — the opposite of the
  text's "small θ early, larger θ as training stabilises". ``formula="intent"`` (the default) uses
  1 / (1 + exp(-norm)), which rises from 0.5 toward 0.73: Table 3's adaptive savings sit between
  its 0.5D and 0.7D columns in all 12 rows, which only the rising factor gives. ``printed`` runs
  Eq. 6 exactly as printed. The record says which ran.

Choices (reading notes §7): epoch 1 has no l_0 and no cache, so everything is sent (that fills
the cache) and l_1 = the epoch-1 loss; distances compare with a strict ``>``; stale rows carry no
gradient; evaluation always exchanges fresh rows and leaves the caches alone; the receiver learns
which rows are fresh from a one-byte-per-row mask (tag ``stale:mask``, counted). §6's KVStore over
``torch.distributed.rpc`` is replaced by these counted all-to-alls (cache on both ends).
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from dgbench.dist import Comm, all_to_all_autograd
from dgbench.errors import DgbenchError

OFF, STATIC, ADAPTIVE = "off", "static", "adaptive"
INTENT, PRINTED = "intent", "printed"
FORMULAS = (INTENT, PRINTED)


@dataclass(frozen=True)
class StalePolicy:
    """What ``--stale`` and ``--stale-formula`` asked for."""

    mode: str = OFF
    factor: float | None = None  # static: θ = factor · D
    formula: str = INTENT

    @classmethod
    def parse(cls, text: str, formula: str = INTENT) -> "StalePolicy":
        """``off`` | ``adaptive`` | a non-negative number (θ = number · D)."""
        if formula not in FORMULAS:
            raise DgbenchError(f"--stale-formula must be one of {', '.join(FORMULAS)}, got {formula!r}")
        word = str(text).strip().lower()
        if word in (OFF, ADAPTIVE):
            return cls(word, None, formula)
        try:
            factor = float(word.removesuffix("d"))
        except ValueError:
            raise DgbenchError(f"--stale takes off, adaptive or a factor of D such as 0.5, got {text!r}") from None
        if not math.isfinite(factor) or factor < 0:
            raise DgbenchError(f"--stale factor must be a finite number >= 0, got {text!r}")
        return cls(STATIC, factor, formula)

    @property
    def enabled(self) -> bool:
        return self.mode != OFF

    def threshold_factor(self, epoch: int, losses: Sequence[float]) -> float | None:
        """θ_r / D_r for training epoch ``epoch`` (1-based) given the earlier epochs' losses;
        None = send every row (off, or epoch 1)."""
        if self.mode == OFF or epoch <= 1:
            return None
        if self.mode == STATIC:
            return self.factor
        first, previous = losses[0], losses[epoch - 2]
        norm = (first - previous) / first if first else 0.0  # Eq. 7
        return 1.0 / (1.0 + math.exp(norm if self.formula == PRINTED else -norm))  # Eq. 6

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "factor": self.factor, "formula": self.formula if self.mode == ADAPTIVE else None}


@dataclass
class _Cache:
    sent: torch.Tensor  # last transmitted copy of each row this rank sends
    sent_valid: torch.Tensor  # rows sent at least once
    received: torch.Tensor  # last received copy of each row arriving here


@dataclass
class StaleCounters:
    """One epoch's rows and bytes: what would have been sent, what was, and the masks' overhead."""

    rows: int = 0
    rows_sent: int = 0
    bytes_total: int = 0
    bytes_sent: int = 0
    mask_bytes: int = 0
    thresholds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        saved = self.bytes_total - self.bytes_sent
        return {"rows": self.rows, "rows_sent": self.rows_sent, "bytes_total": self.bytes_total,
                "bytes_sent": self.bytes_sent, "bytes_saved": saved, "mask_bytes": self.mask_bytes,
                "fraction_saved": saved / self.bytes_total if self.bytes_total else 0.0,
                "thresholds": dict(self.thresholds)}


class StaleExchange:
    """One rank's stale-aggregation state for every boundary exchange of a run.

    Call :meth:`begin_epoch` before each training epoch, :meth:`exchange` in place of
    ``all_to_all_autograd`` for a boundary exchange, and :meth:`end_epoch` after it.
    """

    def __init__(self, policy: StalePolicy, comm: Comm):
        self.policy, self.comm = policy, comm
        self.caches: dict[Hashable, _Cache] = {}
        self.factor: float | None = None
        self.training = False
        self.counters = StaleCounters()
        self.history: list[dict[str, Any]] = []

    def begin_epoch(self, epoch: int, losses: Sequence[float]) -> None:
        self.factor = self.policy.threshold_factor(epoch, losses)
        self.training = True
        self.counters = StaleCounters()

    def end_epoch(self) -> dict[str, Any]:
        self.training = False
        summary = {"epoch_factor": self.factor, **self.counters.as_dict()}
        self.history.append(summary)
        return summary

    def exchange(self, key: Hashable, send: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int],
                 tag: str) -> torch.Tensor:
        """Rows ``send`` [S, F] to the ranks of ``send_splits``; returns the [R, F] rows arriving,
        fresh where they were sent and the cached copy elsewhere."""
        comm = self.comm
        if not self.policy.enabled or not self.training:
            return all_to_all_autograd(send, comm, list(send_splits), list(recv_splits), tag=tag)
        cache = self._cache(key, send, sum(recv_splits))
        distance = self._distances(cache, send.detach())
        fresh = self._fresh(key, distance)
        arriving = comm.all_to_all_single(fresh.to(torch.uint8).view(-1, 1), send_splits, recv_splits,
                                          tag="stale:mask").view(-1).bool()
        fresh_send = [int(part.sum()) for part in torch.split(fresh, list(send_splits))]
        fresh_recv = [int(part.sum()) for part in torch.split(arriving, list(recv_splits))]
        values = all_to_all_autograd(send[fresh], comm, fresh_send, fresh_recv, tag=tag)
        cache.sent[fresh] = send.detach()[fresh]
        cache.sent_valid |= fresh
        where = torch.nonzero(arriving).view(-1)
        out = torch.index_put(cache.received, (where,), values)  # stale rows: the copy, no gradient
        cache.received = out.detach().clone()
        self._count(send, fresh, send_splits)
        return out

    def _cache(self, key: Hashable, send: torch.Tensor, arriving: int) -> _Cache:
        cache = self.caches.get(key)
        if cache is None or cache.sent.shape != send.shape or cache.received.shape[0] != arriving:
            if cache is not None:
                raise DgbenchError(f"stale aggregation: exchange {key!r} changed shape between epochs")
            cache = _Cache(send.new_zeros(send.shape), torch.zeros(send.shape[0], dtype=torch.bool, device=send.device),
                           send.new_zeros((arriving, *send.shape[1:])))
            self.caches[key] = cache
        return cache

    @staticmethod
    def _distances(cache: _Cache, current: torch.Tensor) -> torch.Tensor:
        """L2 distance of every row to its last transmitted copy; +inf for rows never sent."""
        difference = (current - cache.sent).reshape(current.shape[0], max(1, current[0].numel()) if len(current) else 0)
        distance = torch.linalg.vector_norm(difference, dim=1)
        return torch.where(cache.sent_valid, distance, torch.full_like(distance, math.inf))

    def _fresh(self, key: Hashable, distance: torch.Tensor) -> torch.Tensor:
        """Rows to send: distance > θ = factor · D (D all-reduced, max over ranks); all in epoch 1."""
        if self.factor is None:
            return torch.ones_like(distance, dtype=torch.bool)
        finite = distance[torch.isfinite(distance)]
        local = finite.max() if finite.numel() else distance.new_zeros(())
        largest = self.comm.all_reduce(local.reshape(1).to(torch.float64), tag="stale:max",
                                       op=dist.ReduceOp.MAX if self.comm.world_size > 1 else None)
        threshold = self.factor * float(largest.item())
        self.counters.thresholds[str(key)] = threshold
        return distance > threshold

    def _count(self, send: torch.Tensor, fresh: torch.Tensor, send_splits: Sequence[int]) -> None:
        """Only rows for other ranks count (as the collectives count them)."""
        rank = self.comm.rank
        start = sum(send_splits[:rank])
        remote = torch.ones(send.shape[0], dtype=torch.bool, device=send.device)
        remote[start:start + send_splits[rank]] = False
        row_bytes = send[0].numel() * send.element_size() if send.shape[0] else 0
        rows, sent = int(remote.sum()), int((fresh & remote).sum())
        c = self.counters
        c.rows += rows
        c.rows_sent += sent
        c.bytes_total += rows * row_bytes
        c.bytes_sent += sent * row_bytes
        c.mask_bytes += rows if self.comm.world_size > 1 else 0
