"""`dgbench run` for snapshot stores: start the ranks, train, and assemble the result record."""
from __future__ import annotations

from typing import Any

import torch

from dgbench.dist import DistContext
from dgbench.launch import launch
from dgbench.errors import DgbenchError
from dgbench.records import build_record, dataset_entry, utc_now
from dgbench.registry import MODELS, SCHEMES, lookup
from dgbench.store import SNAPSHOTS, open_store
from trainers.config import RunConfig
from trainers.discrete.data import DiscreteData
from trainers.discrete.loop import DiscreteTrainer
from trainers.discrete.placement import streams_snapshots
from trainers.epochs import merge_rank_epochs, run_epochs

FAMILY = "discrete"
TASK = "link_prediction"
ONE_PROCESS_SCHEMES = ("single", "checkpoint")
HYPERPARAMETERS = ("epochs", "seed", "lr", "hidden", "blocks", "transfer", "window", "theta", "partitioner")


def _entry(table: dict, name: str):
    try:
        return lookup(table, name, FAMILY)
    except KeyError as exc:
        raise DgbenchError(str(exc.args[0])) from exc


def build_rank(ctx: DistContext, config: RunConfig) -> DiscreteTrainer:
    """Data, placement, identically seeded model and optimiser of one rank."""
    data = DiscreteData(config.dataset, theta=config.theta, seed=config.seed)
    placement = _entry(SCHEMES, config.scheme).factory(ctx, data, config)
    torch.manual_seed(config.seed)  # same initial parameters on every rank and in every scheme
    model = _entry(MODELS, config.model).factory(in_features=data.in_features, hidden=config.hidden,
                                                          window=config.window).to(ctx.device)
    return DiscreteTrainer(ctx, data, placement, model, lr=config.lr)


def train_rank(ctx: DistContext, config: RunConfig) -> dict[str, Any]:
    """Everything one rank does; module level so spawned ranks can run it."""
    trainer = build_rank(ctx, config)
    figures = run_epochs(ctx, epochs=config.epochs, train_epoch=trainer.train_epoch, evaluate=trainer.evaluate)
    placement = trainer.placement
    extra = {**placement.extra(), **trainer.extra()}
    return {"epochs": figures, "extra": extra, "device": str(ctx.device), "backend": ctx.backend,
            "world_size": ctx.world_size}


def train_many(ctx: DistContext, configs: list[RunConfig]) -> list[dict[str, Any]]:
    """Several runs in one launch (same ranks): saves the process start-up per run."""
    return [train_rank(ctx, config) for config in configs]


def run_experiments(configs: list[RunConfig]) -> list[dict[str, Any]]:
    """Records of several runs sharing ``nproc``/backend/timeout, trained in one launch."""
    from dgbench.registry import load_plugins
    load_plugins()
    if len({(c.nproc, c.backend, c.device, c.timeout_s) for c in configs}) > 1:
        raise DgbenchError("runs launched together need the same nproc, backend, device and timeout")
    for config in configs:
        _entry(SCHEMES, config.scheme)
        _entry(MODELS, config.model)
        if config.scheme in ONE_PROCESS_SCHEMES and config.nproc > 1:
            raise DgbenchError(f"scheme '{config.scheme}' runs on one process (--nproc {config.nproc}); "
                               f"use 'snapshot' or 'vertex' to distribute")
        problem = _inapplicable_option(config)
        if problem:
            raise DgbenchError(problem)
    stores = [open_store(config.dataset, kind=SNAPSHOTS) for config in configs]
    started = utc_now()
    head = configs[0]
    per_rank = launch(train_many, nproc=head.nproc, args=(configs,), backend=head.resolved_backend(),
                      timeout_s=head.timeout_s)
    return [_record(config, store, [results[i] for results in per_rank], started)
            for i, (config, store) in enumerate(zip(configs, stores))]


def _inapplicable_option(config: RunConfig) -> str | None:
    """An option the scheme would ignore: refused, so a record never claims a setup that did not run."""
    if config.scheme == "single" and config.blocks != 1:
        return (f"--blocks {config.blocks}: 'single' keeps every snapshot resident in one block; "
                f"gradient checkpointing is the 'checkpoint' scheme")
    if config.transfer != "base" and not streams_snapshots(config):
        return (f"--transfer {config.transfer}: scheme '{config.scheme}' with --blocks {config.blocks} keeps its "
                f"snapshots resident, so nothing is transferred; use 'checkpoint', or 'snapshot' with --blocks > 1")
    return None


def run_experiment(config: RunConfig) -> dict[str, Any]:
    """Train ``config.model`` with ``config.scheme`` and return the result record."""
    return run_experiments([config])[0]


def _record(config: RunConfig, store: Any, per_rank: list[dict[str, Any]], started: str) -> dict[str, Any]:
    epochs = merge_rank_epochs([r["epochs"] for r in per_rank])
    extra = dict(per_rank[0]["extra"])
    by_epoch = [r["extra"].get("transfer_bytes_by_epoch") for r in per_rank]
    if any(by_epoch):  # streamed runs: every rank moves its own steps, so the job's bytes are the sum
        first = next(rank for rank in by_epoch if rank)
        extra["transfer_bytes_by_epoch"] = [
            {mode: sum(rank[e].get(mode, 0) for rank in by_epoch if rank) for mode in first[e]}
            for e in range(len(first))]
        extra["transfer_bytes_per_epoch"] = extra["transfer_bytes_by_epoch"][-1]
    extra["peak_saved_activation_bytes"] = max(r["extra"]["peak_saved_activation_bytes"] for r in per_rank)
    extra["input_steps"] = int(store.num_snapshots - 1)
    main = per_rank[0]
    hyper = {k: getattr(config, k) for k in HYPERPARAMETERS}
    return build_record(family=FAMILY, task=TASK, scheme=config.scheme, model=config.model,
                        dataset=dataset_entry(store), hyperparameters=hyper, world_size=main["world_size"],
                        backend=main["backend"], device=torch.device(main["device"]), epochs=epochs,
                        final_metrics=epochs[-1]["metrics"] if epochs else {}, started_at=started, extra=extra)
