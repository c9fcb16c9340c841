"""The discrete-time family's hooks for the experiment driver: its protocol options, one rank's
training, and the record.

Protocol (ESDG §6.4): link prediction from snapshot t's embedding to the edges of snapshot t+1 on
degree features, ``hidden``-wide models, θ of each target's edges as training positives with random
non-edges (trainers/discrete/data.py); validation and test score the run's fixed evaluation sets
(``--negatives``/``--extra-negatives``/``--eval-negatives``, dgbench/tasks, docs/tasks.md). Baseline models
(``persistence``) run instead of the loop.
``--group-length L`` switches to BLAD's snapshot-group protocol (§3.1, Eq. 1), which any scheme without a
schedule of its own also runs (trainers/discrete/blad/groups.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.memory import peak_rss_bytes
from dgbench.options import Options, option
from dgbench.record_types import DiscreteExtra
from dgbench.records import build_record, dataset_entry
from dgbench.store import SNAPSHOTS, SnapshotStore, open_store
from dgbench.tasks.baselines import Baseline, evaluate_baseline
from dgbench.tasks import NODE_CLASSIFICATION
from dgbench.tasks.options import (check_task, decoder_epochs_option, decoder_lr_option, eval_negatives_option,
                                   evaluation_block, evaluation_sets, extra_negatives_option, negatives_option,
                                   record_task, task_option)
from dgbench.trainers.contract import DiscreteScheme, Partition
from dgbench.trainers.discrete.data import TEST, TRAIN, VAL, DiscreteData
from dgbench.trainers.discrete.placement import CommProfile
from dgbench.trainers.discrete.loop import DiscreteTrainer
from dgbench.trainers.discrete.presence import PRESENCE_CHOICES, stored_lifetimes
from dgbench.trainers.epochs import Selection, check_eval_every, merge_rank_epochs, model_selection_block, run_epochs
from dgbench.trainers.experiment import EVALUATION_INPUT
from dgbench.loaders.smoothing import EDGE_LIFE, M_PRODUCT, MODEL_SMOOTHING, RAW, store_smoothing

if TYPE_CHECKING:
    from dgbench.trainers.discrete.blad.minibatch import MiniBatching
    from dgbench.trainers.experiment import ResolvedRun

TASK = "link_prediction"


@dataclass(frozen=True)
class TaskOptions(Options):
    """The discrete-time protocol's options."""

    hidden: int = option(6, "Hidden width of the discrete-time models (ESDG §6.4: 6).", positive=True)
    theta: float = option(0.1, "Fraction of each target snapshot's edges used as positives (ESDG §6.4).",
                          positive=True, upper=1.0)
    presence: str = option("all", "DGC §2.1's V_t: every vertex, those an edge touches, or the store's lifetimes "
                                  "(docs/discrete-schemes.md).",
                           choices=PRESENCE_CHOICES)
    group_length: int = option(0, "BLAD §3.1 snapshot groups (Eq. 1): each target trains its L latest snapshots "
                                  "from a fresh state; 0 = the whole sequence (ESDG §6.4).", minimum=0)
    group_batch: int = option(0, "Group protocol: groups per optimiser step (BLAD §5.1); 0 = one per epoch.",
                              minimum=0)
    seed_batch: int = option(0, "BLAD §3.1 mini-batches of B seed vertices (0: none).", minimum=0)
    fanouts: str = option("10,10", "--seed-batch: neighbours sampled per hop.")
    negatives: str = negatives_option()
    extra_negatives: str | None = extra_negatives_option()
    eval_negatives: int = eval_negatives_option()
    task: str = task_option()
    decoder_epochs: int = decoder_epochs_option()
    decoder_lr: float = decoder_lr_option()
    smoothing: str = option("auto", "Input smoothing (ESDG Table 1, §5.4; targets stay raw). auto: tmgcn m-product, "
                                    "evolvegcn-o edge-life, others none.", choices=("auto", RAW, EDGE_LIFE, M_PRODUCT))
    smoothing_window: int = option(3, "Window of --smoothing: edge-life l / M-product w (snapshots).", positive=True)
    paper_protocol: bool = option(False, "ESDG §6.4's training pairs: one training set drawn once and reused every "
                                         "epoch (default: redrawn each epoch).")


def smoothing_of(run: ResolvedRun) -> str:
    """The smoothing a run applies to its inputs: --smoothing, or with ``auto`` the model's ESDG Table 1
    pairing. A store that is already smoothed is refused unless the run applies none: its next snapshots
    are smoothed too, so it cannot give raw link-prediction targets."""
    task = run.task
    assert isinstance(task, TaskOptions)
    applied = MODEL_SMOOTHING.get(run.model.name, RAW) if task.smoothing == "auto" else task.smoothing
    store = open_store(run.config.dataset, kind=SNAPSHOTS)
    assert isinstance(store, SnapshotStore)
    already = store_smoothing(store)
    if already is not None and applied != RAW:
        raise DgbenchError(f"{run.config.dataset}: the store is already smoothed ({already}); give the raw store "
                           f"(the run applies {applied} to its inputs and keeps the raw next snapshots as targets) "
                           f"or --smoothing none to train on it as it is")
    return applied


def check(run: ResolvedRun) -> None:
    """The protocol and the scheme's schedule must agree: a group schedule needs --group-length, and
    the group protocol runs each group whole (no checkpoint blocks); the smoothing must be applicable."""
    from dgbench.trainers.discrete.blad.groups import GroupSchedule
    task, name = run.task, run.scheme.name
    assert isinstance(task, TaskOptions) and isinstance(run.scheme, DiscreteScheme)
    smoothing_of(run)
    schedule = run.scheme.schedule(run.scheme_options)
    if task.group_length and schedule is not None and not isinstance(schedule, GroupSchedule):
        raise DgbenchError(f"--group-length {task.group_length}: scheme '{name}' has its own schedule, which runs "
                           f"the whole-sequence protocol only")
    if not task.group_length and isinstance(schedule, GroupSchedule):
        raise DgbenchError(f"scheme '{name}' trains snapshot groups (BLAD §3.1): give --group-length L >= 1")
    if task.group_batch and not task.group_length:
        raise DgbenchError(f"--group-batch {task.group_batch}: optimiser steps per group batch need the group "
                           f"protocol (--group-length L >= 1)")
    _check_minibatches(run)
    blocks = getattr(run.scheme_options, "blocks", 1)
    if task.group_length and blocks > 1:
        raise DgbenchError(f"--blocks {blocks}: the group protocol (--group-length {task.group_length}) runs each "
                           f"group whole; leave --blocks at 1")
    check_eval_every(run.config.eval_every, task.task)
    check_task(task.task, task.extra_negatives)
    if task.presence != "all" and not run.scheme.honours_presence:
        raise DgbenchError(f"--presence {task.presence}: scheme '{name}' trains every vertex of every snapshot; "
                           f"run it with --presence all")
    if task.presence == "lifetime":  # refused before any rank starts: the store must carry its lifetimes
        stored_lifetimes(open_store(run.config.dataset, kind=SNAPSHOTS, fingerprint=run.fingerprint))
    if task.task == NODE_CLASSIFICATION and (task.group_length or is_baseline(run) or schedule is not None):
        raise DgbenchError(f"--task {task.task}: {name}/{run.model.name} has no whole-sequence embeddings to decode "
                           f"(baselines, the group protocol and schemes with their own schedule score link "
                           f"prediction only)")
    _evaluation(run)  # written beside the store before any rank starts (dgbench/tasks/evalset.py)


def _check_minibatches(run: ResolvedRun) -> None:
    task, name = run.task, run.scheme.name
    assert isinstance(task, TaskOptions) and isinstance(run.scheme, DiscreteScheme)
    if not task.seed_batch:
        return
    from dgbench.trainers.discrete.blad.minibatch import parse_fanouts
    parse_fanouts(task.fanouts)
    if not task.group_length:
        raise DgbenchError(f"--seed-batch {task.seed_batch}: vertex mini-batches train snapshot groups (BLAD §3.1); "
                           f"give --group-length L >= 1")
    if not run.scheme.trains_minibatches:
        raise DgbenchError(f"--seed-batch {task.seed_batch}: scheme '{name}' has no mini-batch placement (single, "
                           f"snapshot, vertex, blad and blad-nm do)")
    if task.presence != "all":
        raise DgbenchError(f"--seed-batch {task.seed_batch}: a sampled batch has no V_t mask; "
                           f"run it with --presence all")


def _evaluation(run: ResolvedRun) -> list:
    task = run.task
    assert isinstance(task, TaskOptions)
    return run.once(EVALUATION_INPUT, lambda: evaluation_sets(run.config.dataset, task.negatives, task.extra_negatives,
                                                          task.eval_negatives, task=task.task))


def is_baseline(run: ResolvedRun) -> bool:
    """Whether the run's model is a baseline (dgbench/tasks/baselines.py), which the loop does not train."""
    return run.once("is_baseline", lambda: isinstance(run.model.build(run.model_options, in_features=2, hidden=2),
                                                       Baseline))


def _data(run: ResolvedRun) -> DiscreteData:
    """This rank's data, built step by step as the placement reads them (a rank holds only its own steps; a
    smoothed step reads the raw steps of its window)."""
    from dgbench.trainers.projection.lazydata import RankDiscreteData
    task = run.task
    assert isinstance(task, TaskOptions)
    smoothing = smoothing_of(run)
    data = RankDiscreteData(run.config.dataset, theta=task.theta, seed=run.config.seed,
                            group_length=task.group_length, fingerprint=run.fingerprint, smoothing=smoothing,
                            smoothing_window=task.smoothing_window, fixed_training_pairs=task.paper_protocol)
    # validation and test pairs: the run's fixed evaluation sets (none under node classification: its labels)
    data.evaluation = _evaluation(run) if task.task != NODE_CLASSIFICATION else []
    return data


def partition_problem(run: ResolvedRun) -> DiscreteData:
    from dgbench.trainers.discrete.presence import apply_presence
    task = run.task
    assert isinstance(task, TaskOptions)
    data = _data(run)
    apply_presence(data, task.presence)
    # for schemes whose partition depends on the model (DGC §4.1: edge weights = the model's cut bytes)
    data.build_model = None if is_baseline(run) else \
        (lambda: run.model.build(run.model_options, in_features=data.in_features, hidden=task.hidden))
    data.hidden = task.hidden
    return data


def build_rank(ctx: DistContext, run: ResolvedRun, partition: Partition,
               data: DiscreteData | None = None) -> DiscreteTrainer:
    """Data, placement, identically seeded model and optimiser of one rank."""
    data = data or _data(run)
    scheme = run.scheme
    assert isinstance(scheme, DiscreteScheme) and isinstance(run.task, TaskOptions)
    placement = scheme.placement(ctx, data, run.scheme_options, partition)
    torch.manual_seed(run.config.seed)  # same initial parameters on every rank and in every scheme
    model = run.model.build(run.model_options, in_features=data.in_features, hidden=run.task.hidden).to(ctx.device)
    schedule = scheme.schedule(run.scheme_options)
    from dgbench.trainers.discrete.blad.groups import GroupSchedule
    if run.task.group_length and schedule is None:
        schedule = GroupSchedule()
    if isinstance(schedule, GroupSchedule):
        schedule.group_batch = run.task.group_batch
    trainer = DiscreteTrainer(ctx, data, placement, model, lr=run.config.lr,  # type: ignore[arg-type]
                              schedule=schedule)
    trainer.minibatches = _minibatching(ctx, run, partition)
    if run.task.task == NODE_CLASSIFICATION:
        from dgbench.tasks.node import NodeClassification
        trainer.node_task = NodeClassification.for_run(_evaluation(run)[0], data.num_nodes, run.task, run.config)
    return trainer


def _minibatching(ctx: DistContext, run: ResolvedRun, partition: Partition) -> MiniBatching | None:
    """BLAD §3.1's seed batches, each trained on its own placement of its sampled graph (a vertex partition
    restricted to the batch's vertices)."""
    task, scheme = run.task, run.scheme
    assert isinstance(task, TaskOptions) and isinstance(scheme, DiscreteScheme)
    if not task.seed_batch:
        return None
    from dgbench.trainers.discrete.blad.minibatch import MiniBatching, parse_fanouts

    def placement_for(mini: Any) -> Any:
        owner = partition.owner
        part = partition if owner is None or len(owner) != mini.full.num_nodes else \
            replace(partition, owner=owner[mini.vertices])
        return scheme.placement(ctx, mini, run.scheme_options, part)
    return MiniBatching(task.seed_batch, parse_fanouts(task.fanouts), placement_for)


def train_rank(ctx: DistContext, run: ResolvedRun, partition: Partition, problem: DiscreteData) -> dict[str, Any]:
    """Everything one rank does for one run (``problem``: the data the partition step read)."""
    if is_baseline(run):
        return _baseline_rank(ctx, run, problem)
    trainer = build_rank(ctx, run, partition, problem)
    selection = Selection(run.config.eval_every, validate=lambda: trainer.evaluate((VAL,)),
                          test=lambda: trainer.evaluate((TEST,)), keep=trainer.scoring_state,
                          restore=trainer.restore_scoring_state)
    figures = run_epochs(ctx, epochs=run.config.epochs, train_epoch=trainer.train_epoch, evaluate=trainer.evaluate,
                         label=f"{run.scheme.name}/{run.model.name}", unit="edges", selection=selection)
    extra = {"parameters": sum(p.numel() for p in trainer.model.parameters()),  # as the continuous family records
             **trainer.placement.extra(), **trainer.extra(), **run.scheme.record_extras(run.scheme_options, partition)}
    if trainer.minibatches is not None:  # summed over the last epoch's seed batches, each on its own placement
        predicted = trainer.minibatches.predicted_elements(trainer, CommProfile.of(trainer.model))
        extra["minibatches"] = trainer.minibatches.report
    else:
        predicted = trainer.schedule.predicted_elements(trainer, CommProfile.of(trainer.model),
                                                        trainer.data.split_pairs(TRAIN, run.config.epochs - 1))
    if predicted is not None:  # the last training epoch's, all ranks together, by tag
        extra["predicted_comm_elements"] = predicted
    extra["rank_data"] = {**trainer.data.figures(), "peak_rss_bytes": peak_rss_bytes()}
    return {"epochs": figures, "extra": extra, "device": str(ctx.device), "backend": ctx.backend,
            "world_size": ctx.world_size, "selection": selection.summary() if selection.active else None}


def _baseline_rank(ctx: DistContext, run: ResolvedRun, data: DiscreteData) -> dict[str, Any]:
    """A baseline (dgbench/tasks/baselines.py) reads the store and scores the evaluation sets; it trains
    nothing (work 0: no throughput or scaling rows) and every rank computes the same."""
    baseline = run.model.build(run.model_options, in_features=data.in_features, hidden=2)
    assert isinstance(baseline, Baseline)
    baseline.index(run.config.dataset)
    selection = Selection(run.config.eval_every, validate=lambda: evaluate_baseline(baseline, data.evaluation, (VAL,)),
                          test=lambda: evaluate_baseline(baseline, data.evaluation, (TEST,)),
                          keep=lambda: None, restore=lambda kept: None)  # a baseline has no trained state
    figures = run_epochs(ctx, epochs=run.config.epochs, train_epoch=lambda epoch, timer: (0.0, 0),
                         evaluate=lambda: evaluate_baseline(baseline, data.evaluation),
                         label=f"{run.scheme.name}/{run.model.name}", unit="edges", selection=selection)
    ctx.comm.barrier()  # no collective keeps ranks in step: none may leave while another still reads the store
    extra = {"peak_saved_activation_bytes": 0, "predicted_comm_elements": {}, "parameters": 0,
             "baseline": baseline.describe()}
    return {"epochs": figures, "extra": extra, "device": str(ctx.device), "backend": ctx.backend,
            "world_size": ctx.world_size, "selection": selection.summary() if selection.active else None}


def record(run: ResolvedRun, per_rank: list[dict[str, Any]], started: str) -> dict[str, Any]:
    store = open_store(run.config.dataset, kind=SNAPSHOTS, fingerprint=run.fingerprint)
    assert isinstance(store, SnapshotStore)
    epochs = merge_rank_epochs([r["epochs"] for r in per_rank])
    extra = dict(per_rank[0]["extra"])
    if "rank_data" in extra:  # each rank's store reads, steps held and peak memory after training
        extra["rank_data"] = [r["extra"]["rank_data"] for r in per_rank]
    by_epoch = [r["extra"].get("transfer_bytes_by_epoch") for r in per_rank]
    if any(by_epoch):  # streamed runs: every rank moves its own steps, so the job's bytes are the sum
        first = next(rank for rank in by_epoch if rank)
        extra["transfer_bytes_by_epoch"] = [
            {mode: sum(rank[e].get(mode, 0) for rank in by_epoch if rank) for mode in first[e]}
            for e in range(len(first))]
        extra["transfer_bytes_per_epoch"] = extra["transfer_bytes_by_epoch"][-1]
    extra["peak_saved_activation_bytes"] = max(r["extra"]["peak_saved_activation_bytes"] for r in per_rank)
    extra["input_steps"] = int(store.num_snapshots - 1)
    # DGC §2.2.2's load balance: λ = max / min of the ranks' busy seconds (waits excluded), per epoch
    extra["lambda_by_epoch"] = [e.get("lambda") for e in epochs]
    task = run.task
    assert isinstance(task, TaskOptions)
    applied = smoothing_of(run)
    extra["smoothing"] = {"applied": applied, "window": task.smoothing_window if applied != RAW else None,
                          "chosen_by": "model pairing (ESDG Table 1)" if task.smoothing == "auto" else "--smoothing",
                          "targets": "raw next snapshot", "features_smoothed": applied == M_PRODUCT}
    extra["training_pairs"] = "fixed (ESDG §6.4)" if task.paper_protocol else "redrawn every epoch"
    main = per_rank[0]
    final_metrics = epochs[-1]["metrics"] if epochs else {}
    if main.get("selection"):  # --eval-every N > 1: best validation, test once on its state
        extra["model_selection"], final_metrics = model_selection_block(main["selection"])
    return build_record(family="discrete", task=record_task(task.task), scheme=run.scheme.name, model=run.model.name,
                        dataset=dataset_entry(store), hyperparameters=run.hyperparameters(),
                        world_size=main["world_size"], backend=main["backend"], device=torch.device(main["device"]),
                        epochs=epochs, final_metrics=final_metrics, started_at=started,
                        extra=DiscreteExtra.from_json(extra),
                        evaluation=evaluation_block(_evaluation(run)))  # the sets every figure above scored
