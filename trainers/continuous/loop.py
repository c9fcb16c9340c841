"""The one training loop of the continuous-time family; the scheme only decides where N&M lives.

Per batch (TGL's protocol, Zhou et al. VLDB'22): take this rank's events and the batch's negatives
(one random destination per positive, drawn from (seed, batch) so the same for every rank count);
fetch the state rows of roots and sampled neighbours (scheme: local read or all-to-all from owners,
:mod:`trainers.continuous.state`); update memory with the mailbox, embed, score, BCE loss scaled by
the *global* batch size; backward; all-reduce gradients (summed, so the step equals ``single``'s);
write the new memory and mails of the positive endpoints back (most-recent message wins).

Data parallelism follows DepComm/Sven: events run on the rank owning their source (depcomm, sven)
or on an even share of the batch (depcache); memory is detached at batch boundaries as in TGL, so
no gradient crosses ranks except the all-reduce. Memory is reset each epoch and carried from
training through validation into test.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from dgbench.dist import DistContext, PhaseTimer
from dgbench.metrics import link_prediction_metrics
from dgbench.models.temporal import BatchInputs, TemporalModel
from trainers.continuous.data import BatchPlan, BatchPlanner, EventStream, Prefetcher
from trainers.continuous.sampler import TemporalSampler
from dgbench.options import Options
from dgbench.progress import bar as progress_bar
from trainers.continuous.state import AGGREGATE_TAG, DISPATCH_TAG, PartitionedState
from trainers.continuous.sven_core import pipeline_granularity, redundancy_ratios, remote_fractions
from trainers.contract import ContinuousScheme, Partition
from trainers.gradients import GradientSync

GRAD_TAG = "grad_allreduce"
CONTROL_TAG = "counts"  # row counts: their seconds are communication time, their bytes no volume


@dataclass
class LoopOptions:
    """The protocol's knobs the loop reads (the scheme's come through its hooks)."""

    batch_size: int
    neighbors: int
    sampler: str
    lr: float
    seed: int
    prefetch: int = 2


@dataclass
class BatchCounters:
    """Per-batch figures of one rank: redundancy, remote shares and the Eq. 7-9 predicted bytes."""

    eta1: list[float] = field(default_factory=list)
    eta2: list[float] = field(default_factory=list)
    rho: list[float] = field(default_factory=list)
    rho_a: list[float] = field(default_factory=list)
    predicted_dispatch: float = 0.0
    predicted_aggregation: float = 0.0
    batches: int = 0

    def summary(self) -> dict[str, float | list[float]]:
        mean = (lambda xs: float(np.mean(xs)) if xs else 0.0)
        return {"eta1": mean(self.eta1), "eta2": mean(self.eta2), "remote_fraction": mean(self.rho),
                "aggregation_remote_fraction": mean(self.rho_a), "batches": self.batches,
                "predicted_dispatch_bytes": self.predicted_dispatch,
                "predicted_aggregation_bytes": self.predicted_aggregation,
                "eta1_per_batch": list(self.eta1), "eta2_per_batch": list(self.eta2)}


class ContinuousTrainer:
    """Holds model, optimiser, N&M state and sampler of one rank; drives train and evaluation passes."""

    def __init__(self, ctx: DistContext, stream: EventStream, model: TemporalModel, scheme: ContinuousScheme,
                 scheme_options: Options, partition: Partition, options: LoopOptions):
        self.ctx, self.stream, self.model, self.options = ctx, stream, model, options
        self.scheme, self.scheme_options = scheme, scheme_options
        assert partition.owner is not None, "continuous-time schemes place N&M by an owner per vertex"
        self.owner = partition.owner
        self.model.to(ctx.device)
        self.dtype = next(model.parameters()).dtype  # float32; float64 in exactness tests
        self.optimizer = torch.optim.Adam(model.parameters(), lr=options.lr)
        self.state = scheme.node_state(ctx, model.layout, partition, scheme_options)
        self.microbatches = scheme.microbatches(scheme_options)
        sampler = TemporalSampler(stream.src, stream.dst, stream.t, stream.num_nodes) if model.uses_neighbors else None
        self.planner = BatchPlanner(stream, sampler, options.neighbors, options.sampler, options.seed,
                                    scheme.assign_events(partition, ctx.rank, ctx.world_size), self.state.route)
        self.counters = BatchCounters()
        self.gradients = GradientSync(ctx.comm, list(model.parameters()), GRAD_TAG,
                                      staleness=scheme.gradient_staleness(scheme_options))
        self.losses: list[float] = []
        self.microbatch_choice: dict[str, Any] = {}
        self._last_fetch_seconds = self._last_update_seconds = 0.0

    # ------------------------------------------------------------------ one batch
    def _inputs(self, plan: BatchPlan, rows: torch.Tensor) -> BatchInputs:
        device, s = self.ctx.device, self.stream
        b = len(plan.events)
        t = torch.from_numpy(s.t[plan.events]).to(device, self.dtype)
        inputs = BatchInputs(rows[:3 * b], t, torch.from_numpy(s.edge_features[plan.events]).to(device, self.dtype))
        if plan.neighbors is not None:
            nbr = plan.neighbors
            root_t = np.tile(s.t[plan.events], 3)
            inputs.neighbor_rows = rows[3 * b:]
            inputs.neighbor_mask = torch.from_numpy(nbr.mask).to(device)
            inputs.neighbor_dt = torch.from_numpy(np.where(nbr.mask, root_t[:, None] - nbr.times, 0.0)).to(
                device, self.dtype)
            inputs.neighbor_edge_features = torch.from_numpy(
                s.edge_features[np.where(nbr.mask, nbr.events, 0)]).to(device, self.dtype)
        return inputs

    def _fetch_and_update(self, plan: BatchPlan) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of the needed ids and their updated memory; for pipelined sven the update of each
        arriving part overlaps the transfer of the next."""
        device = self.ctx.device
        query_t = torch.from_numpy(plan.query_times).to(device, self.dtype)
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        compute_seconds = [0.0]

        def on_chunk(positions: np.ndarray, rows: torch.Tensor) -> None:
            start = time.perf_counter()
            index = torch.from_numpy(positions).to(device)
            parts.append((index, self.model.updated_state(rows, query_t[index])))
            compute_seconds[0] += time.perf_counter() - start

        start = time.perf_counter()
        rows = self.state.fetch(plan.route, on_chunk)
        self._last_fetch_seconds = time.perf_counter() - start - compute_seconds[0]
        self._last_update_seconds = compute_seconds[0]
        updated = rows.new_zeros(len(rows), self.model.layout.state_dim)
        for index, values in parts:
            updated = updated.index_copy(0, index, values)
        return rows, updated

    def _step(self, plan: BatchPlan, train: bool, timer: PhaseTimer | None) -> tuple[torch.Tensor, Any]:
        """Forward (and backward) of this rank's share; returns (loss share, outputs or None)."""
        if len(plan.needed_ids) == 0:
            self.state.fetch(plan.route)  # still take part in the collectives
            return torch.zeros((), device=self.ctx.device), None
        with torch.set_grad_enabled(train):
            rows, updated = self._fetch_and_update(plan)
            if timer is None:
                inputs = self._inputs(plan, rows)
            else:
                with timer.phase("transfer"):  # host -> device copies of times, features, masks
                    inputs = self._inputs(plan, rows)
            outputs = self.model(inputs, updated)
            loss = (F.binary_cross_entropy_with_logits(outputs.pos_logits, torch.ones_like(outputs.pos_logits),
                                                       reduction="sum")
                    + F.binary_cross_entropy_with_logits(outputs.neg_logits, torch.zeros_like(outputs.neg_logits),
                                                         reduction="sum")) / plan.size
        if train:
            loss.backward()
        return loss.detach(), outputs

    def _write_back(self, plan: BatchPlan, outputs: Any) -> None:
        ids = np.concatenate([plan.src, plan.dst])
        priority = np.concatenate([2 * plan.positions, 2 * plan.positions + 1])  # dst after src of one event
        rows = outputs.new_rows if outputs is not None else \
            torch.zeros(0, self.model.layout.width, device=self.ctx.device)
        self.state.write(ids, rows, priority)

    def _count(self, plan: BatchPlan) -> None:
        """Eq. 1 redundancy and the Eq. 7-9 volume this batch should move, for the record and tests."""
        b = len(plan.events)
        if b == 0:
            return
        roots = plan.roots
        sampled = plan.needed_ids[len(roots):]
        updated = np.concatenate([plan.src, plan.dst])
        rank, world = self.ctx.rank, self.ctx.world_size
        eta1, eta2 = redundancy_ratios(roots, sampled, self.owner, rank, updated)
        rho, rho_a = remote_fractions(roots, sampled, self.owner, rank, updated)
        c = self.counters
        for series, value in ((c.eta1, eta1), (c.eta2, eta2), (c.rho, rho), (c.rho_a, rho_a)):
            series.append(value)
        c.batches += 1
        volume = self.scheme.predicted_volume(eta1, eta2, b, world, self.model.layout.width,
                                              num_neighbors=len(sampled) / len(roots), remote_fraction=rho,
                                              aggregation_remote_fraction=rho_a,
                                              bytes_per_value=torch.finfo(self.dtype).bits // 8)
        if volume is not None:
            c.predicted_dispatch += volume.dispatch_bytes
            c.predicted_aggregation += volume.aggregation_bytes

    def _synchronise_and_step(self, loss: torch.Tensor) -> None:
        """Sum gradients (and the loss) over ranks and step; with staleness 1, step with the previous
        batch's sum (Sven Eq. 13) — the first batch then takes no step."""
        summed = self.gradients.synchronise(extras=loss.reshape(1), fresh=True)
        if summed is None:
            self.optimizer.zero_grad(set_to_none=True)
            return
        self._step_with(summed)

    def _step_with(self, summed_loss: torch.Tensor) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.losses.append(float(summed_loss[0]))

    # ------------------------------------------------------------------ passes
    def train_epoch(self, epoch: int, timer: PhaseTimer) -> tuple[float, int]:
        self.state.reset()
        self.model.train()
        self.losses = []
        self.counters = BatchCounters()
        a, b = self.stream.ranges["train"]
        bar = progress_bar(b - a, f"epoch {epoch + 1}", "ev") if self.ctx.is_main else None
        for plan in Prefetcher(self.planner, "train", self.options.batch_size, self.options.prefetch):
            self.optimizer.zero_grad(set_to_none=True)
            loss, outputs = self._step(plan, train=True, timer=timer)
            self._count(plan)
            self._synchronise_and_step(loss)
            self._write_back(plan, outputs)
            if self.microbatches == 0 and not self.microbatch_choice:
                self._choose_microbatches(plan)
            if bar is not None:
                bar.update(len(plan.events))
        last = self.gradients.finish()
        if last is not None:  # the stale sum of the last batch
            self._step_with(self.gradients.load(last, fresh=True))
        if bar is not None:
            bar.close()
        return (float(np.mean(self.losses)) if self.losses else 0.0), b - a

    def _choose_microbatches(self, plan: BatchPlan) -> None:
        """Eq. 12 from the first batch: its fetch (communication) and memory-update (compute) times and
        the per-collective latency; every rank uses the maximum over ranks so all pick the same n."""
        if not isinstance(self.state, PartitionedState):
            self.microbatch_choice = {"n": 1}
            return
        control = self.ctx.comm.stats[CONTROL_TAG]
        latency = control.seconds / max(control.calls, 1)
        measured = torch.tensor([self._last_fetch_seconds, self._last_update_seconds, latency],
                                dtype=torch.float64, device=self.ctx.device)
        self.ctx.comm.all_reduce(measured, CONTROL_TAG, op=torch.distributed.ReduceOp.MAX)
        comm_s, compute_s, overhead = measured.tolist()
        eta1 = self.counters.eta1[-1] if self.counters.eta1 else 0.0
        # Micro-batches split the already deduplicated id list, so redundancy stays that of the batch.
        n = pipeline_granularity(lambda m: eta1, self.options.batch_size, comm_s, compute_s, overhead=overhead)
        self.state.chunks = n
        self.microbatch_choice = {"n": n, "comm_s": comm_s, "compute_s": compute_s, "overhead_s": overhead,
                                  "eta1": eta1}

    @torch.no_grad()
    def evaluate(self) -> dict[str, dict[str, float]]:
        """Validation then test, memory carried on from training (TGL)."""
        self.model.eval()
        return {split: self._evaluate_split(split) for split in ("val", "test")}

    def _evaluate_split(self, split: str) -> dict[str, float]:
        gathered = []
        for plan in Prefetcher(self.planner, split, self.options.batch_size, self.options.prefetch):
            _, outputs = self._step(plan, train=False, timer=None)
            self._write_back(plan, outputs)
            gathered.append(self._gather_scores(plan, outputs))
        if not gathered:
            return {"accuracy": float("nan"), "ap": float("nan"), "auc": float("nan")}
        scores = np.concatenate(gathered)
        logits = np.concatenate([scores[:, 1], scores[:, 2]])
        labels = np.concatenate([np.ones(len(scores)), np.zeros(len(scores))])
        return link_prediction_metrics(logits, labels)

    def _gather_scores(self, plan: BatchPlan, outputs: Any) -> np.ndarray:
        """(global event id, positive logit, negative logit) of the whole batch on every rank, in order."""
        device = self.ctx.device
        local = torch.zeros(len(plan.events), 3, dtype=torch.float64, device=device)
        if outputs is not None:
            local[:, 0] = torch.from_numpy(plan.events).to(device, torch.float64)
            local[:, 1], local[:, 2] = outputs.pos_logits.double(), outputs.neg_logits.double()
        every = self.ctx.comm.all_gather_uneven(local, tag="eval_scores").cpu().numpy()
        return every[np.argsort(every[:, 0], kind="stable")]

    def comm_breakdown(self, by_tag: dict[str, dict[str, float]]) -> dict[str, float]:
        """Seconds and bytes of N&M dispatch / aggregation and gradient all-reduce from the tag counters."""
        out: dict[str, float] = defaultdict(float)
        for tag, s in by_tag.items():
            group = ("nm_dispatch" if tag.startswith(DISPATCH_TAG) else "nm_aggregate" if tag.startswith(AGGREGATE_TAG)
                     else "grad_allreduce" if tag == GRAD_TAG else None)
            if group is None:
                continue
            out[f"{group}_s"] += s["seconds"]
            out[f"{group}_bytes"] += s["bytes"]
            if not tag.endswith(":ids"):
                out[f"{group}_row_bytes"] += s["bytes"]
        return dict(out)
