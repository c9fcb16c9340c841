"""The order and overlap of a discrete-time epoch's per-block work: the schedule hook of the contract.

The loop (:class:`dgbench.trainers.discrete.loop.DiscreteTrainer`) asks its scheme's schedule to run the
epoch's forward and backward passes; it then synchronises gradients and steps, whatever the schedule
did. :class:`BlockSchedule` is the default: the placement's blocks in order — one autograd graph when
there is one block, ESDG §3.1's gradient checkpointing when there are several. A scheme whose work is
ordered differently (BLAD's snapshot groups on two processes per device with reordered operators)
supplies its own :class:`Schedule`. A schedule sees the rank's trainer only through
:class:`ScheduleHost`: the few members schedules use, not the whole trainer.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from dgbench.trainers.discrete.data import TEST, VAL, PairBatch

from dgbench.dist import PhaseTimer
from dgbench.memory import return_freed_memory
from dgbench.models.contract import State

if TYPE_CHECKING:
    from dgbench.trainers.discrete.data import DiscreteData
    from dgbench.trainers.discrete.placement import CommProfile, Placement

    from dgbench.dist import DistContext
    from dgbench.models.discrete import DynamicGNN


@runtime_checkable
class ScheduleHost(Protocol):
    """What a schedule may use of the rank it runs on (:class:`dgbench.trainers.discrete.loop.DiscreteTrainer` is
    one): the rank's context, data, placement and model, the initial state, one block's loss, and the
    evaluation's per-pair rows and metrics (for schedules that evaluate their own way)."""

    ctx: DistContext
    data: DiscreteData
    placement: Placement
    model: DynamicGNN

    def initial_state(self) -> list[State]:
        """The state every block sequence starts from (it may hold parameters)."""

    def block_loss(self, block: int, state: list[State], batches: list[PairBatch], total_pairs: int,
                   timer: PhaseTimer, score: bool = True) -> tuple[torch.Tensor, list[State]]:
        """Block ``block``'s forward pass from ``state``: its loss share of ``batches`` and the state after."""

    def pair_rows(self, logits: torch.Tensor, batches: list[PairBatch]) -> torch.Tensor:
        """The evaluation rows of ``batches`` scored with ``logits``."""

    def split_metrics(self, split: str, gathered: torch.Tensor) -> dict[str, dict[str, float]]:
        """The metrics of ``split`` from every rank's gathered rows."""


def _flatten(state: list[State]) -> list[torch.Tensor]:
    return [t for layer in state for t in layer]


def _unflatten(flat: list[torch.Tensor], like: list[State]) -> list[State]:
    out, i = [], 0
    for layer in like:
        out.append(tuple(flat[i:i + len(layer)]))
        i += len(layer)
    return out


class Schedule(ABC):
    """Runs one epoch's forward and backward passes of one rank."""

    @abstractmethod
    def forward_backward(self, trainer: ScheduleHost, batches: list[list[PairBatch]], total_pairs: int,
                         timer: PhaseTimer) -> float:
        """Accumulate this rank's gradients for the epoch; ``batches[b]`` are this rank's pairs of
        block b, ``total_pairs`` those of every rank (the loss divisor). Returns this rank's loss."""

    @abstractmethod
    def forward_passes(self, blocks: int) -> list[int]:
        """How many times each block's forward pass runs per epoch (the backward runs once), for the
        schemes' volume predictions."""

    def steps_optimizer(self) -> bool:
        """True: :meth:`forward_backward` synchronises gradients and steps the optimiser itself (several
        steps per epoch); False: the loop does it once after it."""
        return False

    def units(self, trainer: ScheduleHost) -> tuple[list[range], list[int]]:
        """The ranges of steps this schedule runs as units of work, and how many forward passes each gets."""
        blocks = trainer.placement.blocks
        return blocks, self.forward_passes(len(blocks))

    def assign(self, trainer: ScheduleHost, pairs: list[PairBatch]) -> list[list[PairBatch]]:
        """This rank's share of the epoch's training pairs, one list per unit of work the schedule
        runs (default: per block of the placement)."""
        return [[trainer.placement.owned(b) for b in pairs if b.step in block] for block in trainer.placement.blocks]

    def evaluate(self, trainer: ScheduleHost, which: tuple[str, ...] = (VAL, TEST)
                 ) -> dict[str, dict[str, float]] | None:
        """Metrics of the splits ``which`` (validation and/or test) when the schedule evaluates differently
        from the loop's pass over the whole sequence (the group protocol); None: the loop's."""
        return None

    def predicted_elements(self, trainer: ScheduleHost, profile: CommProfile, pairs: list[PairBatch]
                           ) -> dict[str, int] | None:
        """Elements all ranks send in one training epoch, per tag (default: the placement's model for
        this schedule's forward passes); None: no model."""
        return trainer.placement.predicted_elements(profile, self.forward_passes(len(trainer.placement.blocks)), pairs)


class BlockSchedule(Schedule):
    """Blocks in order: one graph for one block; with several, gradient checkpointing (ESDG §3.1).

    ``state_every`` K > 1 keeps the hand-over state π_b of every K-th block only (two-level checkpointing,
    Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", §4: not in ESDG): the reverse sweep
    recomputes the other states of a segment of K blocks from its first one, without autograd, just before it
    back-propagates that segment. A rank then holds ⌈nb/K⌉ + K - 1 states instead of nb (each a [rows, width]
    carry per layer: 96 B per vertex row of cdgcn, ≈ 7 GiB per rank of a Flickr-sized store at P = 4 and
    nb = 133), for one more forward pass of most blocks; the states, losses and gradients are those of K = 1 bit
    for bit (the same forward arithmetic recomputed). docs/discrete-schemes.md, "Per-rank data".

    After each block (both sweeps) the heap's free pages go back to the system (:func:`return_freed_memory`): a
    block's activations are freed by then, and glibc would otherwise keep them resident into the next block.
    """

    def __init__(self, state_every: int = 1):
        if state_every < 1:
            raise ValueError(f"state_every {state_every}: must be >= 1")
        self.state_every = state_every

    def forward_backward(self, trainer: ScheduleHost, batches: list[list[PairBatch]], total_pairs: int,
                         timer: PhaseTimer) -> float:
        if len(trainer.placement.blocks) == 1:
            loss, _ = trainer.block_loss(0, trainer.initial_state(), batches[0], total_pairs, timer)
            loss.backward()
            return loss.item()
        return self._checkpointed_backward(trainer, batches, total_pairs, timer)

    def forward_passes(self, blocks: int) -> list[int]:
        """Checkpointing runs every block but the last twice: once to keep π_b, once to recompute; with
        ``state_every`` K > 1, a block that is not the last of its segment once more (its segment's states are
        recomputed), and the first sweep stops where the last segment starts."""
        if blocks == 1:
            return [1]
        every, last_start = self.state_every, (blocks - 1) // self.state_every * self.state_every
        return [1 + (b < min(b // every * every + every, blocks) - 1) + (b < last_start) for b in range(blocks)]

    def _checkpointed_backward(self, trainer: ScheduleHost, batches: list[list[PairBatch]], total_pairs: int,
                               timer: PhaseTimer) -> float:
        """ESDG §3.1: keep π_b only (of every K-th block), recompute block b in reverse order, chain the
        gradient of π."""
        blocks, every = len(trainer.placement.blocks), self.state_every
        kept = {0: trainer.initial_state()}  # π of each segment's first block
        state = kept[0]
        with torch.no_grad():
            for b in range((blocks - 1) // every * every):  # up to the last segment's first block
                _, nxt = trainer.block_loss(b, state, [], total_pairs, timer, score=False)
                state = _detached(nxt)
                return_freed_memory()
                if (b + 1) % every == 0:
                    kept[b + 1] = state
        del state
        grad_next: list[torch.Tensor | None] | None = None
        total = 0.0
        for start in reversed(range(0, blocks, every)):
            stop = min(start + every, blocks)
            states = {start: kept.pop(start)}
            with torch.no_grad():  # the segment's other states, from its first (nothing to do when K = 1)
                for b in range(start, stop - 1):
                    _, nxt = trainer.block_loss(b, states[b], [], total_pairs, timer, score=False)
                    states[b + 1] = _detached(nxt)
                    return_freed_memory()
            for b in reversed(range(start, stop)):
                grad_next, loss = self._block_backward(trainer, b, states.pop(b), batches[b], total_pairs,
                                                       timer, grad_next)
                total += loss
                return_freed_memory()
        return total

    @staticmethod
    def _block_backward(trainer: ScheduleHost, b: int, state: list[State], batches: list[PairBatch],
                        total_pairs: int, timer: PhaseTimer, grad_next: list[torch.Tensor | None] | None
                        ) -> tuple[list[torch.Tensor | None], float]:
        """Block b recomputed from π_b with autograd, its loss and the gradient arriving at π_{b+1}
        back-propagated together; returns the gradient at π_b and the block's loss."""
        if b == 0:
            start = trainer.initial_state()  # may hold parameters (EvolveGCN's initial weight)
            leaves = []
        else:
            leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in _flatten(state)]
            start = _unflatten(leaves, state)
        del state  # π_b is consumed
        loss, end = trainer.block_loss(b, start, batches, total_pairs, timer)
        outputs, grads = [loss], [torch.ones_like(loss)]
        if grad_next is not None:
            for tensor, grad in zip(_flatten(end), grad_next):
                if grad is not None and tensor.requires_grad:
                    outputs.append(tensor)
                    grads.append(grad)
        torch.autograd.backward(outputs, grads)
        return [leaf.grad for leaf in leaves], loss.item()


def _detached(state: list[State]) -> list[State]:
    return [tuple(t.detach() for t in layer) for layer in state]
