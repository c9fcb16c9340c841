"""The dry run's per-family driver: it asks the objects that communicate to count themselves.

Discrete: the schedule's units (:meth:`~dgbench.trainers.discrete.schedule.Schedule.units`), its per-tag totals
(``predicted_elements``, checked against real runs by the conformance suite) and the placement's
:meth:`~dgbench.trainers.discrete.placement.Placement.comm_shape` (who sends how much to whom, per-rank work; a
placement that reads no plan spreads evenly, marked ``uniform (assumed)``). The shape is scaled to the total,
so it never changes the bytes. Continuous: every batch planned on every rank and counted by the rank's node
state (:meth:`~dgbench.trainers.continuous.state.NodeState.count_batch`, beside its real collectives); the exactness
tests (tests/test_projection.py) compare the counts tag by tag with real runs at P = 2 and 4. See
docs/projection.md.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import torch

from dgbench.dist import PhaseTimer
from dgbench.errors import DgbenchError
from dgbench.counting import (ALL_TO_ALL, CONTROL_TAGS, INT_BYTES, PLAN, UNIFORM, CountingComm, DryRunUnsupported,
                              TagCounter, dry_context)
from dgbench.trainers.discrete.comm_shape import to_every_other
from dgbench.trainers.projection.dryrun import DryRun, store_entry
from dgbench.trainers.projection.lazydata import LazyPairs, rank_block_kept

DISCRETE_EXTRA_TAGS = {"gradients", "loss"}


# --------------------------------------------------------------------------- discrete

def _probe_forward(trainer: Any, first: range, notes: list[str]) -> tuple[dict[str, int], dict[str, str]]:
    """One no-grad forward of the first unit on the counting world: collective calls per tag (and their
    kind). Placements that note their exchange widths on a first forward (InstancePlacement) have them."""
    comm = trainer.ctx.comm
    assert isinstance(comm, CountingComm)
    placement = trainer.placement
    timer = PhaseTimer()
    try:
        with torch.no_grad():
            view = placement.view(0, timer) if first == placement.blocks[0] else placement.view_of(first, timer)
            trainer.model.forward_block(view, trainer.initial_state())
    except DryRunUnsupported as exc:
        notes.append(f"probe forward stopped: {exc}")
    calls = {tag: stats.calls for tag, stats in comm.stats.items()}
    kinds = {tag: ALL_TO_ALL for tag in comm.peers}
    comm.reset()
    comm.peers.clear()
    return calls, kinds


def _scaled(pattern: np.ndarray, total: int) -> tuple[np.ndarray, bool]:
    """``pattern`` scaled to sum to ``total`` (exact when the total is an integer multiple of it)."""
    pattern = np.asarray(pattern, np.int64).copy()
    np.fill_diagonal(pattern, 0)
    mass = int(pattern.sum())
    if mass and total % mass == 0:
        return pattern * (total // mass), True
    if not mass:
        return pattern, total == 0
    scaled = np.floor(pattern * (total / mass)).astype(np.int64)
    scaled.flat[int(np.argmax(pattern))] += total - int(scaled.sum())
    return scaled, False


def _element_bytes(tag: str, float_bytes: int) -> int:
    return INT_BYTES if tag.endswith(":ids") or tag in CONTROL_TAGS else float_bytes


def discrete_epoch(run: Any, problem: Any, partition: Any, world: int, epoch: int,
                   blad_plan: dict[str, Any] | None = None) -> DryRun:
    """One training epoch of a discrete-time scheme (see the module docstring). ``blad_plan``: a BLAD run's
    recorded plan, when it came from run-time measurements (its first epoch's profile)."""
    from dgbench.trainers.discrete import family
    from dgbench.trainers.discrete.data import TRAIN
    from dgbench.trainers.discrete.placement import CommProfile
    notes: list[str] = []
    with rank_block_kept(problem, world):  # rank 0's steps built once each
        trainer = family.build_rank(dry_context(0, world), run, partition, problem)
        if blad_plan is not None:
            from dgbench.trainers.discrete.blad.runtime import BladSchedule
            if isinstance(trainer.schedule, BladSchedule):
                trainer.schedule.given_plan = blad_plan
                notes.append("BLAD: the plan its run made from the first epoch's profile (given)")
        units, passes = trainer.schedule.units(trainer)
        calls, kinds = _probe_forward(trainer, units[0], notes)
    pairs = LazyPairs(problem, TRAIN, epoch)  # built only if the placement scores pairs across ranks
    predicted = trainer.schedule.predicted_elements(trainer, CommProfile.of(trainer.model), pairs)
    if predicted is None:
        raise DgbenchError(f"scheme '{run.scheme.name}' with model '{run.model.name}' has no model of its volume "
                           f"(predicted_elements is None), so its epoch cannot be counted without running it")
    shape = trainer.placement.comm_shape(trainer, units, passes, pairs)
    parameters = sum(p.numel() for p in trainer.model.parameters())
    float_bytes = next(trainer.model.parameters()).element_size()
    counter = TagCounter(world, 1)
    for tag, elements in sorted(predicted.items()):
        if tag in DISCRETE_EXTRA_TAGS:  # all-reduces, counted below
            continue
        pattern = shape.patterns.get(tag)
        kind = UNIFORM if pattern is None or not pattern.sum() else shape.pattern
        pairs_matrix, exact = _scaled(to_every_other(world) if kind == UNIFORM else pattern, int(elements))
        if not exact:
            notes.append(f"{tag}: the plan's pattern is not a whole multiple of the predicted total; spread in "
                         f"proportion")
        base = tag.rsplit(":", 1)[0]
        if tag.endswith(":forward") and tag in calls:
            n = calls[tag] * sum(passes)
        elif tag.endswith(":backward") and f"{base}:forward" in calls:
            n = calls[f"{base}:forward"] * len(units)
        else:
            n = len(units)
        counter.matrix(tag, kinds.get(tag, shape.kinds.get(tag, ALL_TO_ALL)), _element_bytes(tag, float_bytes),
                       pairs_matrix, n, kind)
    for tag in sorted(set(calls) | set(shape.patterns)):  # exchanges that ran but moved nothing still cost calls
        base = tag.rsplit(":", 1)[0]
        if world > 1 and tag not in counter.tags and not predicted.get(tag):
            n = calls.get(tag, 0) * sum(passes) if tag in calls else calls.get(f"{base}:forward", 0) * len(units) \
                if tag.endswith(":backward") and f"{base}:forward" in calls else len(units)
            counter.matrix(tag, kinds.get(tag, ALL_TO_ALL), _element_bytes(tag, float_bytes),
                           np.zeros((world, world), np.int64), n, PLAN)
    for tag, matrix in shape.control.items():
        if world > 1:
            counter.matrix(tag, shape.kinds.get(tag, ALL_TO_ALL), INT_BYTES, matrix, len(units), PLAN)
    if world > 1:
        for rank in range(world):  # the loop's one flat all-reduce, or the schedule's per-step ones
            reduced = parameters if "gradients" not in predicted else predicted["gradients"] // world
            reduced = reduced if shape.gradients is None else int(shape.gradients[rank])
            if reduced:
                counter.reduce("gradients", float_bytes, 0, rank, reduced)
            counter.reduce("loss", 8, 0, rank, 1)
    if shape.pattern == UNIFORM:
        notes.append(f"{type(trainer.placement).__name__}: its comm_shape reads no plan; every tag spread evenly over "
                     f"the other ranks and the work split evenly")
    return DryRun("discrete", run.scheme.name, run.model.name, world, store_entry(run.config.dataset),
                  run.hyperparameters(), "epoch", 1, counter.tags,
                  {"edges": shape.edges, "cells": shape.cells, "steps": shape.steps}, shape.pattern, parameters, notes,
                  {"units": len(units), "forward_passes": passes, "epoch_of_pairs": epoch,
                   "edges_total": int(trainer.data.nonzeros_per_step().sum()),
                   "cells_total": int(trainer.data.num_steps * trainer.data.num_nodes)})


# --------------------------------------------------------------------------- continuous

def _eq12_inputs(plan: Any) -> tuple[float, float] | None:
    """Eq. 12's eta(bs) = A + B / bs fitted on one plan, as the trainer does after its first batch."""
    from dgbench.trainers.continuous.sven.formulas import fit_redundancy_curve, redundancy_by_batch_size
    if not len(plan.events):
        return None
    sizes = [max(1, plan.size // k) for k in (1, 2, 4, 8)]
    return fit_redundancy_curve(sizes, redundancy_by_batch_size(plan.needed_ids, plan.event_of_needed, sizes))


def own_driver_epoch(run: Any, problem: Any, partition: Any, world: int) -> DryRun:
    """A scheme that drives training itself (``train_rank``): what its ``dry_run_sends`` says each rank
    sends (the contract's hook for such schemes); the work is the training events split evenly."""
    scheme = run.scheme
    counter = TagCounter(world, 1)
    for rank in range(world):
        sends = scheme.dry_run_sends(dry_context(rank, world), run, partition, problem)
        if sends is None:
            raise DgbenchError(f"scheme '{scheme.name}' trains through its own driver (train_rank) and does not say "
                               f"what it sends (ContinuousScheme.dry_run_sends), so it cannot be dry-run")
        for tag, send in sends.items():
            if send.kind == "all_reduce":
                counter.reduce(tag, send.element_bytes, 0, rank, int(send.to_rank[rank]), send.calls)
            else:
                counter.move(tag, send.kind, send.element_bytes, 0, rank, None, np.asarray(send.to_rank), send.calls)
    a, b = problem.stream.ranges["train"]
    share = np.full((1, world), (b - a) / world)
    return DryRun("continuous", scheme.name, run.model.name, world, store_entry(run.config.dataset),
                  run.hyperparameters(), "epoch", 1, counter.tags,
                  {"events": share, "positions": 3 * share, "computed": 3 * share}, UNIFORM, 0,
                  [f"scheme '{scheme.name}' drives training itself: its counts are its dry_run_sends; work split "
                   f"evenly (assumed)"], {"batches": 1, "batch_size": int(b - a)})


def continuous_epoch(run: Any, problem: Any, partition: Any, world: int, eq12_n: int | None) -> DryRun:
    """One training epoch of a continuous-time scheme (see the module docstring): every batch planned on
    every rank, rank after rank."""
    from dgbench.trainers.continuous import family
    from dgbench.trainers.continuous.state import DISPATCH_TAG
    from dgbench.trainers.continuous.loop import GRAD_TAG
    from dgbench.trainers.contract import ContinuousScheme
    scheme, options = run.scheme, run.scheme_options
    if type(scheme).train_rank is not ContinuousScheme.train_rank:
        return own_driver_epoch(run, problem, partition, world)
    trainer = family.build_trainer(dry_context(0, world), run, partition, problem)
    model, layout = trainer.model, trainer.model.layout
    float_bytes = torch.finfo(trainer.dtype).bits // 8
    widths = {"row": layout.width, "view": model.view_width, "update": layout.update_width + 1}
    parameters = sum(p.numel() for p in model.parameters())
    bounds = trainer.planner.batch_bounds("train", trainer.options.batch_size)
    units = len(bounds)
    counter = TagCounter(world, units)
    events, positions, computed = (np.zeros((units, world), np.int64) for _ in range(3))
    notes: list[str] = []
    decided = scheme.microbatches(options) == 0 and world > 1
    chunks = (eq12_n or 1) if decided else max(1, scheme.microbatches(options))
    if decided:
        notes.append(f"Sven's n is chosen at run time from the measured link (Eq. 12); counted with n = {chunks}"
                     + (" (given)" if eq12_n else "; the projection recomputes n from the profile's link"))
    eq12: list[tuple[float, float, int, int]] = []
    predicted = {"dispatch": 0.0, "aggregation": 0.0}  # the scheme's own per-rank Eq. 7-9 form, for comparison
    for rank in range(world):
        if rank == 0:
            state, planner = trainer.state, trainer.planner
        else:  # the two hooks ContinuousTrainer.__init__ calls, for rank r (the sampler is rank-independent)
            state = scheme.node_state(dry_context(rank, world), layout, partition, options)
            planner = dataclasses.replace(trainer.planner, assign=scheme.assign_events(partition, rank, world),
                                          route=state.route)
        as_rank = copy.copy(trainer)
        as_rank.ctx = dry_context(rank, world)
        for index, (start, stop) in enumerate(bounds):
            plan = planner.plan("train", index, start, stop)
            events[index, rank] = len(plan.events)
            positions[index, rank] = len(plan.needed_ids)
            served = None if world == 1 else state.count_batch(counter, plan, trainer._write_ids(plan), index, widths,
                                                               float_bytes, chunks)
            if served is not None:
                computed[index] += served
            else:
                computed[index, rank] += len(plan.needed_ids)
            if world > 1:
                counter.reduce(GRAD_TAG, float_bytes, index, rank, parameters + 1)
            volume = scheme.predicted_volume(as_rank._traffic(plan)) if len(plan.events) else None
            if volume is not None:
                predicted["dispatch"] += volume.dispatch_bytes
                predicted["aggregation"] += volume.aggregation_bytes
            if index == 0 and decided:
                fitted = _eq12_inputs(plan)
                if fitted is not None:
                    eq12.append((*fitted, len(plan.events), rank))
        del state, planner
    extra: dict[str, Any] = {"batches": units, "batch_size": trainer.options.batch_size, "widths": widths,
                             "microbatches_counted": chunks, "scheme_predicted_bytes": predicted,
                             "microbatches_given": bool(decided and eq12_n)}  # a measured run's n: price it as is
    if decided and eq12:  # the trainer all-reduces the ranks' A, B and dispatch bytes per event, then averages
        served = counter.tags[DISPATCH_TAG].sent[0] * float_bytes if DISPATCH_TAG in counter.tags else np.zeros(world)
        extra["eq12"] = {"A": float(np.mean([a for a, _, _, _ in eq12])),
                         "B": float(np.mean([b for _, b, _, _ in eq12])),
                         "dispatch_bytes_per_event": float(np.mean([served[r] / max(n, 1) for _, _, n, r in eq12]))}
    return DryRun("continuous", scheme.name, run.model.name, world, store_entry(run.config.dataset),
                  run.hyperparameters(), "batch", units, counter.tags,
                  {"events": events, "positions": positions, "computed": computed}, PLAN, parameters, notes, extra)
