"""The epoch bookkeeping DGC's adaptive stale aggregation needs (§5.2, Eq. 6-7): the epoch number and
the previous epochs' losses, around the default block schedule.

θ_r depends on l_{r-1} and l_1, the losses of the whole job, so after each epoch every rank adds its
loss share to one all-reduce (tag ``stale:loss``, one float) and keeps the sum.
"""
from __future__ import annotations

import torch

from dgbench.dist import PhaseTimer
from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.data import PairBatch
from dgbench.trainers.discrete.schedule import BlockSchedule, ScheduleHost


class StaleSchedule(BlockSchedule):
    """Blocks in order, with the placement's stale caches told when each training epoch starts and ends."""

    def __init__(self) -> None:
        self.epoch = 0
        self.losses: list[float] = []

    def forward_backward(self, trainer: ScheduleHost, batches: list[list[PairBatch]], total_pairs: int,
                         timer: PhaseTimer) -> float:
        stale = getattr(trainer.placement, "stale", None)
        if stale is None:
            raise DgbenchError(f"{type(trainer.placement).__name__} has no stale aggregation to schedule")
        self.epoch += 1
        stale.begin_epoch(self.epoch, self.losses)
        local = super().forward_backward(trainer, batches, total_pairs, timer)
        stale.end_epoch()
        comm = trainer.ctx.comm
        total = torch.tensor([local], dtype=torch.float64, device=trainer.ctx.device)
        if comm.world_size > 1:
            comm.all_reduce(total, tag="stale:loss")
        self.losses.append(float(total.item()))
        return local
