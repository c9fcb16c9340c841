"""The continuous-time family's hooks for the experiment driver: its protocol options, one rank's
training, and the record.

Protocol (TGL, Zhou et al. VLDB'22; Sven §2): chronological batches of ``batch_size`` events, one random
negative per positive in training, ``neighbors`` temporal neighbours from the ``sampler``, node memory of
``memory_dim``, memory carried from training through validation into test (trainers/continuous/loop.py);
validation and test rank each event among the K negatives of the run's fixed evaluation sets
(``--negatives``/``--extra-negatives``/``--eval-negatives``, dgbench/tasks, docs/tasks.md). Baseline models
(``edgebank``) run instead of the loop. ``--protocol batch`` queries each distinct vertex once per batch at
the batch's start instead (PyG / TGN-original; docs/continuous-training.md, section "Protocols").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dgbench.dist import DistContext, default_backend
from dgbench.errors import DgbenchError
from dgbench.models.temporal import TemporalModel
from dgbench.options import Options, option
from dgbench.record_types import ContinuousExtra
from dgbench.records import build_record, dataset_entry
from dgbench.store import STREAM, EdgeStreamStore, open_store
from dgbench.tasks.baselines import Baseline, evaluate_baseline
from dgbench.tasks.evalset import EvaluationSet
from dgbench.tasks import NODE_CLASSIFICATION
from dgbench.tasks.options import (check_task, decoder_epochs_option, decoder_lr_option, eval_negatives_option,
                                   evaluation_block, evaluation_sets, extra_negatives_option, negatives_option,
                                   record_task, task_option)
from dgbench.trainers.continuous.data import BATCH, PROTOCOLS, EventStream, StreamProblem, gap_statistics
from dgbench.trainers.continuous.ring import RecentRing
from dgbench.trainers.continuous.loop import BatchCounters, ContinuousTrainer, LoopOptions
from dgbench.trainers.continuous.sampler import STRATEGIES
from dgbench.trainers.contract import ContinuousScheme, Partition
from dgbench.trainers.epochs import Selection, check_eval_every, merge_rank_epochs, model_selection_block, run_epochs
from dgbench.trainers.experiment import EVALUATION_INPUT

if TYPE_CHECKING:
    from dgbench.trainers.experiment import ResolvedRun

TASK = "link_prediction"
DEFAULT_STREAM_BUDGET_GIB = 4.0
# peak bytes per event of an in-memory stream: src, dst, t (8 each) and the T-CSR's two adjacency entries
# (key, neighbour, event, time: 8 each) stay resident, 88 bytes; building the T-CSR (its sort and
# concatenations) holds as much again (measured: 174-177 bytes per event at 5M and 20M events, docs/
# continuous-training.md); beside 4 bytes per edge-feature value
IN_MEMORY_BYTES_PER_EVENT = 2 * (3 * 8 + 2 * 4 * 8)


@dataclass(frozen=True)
class TaskOptions(Options):
    """The continuous-time protocol's options."""

    batch_size: int = option(600, "Events per batch (TGL / Sven Table 4).", positive=True)
    neighbors: int = option(10, "Temporal neighbours sampled per root.", positive=True)
    sampler: str = option("recent", "Temporal neighbour sampler.", choices=tuple(STRATEGIES))
    sampler_decay: float = option(0.0, "--sampler sis: weight exp(-decay Δt) per store time unit "
                                       "(T-GCN §3.2); 0: uniform.", minimum=0.0)
    memory_dim: int = option(100, "Node memory width (even: two attention heads).", positive=True)
    protocol: str = option("tgl", "tgl: a query per event at its time (TGL); batch: each vertex once per batch from "
                                  "earlier batches (PyG's TGN; docs/continuous-training.md).", choices=PROTOCOLS)
    max_events: int | None = option(None, "Train on the first N events only (split in the store's proportions).",
                                    positive=True)
    stream_budget: float = option(DEFAULT_STREAM_BUDGET_GIB, "GiB the stream may hold in memory; above it, read "
                                  "chunk by chunk (docs/continuous-training.md); 0: always.",
                                  minimum=0.0)
    max_batches: int | None = option(None, "Stop each pass after N batches: a memory probe; fits no "
                                           "board track.", positive=True)
    negatives: str = negatives_option()
    extra_negatives: str | None = extra_negatives_option()
    eval_negatives: int = eval_negatives_option()
    task: str = task_option()
    decoder_epochs: int = decoder_epochs_option()
    decoder_lr: float = decoder_lr_option()


def open_stream(path: Path, fingerprint: str | None) -> EdgeStreamStore:
    """The stream the job started on (a store replaced since is refused)."""
    store = open_store(path, STREAM, fingerprint=fingerprint)
    assert isinstance(store, EdgeStreamStore)
    return store


def check(run: ResolvedRun) -> None:
    task = run.task
    assert isinstance(task, TaskOptions)
    if task.memory_dim % 2:
        raise DgbenchError(f"--memory-dim must be even (two attention heads), got {task.memory_dim}")
    if task.sampler_decay and task.sampler != "sis":
        raise DgbenchError(f"--sampler-decay {task.sampler_decay}: time-decay weights are the sis sampler's "
                           f"(--sampler sis), not {task.sampler}'s")
    check_eval_every(run.config.eval_every, task.task)
    check_task(task.task, task.extra_negatives)
    if task.protocol == BATCH:
        _check_batch_protocol(run)
    if task.task == NODE_CLASSIFICATION:  # the decoder reads a trained model's embeddings (dgbench/tasks/node.py)
        probe = _probe(run, 0)
        if isinstance(probe, Baseline) or type(run.scheme).train_rank is not ContinuousScheme.train_rank:
            raise DgbenchError(f"--task {task.task}: {run.scheme.name}/{run.model.name} has no embeddings "
                               f"to decode (baselines and schemes with their own driver score link prediction only)")
    if streams_from_store(run):
        _check_streamed(run)
    _evaluation(run)  # written beside the store before any rank starts (dgbench/tasks/evalset.py)


def in_memory_bytes(store: EdgeStreamStore, max_events: int | None) -> int:
    """What the stream would hold resident in memory (``IN_MEMORY_BYTES_PER_EVENT`` and its features)."""
    events = store.num_events if max_events is None else min(max_events, store.num_events)
    edge_dim = int(store.array("edge_features").shape[1]) if store.has("edge_features") else 0
    return events * (IN_MEMORY_BYTES_PER_EVENT + 4 * edge_dim)


def streams_from_store(run: ResolvedRun) -> bool:
    """Whether the run reads its stream chunk by chunk: the in-memory stream would exceed --stream-budget."""
    task = run.task
    assert isinstance(task, TaskOptions)
    return in_memory_bytes(_store(run), task.max_events) > task.stream_budget * (1 << 30)


def _check_streamed(run: ResolvedRun) -> None:
    """A streamed stream is refused where a scheme, sampler or task reads the whole stream at once."""
    task = run.task
    assert isinstance(task, TaskOptions)
    why = f"the stream exceeds --stream-budget {task.stream_budget:g} GiB and is read chunk by chunk"
    scheme = run.scheme
    assert isinstance(scheme, ContinuousScheme)
    refusal = scheme.streamed_refusal(run.scheme_options)
    if refusal:
        raise DgbenchError(f"--scheme {scheme.name}: {why}; {refusal}, raise --stream-budget")
    if task.sampler != "recent":
        raise DgbenchError(f"--sampler {task.sampler}: {why}; only --sampler recent keeps bounded state "
                           f"(docs/continuous-training.md), or raise --stream-budget")


def _check_batch_protocol(run: ResolvedRun) -> None:
    """``--protocol batch`` is refused where the scheme or the model defines its own read rule."""
    scheme = run.scheme
    assert isinstance(scheme, ContinuousScheme)
    if scheme.batch_protocol_refusal:
        raise DgbenchError(f"--protocol batch: scheme '{scheme.name}' cannot run it: {scheme.batch_protocol_refusal}")
    refusal = getattr(_probe(run, 0), "batch_protocol_refusal", "")
    if refusal:
        raise DgbenchError(f"--protocol batch: model '{run.model.name}' cannot run it: {refusal}")


def _evaluation(run: ResolvedRun) -> list[EvaluationSet]:
    task = run.task
    assert isinstance(task, TaskOptions)
    if task.max_batches is not None:  # a bounded probe scores each pass's random negatives (loop.py)
        return []
    return run.once(EVALUATION_INPUT, lambda: evaluation_sets(run.config.dataset, task.negatives, task.extra_negatives,
                                                          task.eval_negatives, task.max_events, task.task))


def _stream(run: ResolvedRun) -> EventStream:
    """The run's events (``--max-events`` of them), loaded once per process, or read chunk by chunk from
    the store when they exceed ``--stream-budget``."""
    task = run.task
    assert isinstance(task, TaskOptions)
    load = EventStream.streamed if streams_from_store(run) else EventStream.from_store
    return run.once("stream", lambda: load(_store(run), task.max_events))


def _store(run: ResolvedRun) -> EdgeStreamStore:
    return run.once("store", lambda: open_stream(run.config.dataset, run.fingerprint))


def _probe(run: ResolvedRun, edge_dim: int) -> Any:
    """An untrained model of the run, for what it declares (neighbours, mail, baseline), built once per process."""
    task = run.task
    assert isinstance(task, TaskOptions)
    return run.once(f"probe:{edge_dim}", lambda: run.model.build(run.model_options, memory_dim=task.memory_dim,
                                                                 edge_dim=edge_dim))


def partition_problem(run: ResolvedRun) -> StreamProblem:
    """The stream and the protocol a partition step pre-samples with (what the model samples and mails)."""
    task = run.task
    assert isinstance(task, TaskOptions)
    stream = _stream(run)
    probe = _probe(run, stream.edge_dim)
    dtype = getattr(torch, run.config.extra.get("dtype", "float32"))
    return StreamProblem(stream, task.batch_size, run.config.seed, neighbors=task.neighbors, sampler=task.sampler,
                         sampler_decay=task.sampler_decay,
                         fetch_neighbors=bool(getattr(probe, "uses_neighbors", False)),
                         deliver_to_neighbors=bool(getattr(probe, "delivers_to_neighbors", False)),
                         memory_dim=task.memory_dim, bytes_per_value=torch.finfo(dtype).bits // 8,
                         protocol=task.protocol)


def build_trainer(ctx: DistContext, run: ResolvedRun, partition: Partition,
                  problem: StreamProblem) -> ContinuousTrainer:
    """Identically seeded model and the trainer of one rank."""
    task, scheme = run.task, run.scheme
    assert isinstance(task, TaskOptions) and isinstance(scheme, ContinuousScheme)
    torch.manual_seed(run.config.seed)  # identical initial weights on every rank
    stream = problem.stream
    gap_mean, gap_std = gap_statistics(stream)
    model = run.model.build(run.model_options, memory_dim=task.memory_dim, edge_dim=stream.edge_dim,
                            time_shift=gap_mean, time_scale=gap_std)
    assert isinstance(model, TemporalModel)
    options = LoopOptions(batch_size=task.batch_size, neighbors=task.neighbors, sampler=task.sampler,
                          sampler_decay=task.sampler_decay, protocol=task.protocol,
                          lr=run.config.lr, seed=run.config.seed, prefetch=int(run.config.extra.get("prefetch", 2)),
                          max_batches=task.max_batches)
    trainer = ContinuousTrainer(ctx, stream, model, scheme, run.scheme_options, partition, options)
    trainer.evaluation = _evaluation(run)  # validation and test: the run's fixed evaluation sets
    if task.task == NODE_CLASSIFICATION:
        from dgbench.tasks.node import NodeClassification
        trainer.node_task = NodeClassification.for_run(trainer.evaluation[0], stream.num_nodes, task, run.config,
                                                       spill_dir=_spill_dir(run) if stream.is_streamed else None)
    return trainer


def _spill_dir(run: ResolvedRun) -> Path:
    """Where a streamed run's node-classification embeddings go while the decoder reads them: beside its record."""
    out = Path(run.config.out)
    folder = out.parent if out.suffix == ".json" else out
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _baseline_rank(ctx: DistContext, run: ResolvedRun, partition: Partition, baseline: Baseline) -> dict[str, Any]:
    """A baseline (dgbench/tasks/baselines.py) reads the store and scores the evaluation sets; it trains
    nothing (work 0: no throughput or scaling rows) and every rank computes the same."""
    task = run.task
    assert isinstance(task, TaskOptions)
    baseline.index(run.config.dataset, task.max_events)
    sets = _evaluation(run)
    selection = Selection(run.config.eval_every, validate=lambda: evaluate_baseline(baseline, sets, ("val",)),
                          test=lambda: evaluate_baseline(baseline, sets, ("test",)),
                          keep=lambda: None, restore=lambda kept: None)  # a baseline has no trained state
    figures = run_epochs(ctx, epochs=run.config.epochs, train_epoch=lambda epoch, timer: (0.0, 0),
                         evaluate=lambda: evaluate_baseline(baseline, sets),
                         label=f"{run.scheme.name}/{run.model.name}", unit="events", selection=selection)
    ctx.comm.barrier()  # no collective keeps ranks in step: none may leave while another still reads the store
    for f in figures:
        f["iterations"] = 0
    return {"figures": figures, "counters": BatchCounters().summary(), "microbatches": {}, "losses": [],
            "state_row_width": 0, "parameters": 0, "partition": partition if ctx.is_main else None,
            "baseline": baseline.describe(), "selection": selection.summary() if selection.active else None}


def _train(ctx: DistContext, run: ResolvedRun, partition: Partition, problem: StreamProblem) -> dict[str, Any]:
    scheme = run.scheme
    assert isinstance(scheme, ContinuousScheme)
    own = scheme.train_rank(ctx, run, partition, problem)  # a scheme with its own driver (tgcn)
    if own is not None:
        return own
    task = run.task
    assert isinstance(task, TaskOptions)
    probe = _probe(run, problem.stream.edge_dim)
    if isinstance(probe, Baseline):
        return _baseline_rank(ctx, run, partition, probe)
    trainer = build_trainer(ctx, run, partition, problem)
    selection = Selection(run.config.eval_every, validate=lambda: trainer.evaluate(("val",)),
                          test=lambda: trainer.evaluate(("test",)), keep=trainer.scoring_state,
                          restore=trainer.restore_scoring_state)
    figures = run_epochs(ctx, epochs=run.config.epochs, train_epoch=trainer.train_epoch, evaluate=trainer.evaluate,
                         label=f"{run.scheme.name}/{run.model.name}", unit="events", selection=selection)
    train_batches = len(trainer.planner.batch_bounds("train", trainer.options.batch_size))
    for f in figures:
        f.update(trainer.comm_breakdown(f["comm_by_tag"]))
        f["iterations"] = train_batches
    return {"figures": figures, "counters": trainer.counters.summary(), "microbatches": trainer.microbatch_choice,
            "losses": trainer.losses, "state_row_width": trainer.model.layout.width,
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "partition": partition if ctx.is_main else None,
            "selection": selection.summary() if selection.active else None,
            "stream_source": stream_source(trainer)}


def stream_source(trainer: ContinuousTrainer) -> dict[str, Any]:
    """Where this rank's events came from: memory or the store chunk by chunk (bytes decoded, chunk
    reads), and the bytes of its sampler's per-vertex rings when bounded."""
    stream, sampler = trainer.stream, trainer.planner.sampler
    out: dict[str, Any] = {"source": stream.source}
    if stream.reads is not None:
        out.update(bytes_read=stream.reads.bytes_read, chunk_reads=stream.reads.chunk_reads)
    if isinstance(sampler, RecentRing):
        out["sampler_state_bytes"] = sampler.nbytes
    return out


def _per_rank_reads(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Each rank's store bytes decoded, where ranks read their streams chunk by chunk."""
    sources = [r.get("stream_source") or {} for r in per_rank]
    if len(sources) < 2 or not all("bytes_read" in s for s in sources):
        return {}
    return {"bytes_read_per_rank": [s["bytes_read"] for s in sources]}


def train_rank(ctx: DistContext, run: ResolvedRun, partition: Partition, problem: StreamProblem) -> dict[str, Any]:
    """This rank's part of a run: per-epoch figures, Eq. 1/7-9 counters, losses, chosen micro-batches.
    ``config.extra["dtype"]`` may ask for float64 (exactness tests); ``extra["prefetch"]`` the queue depth."""
    # float64 only for exactness checks: float32 noise in near-zero gradients is amplified by Adam.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, run.config.extra.get("dtype", "float32")))
    try:
        return _train(ctx, run, partition, problem)
    finally:
        torch.set_default_dtype(previous)


def _per_iteration(rank_figures: list[dict[str, Any]]) -> dict[str, float]:
    """Per-iteration seconds of the slowest rank split into N&M communication, all-reduce and compute."""
    slowest = max(rank_figures, key=lambda f: f["time_s"])
    n = max(slowest["iterations"], 1)
    nm = slowest.get("nm_dispatch_s", 0.0) + slowest.get("nm_aggregate_s", 0.0)
    grad = slowest.get("grad_allreduce_s", 0.0)
    # row-count exchanges (where a rank waits for slower ones) and other gathers
    other_comm = max(0.0, slowest["communication_s"] - nm - grad)
    return {"iteration_s": slowest["time_s"] / n, "nm_communication_s": nm / n, "grad_allreduce_s": grad / n,
            "other_communication_s": other_comm / n,
            "compute_s": max(0.0, slowest["time_s"] - nm - grad - other_comm) / n}


def best_validation(epochs: list[dict[str, Any]], selection: dict[str, Any] | None = None) -> dict[str, Any]:
    """The epoch with the best validation AP and its test metrics (Sven §5.7 reports the best-validation
    model; the record's final metrics stay the last epoch's). Under ``--eval-every N > 1`` (``selection``):
    that epoch and the test scored once on its restored state, which are also the final metrics."""
    if selection:
        final = selection["final_metrics"]
        return {"epoch": selection["best_epoch"], "val": final.get("val", {}), "test": final.get("test", {})}
    scored = [(e["metrics"].get("val", {}).get("ap", float("nan")), i) for i, e in enumerate(epochs)]
    scored = [(ap, i) for ap, i in scored if ap == ap]  # not NaN
    if not scored:
        return {}
    _, best = max(scored)
    return {"epoch": best, "val": epochs[best]["metrics"]["val"], "test": epochs[best]["metrics"].get("test", {})}


def record(run: ResolvedRun, per_rank: list[dict[str, Any]], started: str) -> dict[str, Any]:
    task = run.task
    assert isinstance(task, TaskOptions)
    store, stream = _store(run), _stream(run)
    epochs = merge_rank_epochs([r["figures"] for r in per_rank])
    for e, entry in enumerate(epochs):
        rank_figures = [r["figures"][e] for r in per_rank]
        entry["per_iteration"] = _per_iteration(rank_figures)
        entry["events_per_s"] = entry["throughput"]
        for key in ("nm_dispatch_bytes", "nm_aggregate_bytes", "grad_allreduce_bytes", "nm_dispatch_row_bytes",
                    "nm_aggregate_row_bytes", "nm_gradient_bytes"):
            entry[key] = sum(f.get(key, 0.0) for f in rank_figures)
    world = len(per_rank)
    partition: Partition = per_rank[0]["partition"]
    counters = [r["counters"] for r in per_rank]
    last = epochs[-1]
    sent = [r["figures"][-1].get("nm_dispatch_bytes", 0.0) + r["figures"][-1].get("nm_aggregate_bytes", 0.0)
            for r in per_rank]
    report = partition.report
    paper_eta = report.get("paper_eta", {})
    extra = {"eta1": paper_eta.get("eta1", float(np.mean([c["eta1"] for c in counters]))),  # Eq. 1, paper form
             "eta2": paper_eta.get("eta2", float(np.mean([c["eta2"] for c in counters]))),
             "eta_per_rank_remote": {"eta1": [c["eta1_remote"] for c in counters],
                                     "eta2": [c["eta2_remote"] for c in counters]},
             "events_per_rank": [c["events"] for c in counters],
             "per_rank_counters": counters,
             # the per-rank form of Eq. 7-9 (this implementation's mechanics), beside the counted bytes
             "predicted_bytes": {"dispatch": sum(c["predicted_dispatch_bytes"] for c in counters),
                                 "aggregation": sum(c["predicted_aggregation_bytes"] for c in counters)},
             "measured_row_bytes": {"dispatch": last["nm_dispatch_row_bytes"],
                                    "aggregation": last["nm_aggregate_row_bytes"],
                                    "view_gradients": last.get("nm_gradient_bytes", 0.0)},
             # Eq. 1 and Eq. 7-9 exactly as printed, on the pre-sampled training batches (one epoch)
             "paper_eta": paper_eta, "paper_volume_bytes": report.get("paper_volume_bytes", {}),
             "partition": partition.method,
             "balance": {**report.get("balance", {}),
                         # next to the Eq. 5 model: what each rank sent last epoch
                         "measured_nm_sent_bytes_per_rank": sent, "measured_max_nm_sent_bytes": max(sent)},
             "best_validation": best_validation(epochs, per_rank[0].get("selection")),
             "microbatches": per_rank[0]["microbatches"], "state_row_width": per_rank[0]["state_row_width"],
             "parameters": per_rank[0]["parameters"], "events_used": stream.num_events,
             "stream_source": {**(per_rank[0].get("stream_source") or {"source": stream.source}),
                               **_per_rank_reads(per_rank),
                               "budget_bytes": int(task.stream_budget * (1 << 30)),
                               "in_memory_bytes": in_memory_bytes(store, task.max_events),
                               **({"max_batches": task.max_batches} if task.max_batches is not None else {})},
             "batch_losses_last_epoch": per_rank[0]["losses"],
             **({"baseline": per_rank[0]["baseline"]} if "baseline" in per_rank[0] else {}),
             **run.scheme.record_extras(run.scheme_options, partition)}
    final_metrics = last["metrics"]
    if per_rank[0].get("selection"):  # --eval-every N > 1: best validation, test once on its state
        extra["model_selection"], final_metrics = model_selection_block(per_rank[0]["selection"])
    backend = run.config.resolved_backend() or default_backend()  # --device cpu is gloo even where CUDA is
    return build_record(family="continuous", task=record_task(task.task), scheme=run.scheme.name,
                        model=run.model.name,
                        dataset=dataset_entry(store), hyperparameters=run.hyperparameters(), world_size=world,
                        backend=backend, device=torch.device("cuda" if backend == "nccl" else "cpu"),
                        epochs=epochs, final_metrics=final_metrics, started_at=started,
                        extra=ContinuousExtra.from_json(extra),
                        # the sets every figure above scored (none under --max-batches)
                        evaluation=evaluation_block(sets) if (sets := _evaluation(run)) else None)
