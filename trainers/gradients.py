"""Gradient synchronisation shared by both families: one flat all-reduce, optionally one step stale.

Every scheme of either family is data parallel in its parameters: after a step's backward pass the
gradients are summed over ranks (the loss is already divided by the *global* sample count), so every
scheme follows ``single``'s optimisation trajectory. With staleness 1 (Sven Eq. 13) the sum of step
t's gradients is started asynchronously and applied at step t+1, overlapping the all-reduce with the
next step's computation: θ_{t+1} = θ_t - lr · allreduce(g_{t-1}).

Extra scalars (e.g. the batch loss) may ride along in the same all-reduce.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dgbench.dist import Comm


class GradientSync:
    """Sums the gradients of ``params`` over the ranks of ``comm`` (counted under ``tag``)."""

    def __init__(self, comm: Comm, params: list[torch.nn.Parameter], tag: str = "gradients", staleness: int = 0):
        if staleness not in (0, 1):
            raise ValueError(f"gradient staleness must be 0 or 1, not {staleness}")
        self.comm, self.params, self.tag, self.staleness = comm, params, tag, staleness
        self._pending: tuple[torch.Tensor, Callable[[], None]] | None = None

    def _flat(self, extras: torch.Tensor | None) -> torch.Tensor:
        parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params]
        return torch.cat(parts + ([extras.reshape(-1)] if extras is not None else []))

    def load(self, flat: torch.Tensor, fresh: bool = False) -> torch.Tensor:
        """Write a summed flat vector into the parameters' gradients; returns the trailing extras.
        ``fresh`` gives each parameter its own gradient tensor instead of copying into the old one."""
        offset = 0
        for p in self.params:
            piece = flat[offset:offset + p.numel()].view_as(p)
            if fresh or p.grad is None:
                p.grad = piece.clone()
            else:
                p.grad.copy_(piece)
            offset += p.numel()
        return flat[offset:]

    def synchronise(self, extras: torch.Tensor | None = None, fresh: bool = False) -> torch.Tensor | None:
        """Sum now (staleness 0) and load the sums; returns the summed extras.

        With staleness 1: start this step's sum, load the previous step's; returns the previous
        extras, or None when there is no previous step (the caller then takes no optimiser step)."""
        if self.staleness == 0:
            if self.comm.world_size == 1 and extras is None:
                return None  # nothing to sum, and the gradients are already in place
            flat = self._flat(extras)
            self.comm.all_reduce(flat, self.tag)
            return self.load(flat, fresh)
        flat = self._flat(extras)
        wait = self.comm.all_reduce_async(flat, self.tag)
        previous = self.finish()
        self._pending = (flat, wait)
        return previous if previous is None else self.load(previous, fresh)

    def finish(self) -> torch.Tensor | None:
        """The pending (stale) sum once its all-reduce completed, or None; clears it."""
        if self._pending is None:
            return None
        flat, wait = self._pending
        wait()
        self._pending = None
        return flat

    @property
    def pending(self) -> bool:
        return self._pending is not None
