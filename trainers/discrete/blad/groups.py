"""BLAD's snapshot-group protocol (Fu et al., SC'23, §3.1, Eq. 1) as a schedule any placement runs.

Under ``--group-length L`` every target step S is an independent sample: its group (the L most recent
snapshots, :meth:`~dgbench.trainers.discrete.data.DiscreteData.group_of`) runs from a fresh state (Eq. 1 leaves
h_{S-l-1} undefined; GUESS: the model's initial state, zeros for an RNN), and only S's pairs are scored.
:class:`GroupSchedule` runs the groups one after another on a scheme's own placement — `single` on one
rank, `snapshot` with each group's steps split over the ranks by time interval (what BLAD §7.1 calls
ESDG), `vertex` with each group's halos — accumulating gradients over the groups (one optimiser step
per epoch, as the whole-sequence protocol; or, with ``--group-batch B``, one step after every B
consecutive targets, the loss of a step its pairs' mean BCE), so every scheme trains exactly the same
work and follows `single`'s trajectory under the same protocol. BLAD's own schedule
(trainers/discrete/blad/runtime.py) is one too.

Evaluation follows the protocol: the validation and test targets are scored from their own groups.
§3.1's vertex mini-batches (``--seed-batch``) run these same schedules on each batch's sampled graph
(trainers/discrete/blad/minibatch.py); targets are not shuffled (step 3: order does not change a gradient
accumulated over a step's groups).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from dgbench.dist import PhaseTimer
from dgbench.trainers.discrete.data import TEST, TRAIN, VAL, PairBatch
from dgbench.trainers.discrete.placement import CommProfile, pair_logits
from dgbench.trainers.discrete.schedule import Schedule

if TYPE_CHECKING:
    from dgbench.trainers.discrete.loop import DiscreteTrainer


def group_loss(trainer: DiscreteTrainer, view: Any, state: Any, pairs: list[PairBatch], total_pairs: int,
               connected: bool) -> torch.Tensor:
    """Forward of one view from ``state``; the summed BCE of ``pairs`` over ``total_pairs`` (every rank's
    pairs of the optimiser step).
    ``connected``: keep the graph attached to every output (collectives in the backward pass)."""
    halves, _ = trainer.model.forward_block(view, state)
    logits = trainer.placement.score(view, halves, pairs, trainer.model.scorer.bias)
    labels = torch.from_numpy(np.concatenate([b.label for b in pairs]) if pairs
                              else np.zeros(0, np.float32)).to(logits.device)
    loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / max(total_pairs, 1)
    return loss + 0.0 * halves.sum() if connected else loss


def step_ranges(targets: int, group_batch: int) -> list[range]:
    """Indices of the targets each optimiser step trains: consecutive runs of ``group_batch`` (0: all)."""
    size = group_batch or max(targets, 1)
    return [range(start, min(start + size, targets)) for start in range(0, targets, size)]


def step_pair_counts(pairs: list[PairBatch], group_batch: int) -> list[int]:
    """Every rank's training pairs per optimiser step (the loss divisor of each step)."""
    return [sum(len(pairs[i].src) for i in step) for step in step_ranges(len(pairs), group_batch)]


def optimiser_step(trainer: DiscreteTrainer) -> None:
    """The loop's end-of-epoch work, run after each group batch: sum the gradients, step, zero them."""
    trainer.gradients.synchronise()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=False)


class GroupSchedule(Schedule):
    """Every training target's group, in step order, on the scheme's placement (see the module)."""

    group_batch = 0  # --group-batch: groups per optimiser step (0: one step per epoch), set by the family

    def steps_optimizer(self) -> bool:
        return self.group_batch > 0

    def optimiser_steps(self, trainer: DiscreteTrainer) -> int:
        """Optimiser steps per epoch."""
        return len(step_ranges(len(self.targets(trainer)), self.group_batch))

    def targets(self, trainer: DiscreteTrainer) -> list[int]:
        return trainer.data.steps_of(TRAIN)

    def assign(self, trainer: DiscreteTrainer, pairs: list[PairBatch]) -> list[list[PairBatch]]:
        """One unit per target, on every rank (views may be collectives): this rank's pairs of S."""
        data = trainer.data
        self.step_pairs = step_pair_counts(pairs, self.group_batch)
        return [[trainer.placement.owned_in(batch, data.group_of(batch.step))] for batch in pairs]

    def forward_backward(self, trainer: DiscreteTrainer, batches: list[list[PairBatch]], total_pairs: int,
                         timer: PhaseTimer) -> float:
        """Each group in step order; with a group batch, a synchronised optimiser step after each batch
        (the loss divided by the batch's pairs; the returned loss is the epoch's mean BCE all the same)."""
        total = 0.0
        connected = trainer.ctx.world_size > 1
        for step, divisor in zip(step_ranges(len(batches), self.group_batch), self.step_pairs):
            divisor = divisor if self.group_batch else total_pairs
            for pairs in (batches[i] for i in step):
                view = trainer.placement.view_of(trainer.data.group_of(pairs[0].step), timer)
                loss = group_loss(trainer, view, trainer.initial_state(), pairs, divisor,
                                  connected or not len(pairs[0].src))
                loss.backward()
                total += loss.item() * divisor / max(total_pairs, 1) if self.group_batch else loss.item()
            if self.group_batch:
                optimiser_step(trainer)
        return total

    def forward_passes(self, blocks: int) -> list[int]:
        return [1] * blocks

    def groups(self, trainer: DiscreteTrainer) -> list[range]:
        return [trainer.data.group_of(step) for step in self.targets(trainer)]

    def units(self, trainer: DiscreteTrainer) -> tuple[list[range], list[int]]:
        groups = self.groups(trainer)
        return groups, [1] * len(groups)

    def predicted_elements(self, trainer: DiscreteTrainer, profile: CommProfile, pairs: list[PairBatch]
                           ) -> dict[str, int] | None:
        groups = self.groups(trainer)
        predicted = trainer.placement.predicted_elements(profile, [1] * len(groups), pairs, blocks=groups)
        if predicted is not None and self.group_batch and trainer.ctx.world_size > 1:
            # one flat all-reduce of every parameter per step (the loop's one per epoch is not predicted)
            parameters = sum(p.numel() for p in trainer.model.parameters())
            predicted["gradients"] = self.optimiser_steps(trainer) * trainer.ctx.world_size * parameters
        return predicted

    @torch.no_grad()
    def evaluate(self, trainer: DiscreteTrainer, which: tuple[str, ...] = (VAL, TEST)
                 ) -> dict[str, dict[str, float]]:
        """Each validation / test target scored from its own group, gathered from every rank."""
        timer = PhaseTimer(trainer.ctx.device)
        out = {}
        for split in which:
            rows = []
            for batch in trainer.data.split_pairs(split):
                steps = trainer.data.group_of(batch.step)
                view = trainer.placement.view_of(steps, timer)
                halves, _ = trainer.model.forward_block(view, trainer.initial_state())
                mine = [trainer.placement.owned_in(batch, steps)]
                table, first = trainer.placement.score_table(view, halves, mine)
                logits = pair_logits(table, first, mine, trainer.model.scorer.bias)
                rows.append(trainer.pair_rows(logits, mine))
            gathered = trainer.ctx.comm.all_gather_uneven(torch.cat(rows), tag="evaluation")
            out.update(trainer.split_metrics(split, gathered))
        return out
