"""`dgbench run` for edge-stream stores: build the vertex partition, start the ranks, write the record.

The partition (Sven: range / interval / Re-FlexBiCut, Alg. 3) is computed once in the launching
process from the training events and handed to every rank, so all ranks agree on the owners.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from dgbench.dist import DistContext, default_backend
from dgbench.launch import launch
from dgbench.errors import DgbenchError
from dgbench.models.temporal import build_temporal_model
from dgbench.records import build_record, dataset_entry, utc_now
from dgbench.registry import MODELS, SCHEMES, lookup
from dgbench.store import STREAM, open_store
from trainers.config import RunConfig
from trainers.continuous import sven_core
from trainers.continuous.data import EventStream
from trainers.continuous.loop import ContinuousTrainer, LoopOptions
from trainers.continuous.sampler import TemporalSampler
from trainers.epochs import merge_rank_epochs, run_epochs

PARTITIONERS = {"range": sven_core.range_partition, "interval": sven_core.interval_partition,
                "reflexbicut": sven_core.re_flexbicut}


def vertex_partition(stream: EventStream, method: str, parts: int, batch_size: int) -> np.ndarray:
    """Owner rank of every vertex, computed from the training events."""
    a, b = stream.ranges["train"]
    src, dst = stream.src[a:b], stream.dst[a:b]
    if method == "reflexbicut":
        return sven_core.re_flexbicut(src, dst, stream.num_nodes, parts, batch_size=batch_size)
    return PARTITIONERS[method](src, dst, stream.num_nodes, parts)


def partition_for(config: RunConfig, stream: EventStream, parts: int) -> tuple[str, np.ndarray]:
    """sven uses ``config.partition``; depcomm (and the bookkeeping of the others) uses ranges."""
    method = config.partition if config.scheme == "sven" else "range"
    return method, vertex_partition(stream, method, parts, config.batch_size)


def build_trainer(ctx: DistContext, config: RunConfig, owner: np.ndarray,
                  max_events: int | None = None) -> ContinuousTrainer:
    """Stream, identically seeded model and the trainer of one rank."""
    torch.manual_seed(config.seed)  # identical initial weights on every rank
    stream = EventStream.from_store(open_store(config.dataset, STREAM), max_events)
    gap_mean, gap_std = TemporalSampler(stream.src, stream.dst, stream.t, stream.num_nodes).gap_statistics()
    model = build_temporal_model(config.model, config.memory_dim, stream.edge_dim, time_shift=gap_mean,
                                 time_scale=gap_std)
    options = LoopOptions(scheme=config.scheme, batch_size=config.batch_size, neighbors=config.neighbors,
                          sampler=config.sampler, lr=config.lr, seed=config.seed,
                          microbatches=config.microbatches if config.scheme == "sven" else 1,
                          async_allreduce=config.async_allreduce and config.scheme == "sven",
                          prefetch=int(config.extra.get("prefetch", 2)))
    return ContinuousTrainer(ctx, stream, model, owner, options)


def _train_rank(ctx: DistContext, config: RunConfig, owner: np.ndarray, max_events: int | None) -> dict[str, Any]:
    trainer = build_trainer(ctx, config, owner, max_events)
    model = trainer.model
    figures = run_epochs(ctx, epochs=config.epochs, train_epoch=trainer.train_epoch, evaluate=trainer.evaluate)
    train_batches = len(trainer.planner.batch_bounds("train", config.batch_size))
    for f in figures:
        f.update(trainer.comm_breakdown(f["comm_by_tag"]))
        f["iterations"] = train_batches
    return {"figures": figures, "counters": trainer.counters.summary(), "microbatches": trainer.microbatch_choice,
            "losses": trainer.losses, "state_row_width": model.layout.width,
            "parameters": sum(p.numel() for p in model.parameters())}


def train_on_rank(ctx: DistContext, config: RunConfig, owner: np.ndarray, max_events: int | None) -> dict[str, Any]:
    """This rank's part of a run: per-epoch figures, Eq. 1/7-9 counters, losses, chosen micro-batches.
    ``config.extra["dtype"]`` may ask for float64 (exactness tests); ``extra["prefetch"]`` the queue depth."""
    # float64 only for exactness checks: float32 noise in near-zero gradients is amplified by Adam.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, config.extra.get("dtype", "float32")))
    try:
        return _train_rank(ctx, config, owner, max_events)
    finally:
        torch.set_default_dtype(previous)


def _check(config: RunConfig) -> None:
    lookup(SCHEMES, config.scheme, "continuous")
    lookup(MODELS, config.model, "continuous")
    if config.memory_dim % 2:
        raise DgbenchError(f"--memory-dim must be even (two attention heads), got {config.memory_dim}")
    if config.scheme == "single" and config.nproc > 1:
        raise DgbenchError("scheme 'single' runs one process; use --nproc 1")
    if config.async_allreduce and config.scheme != "sven":
        raise DgbenchError(f"--async-allreduce is Sven's (Eq. 13); scheme '{config.scheme}' all-reduces "
                           f"synchronously, so the record would claim a setup that did not run")


def run_experiment(config: RunConfig, max_events: int | None = None) -> dict[str, Any]:
    """Train and evaluate; returns the result record (not yet written)."""
    try:
        _check(config)
    except KeyError as exc:
        raise DgbenchError(str(exc.args[0])) from exc
    started = utc_now()
    store = open_store(config.dataset, STREAM)
    stream = EventStream.from_store(store, max_events)
    parts = int(os.environ.get("WORLD_SIZE", config.nproc))  # under torchrun the launcher decides
    method, owner = partition_for(config, stream, parts)
    per_rank = launch(train_on_rank, config.nproc, (config, owner, max_events),
                      backend=config.resolved_backend(), timeout_s=config.timeout_s)
    return _record(config, store, stream, method, owner, per_rank, started, max_events)


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


def _record(config: RunConfig, store, stream: EventStream, method: str, owner: np.ndarray,
            per_rank: list[dict[str, Any]], started: str, max_events: int | None) -> dict[str, Any]:
    epochs = merge_rank_epochs([r["figures"] for r in per_rank])
    for e, entry in enumerate(epochs):
        rank_figures = [r["figures"][e] for r in per_rank]
        entry["per_iteration"] = _per_iteration(rank_figures)
        entry["events_per_s"] = entry["throughput"]
        for key in ("nm_dispatch_bytes", "nm_aggregate_bytes", "grad_allreduce_bytes", "nm_dispatch_row_bytes",
                    "nm_aggregate_row_bytes"):
            entry[key] = sum(f.get(key, 0.0) for f in rank_figures)
    a, b = stream.ranges["train"]
    world = len(per_rank)
    balance = sven_core.communication_matrix(stream.src[a:b], stream.dst[a:b], owner, world, config.batch_size)
    counters = [r["counters"] for r in per_rank]
    last = epochs[-1]
    sent = [r["figures"][-1].get("nm_dispatch_bytes", 0.0) + r["figures"][-1].get("nm_aggregate_bytes", 0.0)
            for r in per_rank]
    extra = {"eta1": float(np.mean([c["eta1"] for c in counters])),
             "eta2": float(np.mean([c["eta2"] for c in counters])),
             "per_rank_counters": counters,
             "predicted_bytes": {"dispatch": sum(c["predicted_dispatch_bytes"] for c in counters),
                                 "aggregation": sum(c["predicted_aggregation_bytes"] for c in counters)},
             "measured_row_bytes": {"dispatch": last["nm_dispatch_row_bytes"],
                                    "aggregation": last["nm_aggregate_row_bytes"]},
             "partition": method, "balance": {**balance.summary(), "per_rank": balance.per_rank.tolist(),
                                              # next to the Eq. 5 model: what each rank sent in the last epoch
                                              "measured_nm_sent_bytes_per_rank": sent,
                                              "measured_max_nm_sent_bytes": max(sent),
                                              "residual": balance.residual.tolist()},
             "microbatches": per_rank[0]["microbatches"], "state_row_width": per_rank[0]["state_row_width"],
             "parameters": per_rank[0]["parameters"], "events_used": len(stream.src),
             "batch_losses_last_epoch": per_rank[0]["losses"]}
    hyper = {k: getattr(config, k) for k in ("epochs", "seed", "lr", "batch_size", "neighbors", "sampler",
                                             "memory_dim", "async_allreduce")}
    # what ran, not the option's default: only sven partitions by --partition and pipelines micro-batches
    hyper.update(partition=method, microbatches=config.microbatches if config.scheme == "sven" else 1)
    if max_events is not None:
        hyper["max_events"] = max_events
    backend = config.resolved_backend() or default_backend()  # --device cpu is gloo even where CUDA is
    return build_record(family="continuous", task="link_prediction", scheme=config.scheme, model=config.model,
                        dataset=dataset_entry(store), hyperparameters=hyper, world_size=world,
                        backend=backend, device=torch.device("cuda" if backend == "nccl" else "cpu"),
                        epochs=epochs, final_metrics=last["metrics"], started_at=started, extra=extra)
