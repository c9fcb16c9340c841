"""The one training loop of the continuous-time family; the scheme only decides where N&M lives.

Per batch (TGL's protocol, Zhou et al. VLDB'22): take this rank's events and the batch's negatives
(one random destination per positive, drawn from (seed, batch) so the same for every rank count);
get the views of roots and fetched neighbours (the memory updated with the mailbox and what the
embedding needs; scheme: local, fetched rows updated here, or updated by the owners,
:mod:`dgbench.trainers.continuous.state`); embed, score, BCE loss scaled by the *global* batch size;
backward; all-reduce gradients (summed, so the step equals ``single``'s); write the endpoints' new
memory and mails back (most-recent message wins; APAN also mails the endpoints' sampled neighbours).
Under ``--protocol batch`` the roots are the distinct vertices of the share, viewed and embedded once at
the batch's first event time, and each event's roots read their vertex's embedding (docs/continuous-training.md).

Compute is data-parallel and balanced the same way for every scheme (Sven §2.3, §4.2): each batch's
events are split evenly across the ranks (:func:`dgbench.trainers.continuous.sven.formulas.even_share`); only
where N&M lives differs. Memory is detached at batch boundaries as in TGL, so no gradient crosses
ranks except the all-reduce (and, under DepComm, the owners' memory-update gradients). Memory is
reset each epoch and carried from training through validation into test.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from dgbench.dist import DistContext, PhaseTimer
from dgbench.metrics import link_prediction_metrics
from dgbench.models.temporal import (BatchInputs, PairViews, TemporalModel, gathered, positions, rows_at,
                                     split_views)
from dgbench.options import Options
from dgbench.progress import bar as progress_bar
from dgbench.tasks.evalset import EvaluationSet
from dgbench.tasks.evaluator import Evaluator, SplitFigures, split_name
from dgbench.tasks.node import NodeClassification
from dgbench.trainers.continuous.data import TGL, BatchPlan, BatchPlanner, EventStream, Prefetcher, neighbor_sampler
from dgbench.trainers.continuous.state import (AGGREGATE_TAG, BACKWARD_SUFFIX, DISPATCH_TAG, ID_SUFFIX, TIME_SUFFIX,
                                               PendingWrite)
from dgbench.trainers.continuous.traffic import BatchTraffic, redundancy, remote_redundancy
from dgbench.trainers.contract import ContinuousScheme, Partition
from dgbench.trainers.gradients import GradientSync

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
    sampler_decay: float = 0.0
    protocol: str = TGL  # --protocol (trainers/continuous/data.py)
    max_batches: int | None = None  # --max-batches: each pass stops after this many batches


@dataclass
class BatchCounters:
    """Per-batch figures of one rank: its share's Eq. 1 ratios (paper form over its own lists, and the
    per-rank remote-only form), the events it computed and the per-rank Eq. 7-9 bytes it should send."""

    eta1: list[float] = field(default_factory=list)
    eta2: list[float] = field(default_factory=list)
    eta1_remote: list[float] = field(default_factory=list)
    eta2_remote: list[float] = field(default_factory=list)
    events: int = 0
    predicted_dispatch: float = 0.0
    predicted_aggregation: float = 0.0
    batches: int = 0

    def summary(self) -> dict[str, float | list[float]]:
        def mean(xs: list[float]) -> float:
            return float(np.mean(xs)) if xs else 0.0
        return {"eta1": mean(self.eta1), "eta2": mean(self.eta2), "eta1_remote": mean(self.eta1_remote),
                "eta2_remote": mean(self.eta2_remote), "batches": self.batches, "events": self.events,
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
        # fused: one kernel over every parameter instead of ~10 operators per parameter (Adam's equations; its
        # steps differ from the per-parameter loop's by float rounding only). ~20 parameters make the loop
        # ~200 operators per step, a tenth of a --protocol batch step (docs/performance.md, "The TGN step")
        self.optimizer = torch.optim.Adam(model.parameters(), lr=options.lr, fused=True)
        self.state = scheme.node_state(ctx, model.layout, partition, scheme_options)
        self.microbatches = scheme.microbatches(scheme_options)
        delivers = getattr(model, "delivers_to_neighbors", False)
        sampler = neighbor_sampler(stream, options.sampler, options.neighbors, options.sampler_decay,
                                   keep_features=model.uses_neighbors) if (model.uses_neighbors or delivers) else None
        self.planner = BatchPlanner(stream, sampler, options.neighbors, options.sampler, options.seed,
                                    scheme.assign_events(partition, ctx.rank, ctx.world_size), self.state.route,
                                    fetch_neighbors=model.uses_neighbors, deliver_to_neighbors=delivers,
                                    protocol=options.protocol, max_batches=options.max_batches)
        self.counters = BatchCounters()
        self.gradients = GradientSync(ctx.comm, list(model.parameters()), GRAD_TAG,
                                      staleness=scheme.gradient_staleness(scheme_options))
        # one rank without staleness sums nothing: its gradients are the sums already, so they are not
        # flattened into one vector and copied back each step (~60 operators; docs/performance.md, "The TGN step")
        self.sums_gradients = ctx.world_size > 1 or self.gradients.staleness > 0
        self.losses: list[float] = []
        self.microbatch_choice: dict[str, Any] = {}
        self.evaluation: list[EvaluationSet] = []  # the run's evaluation sets (set by the family)
        self.node_task: NodeClassification | None = None  # --task node-classification (set by the family)

    # ------------------------------------------------------------------ one batch
    def _inputs(self, plan: BatchPlan, rows: torch.Tensor | None) -> BatchInputs:
        """The model's inputs for ``plan``'s roots: [src, dst, negative] in training, [src, dst, K candidates]
        in evaluation (each block one root per event); ``rows``: the roots' raw rows, then the neighbours'."""
        device, s = self.ctx.device, self.stream
        count = plan.query_roots
        t = torch.from_numpy(s.t[plan.events]).to(device, self.dtype)
        inputs = BatchInputs(rows[:count] if rows is not None else None, t,
                             torch.from_numpy(s.edge_features[plan.events]).to(device, self.dtype))
        if plan.root_index is not None:  # --protocol batch: the roots are the distinct vertices
            assert plan.root_times is not None
            inputs.root_index = torch.from_numpy(plan.root_index).to(device)
            inputs.root_t = torch.from_numpy(plan.root_times).to(device, self.dtype)
        if plan.neighbors is not None:
            nbr = plan.neighbors
            mask = inputs.neighbor_mask = torch.from_numpy(nbr.mask).to(device)
            if inputs.root_index is not None:
                inputs.delivery_mask = mask[inputs.root_index[:2 * len(plan.events)]]
            if self.model.uses_neighbors:
                root_t = plan.root_times if plan.root_times is not None else \
                    np.tile(s.t[plan.events], count // max(len(plan.events), 1))
                inputs.neighbor_rows = rows[count:] if rows is not None else None
                inputs.neighbor_dt = torch.from_numpy(np.where(nbr.mask, root_t[:, None] - nbr.times, 0.0)).to(
                    device, self.dtype)
                inputs.neighbor_edge_features = torch.from_numpy(
                    nbr.edge_features if nbr.edge_features is not None
                    else s.edge_features[np.where(nbr.mask, nbr.events, 0)]).to(device, self.dtype)
        return inputs

    def _views(self, plan: BatchPlan) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Views of every needed position (and the raw rows where the scheme brings them here)."""
        views, rows = self._paired_views(plan, keep_pairs=False)
        assert isinstance(views, torch.Tensor)
        return views, rows

    def _paired_views(self, plan: BatchPlan, keep_pairs: bool = True
                      ) -> tuple[torch.Tensor | PairViews, torch.Tensor | None]:
        """:meth:`_views`, as :class:`PairViews` where ``keep_pairs`` and the state computes them per distinct
        (vertex, time) pair here (TGN's training step reads its neighbours' views from the pairs)."""
        query_t = torch.from_numpy(plan.query_times).to(self.ctx.device, self.dtype)
        if keep_pairs and self.state.views_per_pair:
            return self.state.views(plan.route, query_t, self.model.node_views, keep_pairs=True)
        return self.state.views(plan.route, query_t, self.model.node_views)

    def _write_ids(self, plan: BatchPlan) -> tuple[np.ndarray, np.ndarray]:
        """Ids and priorities of the update rows: [src, dst] (dst after src of one event), then the
        mails delivered to neighbours, below every endpoint (an endpoint's own update wins)."""
        ids = [plan.src, plan.dst]
        priority = [2 * plan.positions, 2 * plan.positions + 1]
        if plan.deliveries is not None:
            ids.append(plan.deliveries)
            priority.append(plan.delivery_priority - 2 * plan.size)
        return np.concatenate(ids), np.concatenate(priority)

    def _endpoint_views(self, plan: BatchPlan, views: torch.Tensor | PairViews) -> torch.Tensor:
        """The views of the batch's [src, dst] roots (their write-back reads them)."""
        b = len(plan.events)
        if plan.root_index is None:
            return gathered(positions(views, 0, 2 * b))
        return rows_at(views, torch.from_numpy(plan.root_index[:2 * b]))

    def _root_embeddings(self, plan: BatchPlan, inputs: BatchInputs, views: torch.Tensor | PairViews
                         ) -> torch.Tensor:
        """The embedding of every root of ``plan`` (its blocks of b, in order) at its query time."""
        if plan.root_index is not None:
            return self.model.embed_roots(inputs, views)[0]
        count = len(plan.roots)
        root_t = torch.from_numpy(np.tile(self.stream.t[plan.events], count // len(plan.events))).to(
            self.ctx.device, self.dtype)
        root_view, neighbor_view = split_views(views, count, self.model.uses_neighbors)
        return self.model.embed(inputs, root_view, root_t, neighbor_view)

    def _begin_write(self, plan: BatchPlan, inputs: BatchInputs | None, views: torch.Tensor | PairViews | None,
                     outputs: Any) -> PendingWrite:
        ids, priority = self._write_ids(plan)
        if outputs is not None:
            rows, delivered = outputs.new_rows, outputs.delivered_rows
        elif inputs is not None and views is not None:
            rows, delivered = self.model.write_rows(inputs, self._endpoint_views(plan, views))
        else:
            rows, delivered = torch.zeros(0, self.model.layout.update_width, device=self.ctx.device), None
        if delivered is not None:
            rows = torch.cat([rows, delivered])
        return self.state.begin_write(ids, rows, priority)

    def _step(self, plan: BatchPlan, train: bool, timer: PhaseTimer | None) -> tuple[torch.Tensor, Any]:
        """Forward (and backward) of this rank's share, and the batch's write-back; returns (loss share,
        outputs or None). Every rank takes part in every collective, with or without events."""
        with torch.set_grad_enabled(train):
            # TGN reads its neighbours' views from the distinct pairs' (training under either protocol; evaluation:
            # _score_candidates; docs/performance.md)
            keep_pairs = train and self.model.reads_pair_views and len(plan.events) > 0
            views, rows = self._paired_views(plan, keep_pairs)
            if len(plan.events) == 0:
                assert isinstance(views, torch.Tensor)
                pending = self._begin_write(plan, None, None, None)
                # keeps the rank in the backward collectives of owner-computed views (DepComm)
                loss = views.sum() * 0.0 if views.requires_grad else torch.zeros((), device=self.ctx.device)
                if train and loss.requires_grad:
                    loss.backward()
                pending.finish()
                return loss.detach(), None
            if timer is None:
                inputs = self._inputs(plan, rows)
            else:
                with timer.phase("transfer"):  # host -> device copies of times, features, masks
                    inputs = self._inputs(plan, rows)
            overlap = self.state.overlaps_write and self.model.rows_before_embedding
            pending = self._begin_write(plan, inputs, views, None) if overlap else None  # §3.3.2 level 2
            outputs = self.model(inputs, views)
            loss = (F.binary_cross_entropy_with_logits(outputs.pos_logits, torch.ones_like(outputs.pos_logits),
                                                       reduction="sum")
                    + F.binary_cross_entropy_with_logits(outputs.neg_logits, torch.zeros_like(outputs.neg_logits),
                                                         reduction="sum")) / plan.size
        if train:
            loss.backward()
        if pending is None:
            pending = self._begin_write(plan, inputs, views, outputs)
        pending.finish()
        return loss.detach(), outputs

    def _traffic(self, plan: BatchPlan) -> BatchTraffic:
        """The per-rank counts Eq. 7-9's per-rank forms read, from this rank's lists."""
        rank = self.ctx.rank
        needed = plan.needed_ids
        remote = needed[self.owner[needed] != rank]
        ids, priority = self._write_ids(plan)
        updated = np.unique(ids)
        remote_updated = updated[self.owner[updated] != rank]
        layout = self.model.layout
        return BatchTraffic(dispatch_positions=len(remote), dispatch_unique=len(np.unique(remote)),
                            aggregation_unique=len(remote_updated), updates_unique=len(updated),
                            world_size=self.ctx.world_size, row_width=layout.width,
                            view_width=self.model.view_width, update_width=layout.update_width + 1,
                            bytes_per_value=torch.finfo(self.dtype).bits // 8)

    def _count(self, plan: BatchPlan) -> None:
        """Eq. 1 redundancy of this rank's lists and the per-rank Eq. 7-9 bytes it should move."""
        b = len(plan.events)
        c = self.counters
        c.events += b
        if b == 0:
            return
        ids, _ = self._write_ids(plan)
        rank = self.ctx.rank
        c.eta1.append(redundancy(plan.needed_ids))
        c.eta2.append(redundancy(ids))
        c.eta1_remote.append(remote_redundancy(plan.needed_ids, self.owner, rank))
        c.eta2_remote.append(remote_redundancy(ids, self.owner, rank))
        c.batches += 1
        volume = self.scheme.predicted_volume(self._traffic(plan))
        if volume is not None:
            c.predicted_dispatch += volume.dispatch_bytes
            c.predicted_aggregation += volume.aggregation_bytes

    def _synchronise_and_step(self, loss: torch.Tensor) -> None:
        """Sum gradients (and the loss) over ranks and step; with staleness 1, step with the previous
        batch's sum (Sven Eq. 13) — the first batch then takes no step."""
        if not self.sums_gradients:  # the (empty) all-reduce of the loss keeps the tag in the record, 0 bytes
            for parameter in self.gradients.params:  # zeros where unused, as the sum gives (Adam then moves it)
                if parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
            self._step_with(self.ctx.comm.all_reduce(loss.reshape(1), GRAD_TAG))
            return
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
        events = sum(b - a for a, b in self.planner.batch_bounds("train", self.options.batch_size))
        bar = progress_bar(events, f"epoch {epoch + 1}", "ev") if self.ctx.is_main else None
        for plan in Prefetcher(self.planner, "train", self.options.batch_size, self.options.prefetch):
            self.optimizer.zero_grad(set_to_none=True)
            loss, _ = self._step(plan, train=True, timer=timer)
            self._count(plan)
            self._synchronise_and_step(loss)
            if self.microbatches == 0 and not self.microbatch_choice:  # Sven Eq. 12, after the first batch
                self.microbatch_choice = self.state.choose_chunks(plan, self.options.batch_size)
            if bar is not None:
                bar.update(plan.size)
        last = self.gradients.finish()
        if last is not None:  # the stale sum of the last batch
            self._step_with(self.gradients.load(last, fresh=True))
        if bar is not None:
            bar.close()
        return (float(np.mean(self.losses)) if self.losses else 0.0), events

    @torch.no_grad()
    def evaluate(self, which: tuple[str, ...] = ("val", "test")) -> dict[str, dict[str, float]]:
        """Validation then test (of ``which``), memory carried on from training (TGL). With evaluation sets,
        each set is scored from the same post-training memory (restored between sets): its negatives ranked
        against every positive through the one evaluator of both families (dgbench/tasks/evaluator.py).
        Test alone still carries the memory through the validation events (their scores are not taken)."""
        self.model.eval()
        if self.node_task is not None:
            return self.node_task.figures_from(self.source_embedding_batches()) if self.node_task.due() else {}
        passes = ("val", "test") if "test" in which else ("val",)
        if not self.evaluation:
            return {split: figures for split in passes
                    if (figures := self._evaluate_split(split, score=split in which)) is not None}
        # the post-training memory is kept only for further sets; the last set reads it in place (no copy)
        trained = self.state.table.clone() if len(self.evaluation) > 1 else None
        out = {}
        for index, evaluation in enumerate(self.evaluation):
            if index and trained is not None:
                self.state.table = trained.clone() if index < len(self.evaluation) - 1 else trained
            for split in passes:
                figures = self._evaluate_set(evaluation, split, score=split in which)
                if figures is not None:
                    out[split_name(split, index, evaluation)] = figures.as_metrics()
        return out

    def scoring_state(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """A copy of what the scores depend on: the parameters and this rank's N&M table (the whole
        replica, or the rows this rank owns where the scheme partitions it)."""
        return ({name: value.detach().clone() for name, value in self.model.state_dict().items()},
                self.state.table.clone())

    def restore_scoring_state(self, kept: tuple[dict[str, torch.Tensor], torch.Tensor]) -> None:
        parameters, table = kept
        self.model.load_state_dict(parameters)
        self.state.table = table.clone()

    @torch.no_grad()
    def source_embedding_batches(self) -> Iterator[np.ndarray]:
        """Node classification (dgbench/tasks/node.py; TGN §5, DyGLib train_node_classification.py): the
        trained model frozen, memory reset and replayed over train, validation and test in time order as
        in training; each event's source embedding at its time, as (event id, embedding) rows of every
        rank, one gathered batch at a time (a streamed run writes them to disk, not to a list)."""
        self.model.eval()
        self.state.reset()
        for split in ("train", "val", "test"):
            for plan in Prefetcher(self.planner, split, self.options.batch_size, self.options.prefetch):
                local = self._embed_sources(plan)
                yield self.ctx.comm.all_gather_uneven(local, tag="eval_scores").cpu().numpy()

    def _embed_sources(self, plan: BatchPlan) -> torch.Tensor:
        """(event id, source embedding) rows of this rank's events of one batch, then its write-back."""
        views, rows = self._views(plan)
        b = len(plan.events)
        if b == 0:
            self._begin_write(plan, None, None, None).finish()
            return torch.zeros(0, 1 + self.model.memory_dim, dtype=torch.float64, device=self.ctx.device)
        inputs = self._inputs(plan, rows)
        h = self._root_embeddings(plan, inputs, views)[:b]
        self._begin_write(plan, inputs, views, None).finish()
        ids = torch.from_numpy(plan.events).to(h.device, torch.float64)[:, None]
        return torch.cat([ids, h.double()], dim=1)

    def _evaluate_set(self, evaluation: EvaluationSet, split: str, score: bool = True) -> SplitFigures | None:
        """Every positive of ``split`` and its K negatives scored batch by batch (memory updated by each
        batch's events after scoring it, as in training), gathered from every rank. ``score=False``: the
        same passes for the memory they leave, no figures (None)."""
        negatives = evaluation.get(split, "negatives")
        self.planner.candidates = {split: (evaluation.get(split, "negative_src"), negatives)}
        first = self.stream.ranges[split][0]
        scores = np.full((len(negatives), 1 + negatives.shape[1]), np.nan)
        try:
            for plan in Prefetcher(self.planner, split, self.options.batch_size, self.options.prefetch):
                logits = self._score_candidates(plan)
                if score:
                    rows = self._gather_candidate_scores(plan, logits)
                    scores[rows[:, 0].astype(np.int64) - first] = rows[:, 1:]
        finally:
            self.planner.candidates = {}
        if not score:
            return None
        negative = np.where(negatives >= 0, scores[:, 1:], np.nan)
        return Evaluator(evaluation).score(split, scores[:, 0], negative)

    def _score_candidates(self, plan: BatchPlan) -> torch.Tensor:
        """(b, 1 + K) logits of this rank's events: the positive, then each negative pair. The model's own
        parts — node views, :meth:`~dgbench.models.temporal.TemporalModel.embed` per root, the edge
        predictor — run over the roots [src, dst, negatives...] once, so the K negatives cost K roots each
        (``forward`` would embed [src, dst, negative] again for every negative), and a source shared by the
        candidates is projected once (:meth:`~dgbench.models.temporal.EdgePredictor.score_blocks`); then the
        batch's write-back. TGN's views stay one row per distinct (vertex, time) pair (:class:`PairViews`), each
        attention block gathering its own (:meth:`~dgbench.models.temporal.TGN.embed`)."""
        views, rows = self._paired_views(plan, keep_pairs=self.model.reads_pair_views)
        b, k = len(plan.events), plan.candidates
        if b == 0:
            self._begin_write(plan, None, None, None).finish()
            return torch.zeros(0, 1 + k, dtype=torch.float64, device=self.ctx.device)
        inputs = self._inputs(plan, rows)
        h = self._root_embeddings(plan, inputs, views)
        if plan.fixed_source:  # roots [src, dst, K·dst']: every candidate's source is the event's
            sources, destinations = h[:b], h[b:]
        else:  # roots [src, dst, K·src', K·dst']
            sources = torch.cat([h[:b], h[2 * b:(2 + k) * b]])
            destinations = torch.cat([h[b:2 * b], h[(2 + k) * b:]])
        logits = self.model.predictor.score_blocks(sources, destinations, b)
        self._begin_write(plan, inputs, views, None).finish()
        return logits.double()

    def _gather_candidate_scores(self, plan: BatchPlan, logits: torch.Tensor) -> np.ndarray:
        """(global event id, positive logit, K negative logits) of the whole batch on every rank."""
        local = torch.cat([torch.from_numpy(plan.events).to(logits.device, torch.float64)[:, None], logits], dim=1)
        return self.ctx.comm.all_gather_uneven(local, tag="eval_scores").cpu().numpy()

    def _evaluate_split(self, split: str, score: bool = True) -> dict[str, float] | None:
        """Without evaluation sets (tests of the loop alone): each batch's random negatives, 1:1.
        ``score=False``: the same passes for the memory they leave, no figures (None)."""
        gathered = []
        for plan in Prefetcher(self.planner, split, self.options.batch_size, self.options.prefetch):
            _, outputs = self._step(plan, train=False, timer=None)
            if score:
                gathered.append(self._gather_scores(plan, outputs))
        if not score:
            return None
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
        """Seconds and bytes of N&M dispatch / aggregation, DepComm's view gradients and the gradient
        all-reduce from the tag counters; ``*_row_bytes`` leave out the ids and times sent with rows."""
        out: dict[str, float] = defaultdict(float)
        for tag, s in by_tag.items():
            if tag.endswith(BACKWARD_SUFFIX):
                group = "nm_gradient"
            elif tag.startswith(DISPATCH_TAG):
                group = "nm_dispatch"
            elif tag.startswith(AGGREGATE_TAG):
                group = "nm_aggregate"
            else:
                group = "grad_allreduce" if tag == GRAD_TAG else None
            if group is None:
                continue
            out[f"{group}_s"] += s["seconds"]
            out[f"{group}_bytes"] += s["bytes"]
            if not tag.endswith((ID_SUFFIX, TIME_SUFFIX)):
                out[f"{group}_row_bytes"] += s["bytes"]
        return dict(out)
