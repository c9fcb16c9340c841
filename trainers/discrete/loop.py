"""The one training loop of the discrete-time schemes: blocks, checkpointing, loss, gradients.

Every scheme runs this loop; a placement only decides where snapshots live and what moves. With
one block the forward pass is one autograd graph. With nb > 1 blocks it is ESDG §3.1's gradient
checkpointing: a forward sweep without autograd keeps only the hand-over state π_b per block, then
a reverse sweep recomputes each block from π_b with autograd and back-propagates the block's loss
together with the gradient arriving at π_{b+1}.

The loss is the mean binary cross-entropy over all training pairs of all ranks: each rank sums its
share and divides by the global pair count, and gradients are summed across ranks, so every scheme
follows exactly the same optimisation trajectory as ``single`` (ESDG §6.4, Fig. 6).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from dgbench.dist import DistContext, PhaseTimer
from dgbench.metrics import link_prediction_metrics
from dgbench.models.discrete import DynamicGNN, State
from dgbench.tasks.evaluator import score_pairs
from dgbench.tasks.node import NodeClassification
from dgbench.trainers.discrete.data import TEST, TRAIN, VAL, DiscreteData, PairBatch
from dgbench.trainers.discrete.placement import Placement, pair_logits
from dgbench.trainers.discrete.schedule import BlockSchedule, Schedule
from dgbench.trainers.gradients import GradientSync

if TYPE_CHECKING:
    from dgbench.trainers.discrete.blad.minibatch import MiniBatching


class SavedActivationMeter:
    """Peak bytes of tensors autograd keeps for the backward pass (what checkpointing reduces).

    Works on every device, unlike process RSS which never goes down within a process.
    """

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0

    @contextmanager
    def watching(self) -> Iterator[None]:
        meter = self

        class Held:
            def __init__(self, tensor: torch.Tensor):
                self.tensor, self.size = tensor, tensor.numel() * tensor.element_size()
                meter.current += self.size
                meter.peak = max(meter.peak, meter.current)

            def __del__(self) -> None:
                meter.current -= self.size

        with torch.autograd.graph.saved_tensors_hooks(Held, lambda held: held.tensor):
            yield


class DiscreteTrainer:
    """Drives one rank: ``train_epoch`` and ``evaluate`` for :func:`dgbench.trainers.epochs.run_epochs`."""

    def __init__(self, ctx: DistContext, data: DiscreteData, placement: Placement, model: DynamicGNN, lr: float,
                 schedule: Schedule | None = None):
        self.ctx, self.data, self.placement, self.model = ctx, data, placement, model
        self.schedule = schedule or BlockSchedule()
        # foreach: the same arithmetic as the per-tensor loop (bit-identical), in fewer kernel calls
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
        self.gradients = GradientSync(ctx.comm, list(model.parameters()))
        self.activations = SavedActivationMeter()
        self.transfer_per_epoch: list[dict[str, int]] = []
        self.node_task: NodeClassification | None = None  # --task node-classification (set by the family)
        self.minibatches: MiniBatching | None = None  # --seed-batch B: BLAD §3.1's vertex mini-batches

    # ------------------------------------------------------------------ one block
    def block_loss(self, block: int, state: list[State], batches: list[PairBatch], total_pairs: int,
                    timer: PhaseTimer, score: bool = True) -> tuple[torch.Tensor, list[State]]:
        view = self.placement.view(block, timer)
        halves, new_state = self.model.forward_block(view, state)
        if not score:
            return halves.new_zeros(()), new_state
        logits = self.placement.score(view, halves, batches, self.model.scorer.bias)
        labels = torch.from_numpy(np.concatenate([b.label for b in batches]) if batches
                                  else np.zeros(0, np.float32)).to(logits.device)
        loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / max(total_pairs, 1)
        if batches and self.ctx.world_size == 1:
            return loss, new_state  # connected through its logits, and there are no collectives to keep
        # keeps this rank's graph connected to every collective (and backward-able) when it scores no pair
        return loss + 0.0 * halves.sum(), new_state

    def initial_state(self) -> list[State]:
        return self.model.initial_state(self.placement.vertex_rows)

    # ------------------------------------------------------------------ training
    def train_epoch(self, epoch: int, timer: PhaseTimer) -> tuple[float, int]:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=False)
        moved_before = self.placement.transfer_bytes()
        every = self.data.split_pairs(TRAIN, epoch)
        if self.ctx.world_size > 1:  # drawn: another rank's target keys need not stay through the pass (one rank's
            self.data.release_split_targets(TRAIN)  # are its own share: it keeps them, not re-reading them per epoch)
        total_pairs = sum(len(b.src) for b in every)
        with self.activations.watching():
            if self.minibatches is None:
                own = self.schedule.assign(self, every)
                del every  # the other ranks' pairs: this rank keeps only its share through the pass
                local_loss = self.schedule.forward_backward(self, own, total_pairs, timer)
                work = self.data.work()
            else:  # BLAD §3.1: seed batches, each on its sampled graph and placement
                local_loss, work, moved = self.minibatches.train_epoch(self, every, total_pairs, epoch, timer)
        if not self.schedule.steps_optimizer():
            self.gradients.synchronise()
            self.optimizer.step()
        if self.minibatches is None:
            moved = {mode: n - moved_before[mode] for mode, n in self.placement.transfer_bytes().items()}
        self.transfer_per_epoch.append(moved)
        summed = self.ctx.comm.all_reduce(torch.tensor([local_loss], dtype=torch.float64, device=self.ctx.device),
                                          tag="loss") if self.ctx.world_size > 1 else torch.tensor([local_loss])
        return float(summed.item()), work

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, which: tuple[str, ...] = (VAL, TEST)) -> dict[str, dict[str, float]]:
        """Scores of the validation and/or test pairs (the run's evaluation sets), gathered from every rank."""
        self.model.eval()
        if self.node_task is not None:
            return self.node_task.figures(*self.vertex_embeddings()) if self.node_task.due() else {}
        own = self.schedule.evaluate(self, which)
        if own is not None:
            return own
        splits = {split: [self.placement.owned(batch) for batch in self.data.split_pairs(split)] for split in which}
        scored: dict[str, list[torch.Tensor]] = {split: [] for split in which}
        timer = PhaseTimer(self.ctx.device)
        state = self.initial_state()
        for b, block in enumerate(self.placement.blocks):
            view = self.placement.view(b, timer)
            halves, state = self.model.forward_block(view, state)
            inside = {split: [batch for batch in batches if batch.step in block] for split, batches in splits.items()}
            # once for both splits: it may be a collective
            table, first = self.placement.score_table(view, halves, [p for pairs in inside.values() for p in pairs])
            for split in splits:
                logits = pair_logits(table, first, inside[split], self.model.scorer.bias)
                scored[split].append(self.pair_rows(logits, inside[split]))
        out: dict[str, dict[str, float]] = {}
        for split, rows in scored.items():
            out.update(self.split_metrics(split, self._gather(torch.cat(rows))))
        return out

    def scoring_state(self) -> dict[str, torch.Tensor]:
        """A copy of what the scores depend on: the parameters (every scoring pass starts from the initial
        state and exchanges fresh rows, trainers/discrete/dgc/stale.py; the parameters are replicated)."""
        return {name: value.detach().clone() for name, value in self.model.state_dict().items()}

    def restore_scoring_state(self, kept: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(kept)

    @torch.no_grad()
    def vertex_embeddings(self) -> tuple[np.ndarray, np.ndarray]:
        """Node classification (dgbench/tasks/node.py): the trained model frozen, one pass over the sequence;
        the embedding of each labelled (step t, vertex v) — the last layer's output at t, what the link
        scorer reads — as (t·N + v, embedding) rows gathered from every rank."""
        assert self.node_task is not None
        wanted, n = self.node_task.all_keys(), self.data.num_nodes
        timer, state, rows = PhaseTimer(self.ctx.device), self.initial_state(), []
        for b in range(len(self.placement.blocks)):
            view = self.placement.view(b, timer)
            x, state = self.model.embed_block(view, state)
            steps, vertices = self.placement.embedding_index(view)
            keys = (steps[:, None] * n + vertices[None, :]).reshape(-1)
            keep = np.flatnonzero(np.isin(keys, wanted))
            flat = x.reshape(len(keys), -1).index_select(0, torch.from_numpy(keep).to(x.device))
            rows.append(torch.cat([torch.from_numpy(keys[keep]).to(x.device, torch.float64)[:, None],
                                   flat.double()], dim=1))
        every = self._gather(torch.cat(rows)).cpu().numpy()
        return every[:, 0].astype(np.int64), every[:, 1:]

    def pair_rows(self, logits: torch.Tensor, batches: list[PairBatch]) -> torch.Tensor:
        """Rows every rank's scores are gathered in: (logit, pair id) for evaluation-set pairs (they carry
        ids), else (logit, 0/1 label)."""
        column = [b.ids if b.ids is not None else b.label for b in batches]
        values = np.concatenate(column).astype(np.float64) if column else np.zeros(0)
        return torch.stack([logits.double(), torch.from_numpy(values).to(logits.device)], dim=1)

    def split_metrics(self, split: str, gathered: torch.Tensor) -> dict[str, dict[str, float]]:
        """Metrics of ``split`` from every rank's :meth:`pair_rows`: through the one evaluator of both
        families for the run's evaluation sets (``val``/``test``, and ``test:historical``... for further
        sets), else accuracy / AP / AUC of the labelled pairs."""
        rows = gathered.cpu().numpy()
        if not self.data.evaluation:
            return {split: link_prediction_metrics(rows[:, 0], rows[:, 1])}
        figures = score_pairs(self.data.evaluation, split, rows[:, 1].astype(np.int64), rows[:, 0])
        return {name: f.as_metrics() for name, f in figures.items()}

    def _gather(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's (logit, label or pair id) rows on every rank."""
        return self.ctx.comm.all_gather_uneven(rows, tag="evaluation")

    def extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {"peak_saved_activation_bytes": self.activations.peak}
        if any(self.transfer_per_epoch):  # this rank's {"base": .., "gd": ..} of each training epoch
            out["transfer_bytes_by_epoch"] = self.transfer_per_epoch
        return out
