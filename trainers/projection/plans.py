"""Reading a scheme's communication plan: the dry run's per-family counting (see
:mod:`trainers.projection.dryrun` for the whole picture).

Discrete family. The per-tag *totals* of an epoch are the schedule's own prediction
(:meth:`~trainers.discrete.schedule.Schedule.predicted_elements`, checked by the conformance suite
against real runs). Here they get their *shape*: which rank sends how much to which, read from the
placement's plan — :class:`~trainers.discrete.placement.TimePlacement`'s step and vertex ranges (ESDG
§4.2's all-to-all), :class:`~trainers.discrete.placement.VertexPlacement`'s halo plan (send counts per
step, sender and receiver, ESDG §4.1) and the owners of each pair's endpoints,
:class:`~trainers.discrete.dgc.instance_placement.InstancePlacement`'s per-rank instance plans (halo,
carries, histories, windows; DGC §4-5, PSS). A placement this module does not know gets its totals
spread evenly over the other ranks, marked ``uniform (assumed)`` in the result. The shape is scaled
to the predicted total, so it can never change the bytes. The per-rank work (edges of the normalised
Ã it aggregates and vertex-steps it computes, per forward-equivalent) comes from the same plans.

Continuous family. Per batch and rank, the plan (:class:`~trainers.continuous.data.BatchPlan`: this
rank's events, sampled neighbours, route to the owners) and the write-back ids of the trainer are read,
and the collectives each node state issues for them are counted, per peer
(:func:`node_state_traffic`): DepCache's all-gather of its deduplicated updates (Eq. 7), DepComm's
request ids and query times out and d_mem-wide views back, their gradients returned (Eq. 8), Sven's
deduplicated request ids out and whole rows back, in n micro-batches (Eq. 9, Alg. 2), and the
write-back of every partitioned state (ids and update rows with their priority). That mapping is
:mod:`trainers.continuous.state`'s collectives written as counts; the exactness tests
(tests/test_projection.py) compare it tag by tag with real runs at P = 2 and 4, so a change there
that the mapping misses fails them.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import torch

from dgbench.dist import PhaseTimer
from dgbench.errors import DgbenchError
from trainers.projection.dryrun import (ALL_GATHER, ALL_TO_ALL, CONTROL_TAGS, INT_BYTES, PLAN, POINT_TO_POINT, UNIFORM,
                                        CountingComm, DryRun, DryRunUnsupported, TagCounter, dry_context, store_entry)
from trainers.projection.lazydata import LazyPairs, nonzeros_per_step

DISCRETE_EXTRA_TAGS = {"gradients", "loss"}
FORWARD_EQUIVALENTS = 3.0  # one forward and one backward (about twice a forward) per unit: what single runs


# --------------------------------------------------------------------------- discrete

@dataclasses.dataclass
class DiscreteShape:
    """What a placement's plan says beyond the totals: per-tag (sender, receiver) patterns, control
    exchanges per unit, and per-rank work."""

    patterns: dict[str, np.ndarray]
    control: dict[str, np.ndarray]  # tag -> [P, P] elements over the epoch (every call of the unit)
    edges: np.ndarray  # [P] normalised-Ã nonzeros aggregated, in forward-equivalents of the epoch
    cells: np.ndarray  # [P] vertex-steps computed, in forward-equivalents
    steps: np.ndarray  # [P] timesteps run (per-step overheads: kernel launches, the models' step loops)
    pattern: str = PLAN
    kinds: dict[str, str] = dataclasses.field(default_factory=dict)  # tags that are not all-to-alls


def _units(trainer: Any) -> tuple[list[range], list[int]]:
    """The ranges of steps run as units and how many forward passes each gets (the schedule's)."""
    from trainers.discrete.blad.groups import GroupSchedule
    schedule = trainer.schedule
    if isinstance(schedule, GroupSchedule):
        groups = schedule.groups(trainer)
        return groups, [1] * len(groups)
    blocks = trainer.placement.blocks
    return blocks, schedule.forward_passes(len(blocks))


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


def _ones(world: int) -> np.ndarray:
    return np.ones((world, world), np.int64) - np.eye(world, dtype=np.int64)


def _time_shape(placement: Any, units: list[range], passes: list[int]) -> DiscreteShape:
    """ESDG §4.2: per unit, rank r's local steps travel to every rank's vertex rows and back."""
    data, world = placement.data, placement.ctx.world_size
    rows = np.array([b - a for a, b in placement.vertex_ranges], np.int64)
    nnz = nonzeros_per_step(data)
    forward, backward = np.zeros((world, world), np.int64), np.zeros((world, world), np.int64)
    edges, cells, step_work = np.zeros(world), np.zeros(world), np.zeros(world)
    for unit, runs in zip(units, passes):
        ranges = placement.local_ranges(unit)
        steps = np.array([b - a for a, b in ranges], np.int64)
        moved = np.outer(steps, rows)
        forward += runs * moved
        backward += moved
        weight = (runs + 2) / FORWARD_EQUIVALENTS
        edges += weight * np.array([nnz[a:b].sum() for a, b in ranges])
        cells += weight * (steps * data.num_nodes + len(unit) * rows) / 2
        step_work += weight * (steps + len(unit)) / 2  # the graph layer runs local steps, the temporal one all
    return DiscreteShape({"to_vertex:forward": forward, "to_vertex:backward": backward.T,
                          "to_time:forward": forward.T, "to_time:backward": backward}, {}, edges, cells, step_work)


def _asks(asker: np.ndarray, holder: np.ndarray, key: np.ndarray, world: int) -> np.ndarray:
    """[asker, holder] counts of distinct (asker, key) requests (``holder[i]`` holds ``key[i]``)."""
    if not len(key):
        return np.zeros((world, world), np.int64)
    span = np.int64(key.max()) + 1
    _, first = np.unique(asker * span + key, return_index=True)
    return np.bincount(asker[first] * world + holder[first], minlength=world * world).reshape(world, world)


def _score_patterns(asks: np.ndarray, units: int, world: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Pair scoring: ids asked (asker -> holder), values back, gradients back; one row-count exchange
    per unit (``Comm.exchange_counts``: one int64 to every other rank)."""
    return ({"scores:ids": asks, "scores:forward": asks.T, "scores:backward": asks},
            {"counts": units * _ones(world)})


def _vertex_shape(placement: Any, units: list[range], passes: list[int], pairs: list[Any]) -> DiscreteShape:
    """ESDG §4.1: the halo plan's rows per (sender, receiver) per step; pair scores ask the holders."""
    data, world, plan, owner = placement.data, placement.ctx.world_size, placement.plan, placement.owner
    forward, backward = np.zeros((world, world), np.int64), np.zeros((world, world), np.int64)
    own_nnz = np.zeros((data.num_steps, world), np.int64)
    for t, a in enumerate(data.adjacency):
        own_nnz[t] = np.bincount(owner, weights=np.diff(a.rowptr), minlength=world).astype(np.int64)
    sizes = np.array([len(v) for v in plan.owned], np.int64)
    edges, cells, steps = np.zeros(world), np.zeros(world), np.zeros(world)
    for unit, runs in zip(units, passes):
        halo = plan.send_counts[unit.start:unit.stop].sum(0)
        forward += runs * halo
        backward += halo
        weight = (runs + 2) / FORWARD_EQUIVALENTS
        edges += weight * own_nnz[unit.start:unit.stop].sum(0)
        cells += weight * len(unit) * sizes
        steps += weight * len(unit)
    askers, keys = [], []
    for batch in pairs:
        crossing = owner[batch.src] != owner[batch.dst]
        askers.append(owner[batch.src][crossing].astype(np.int64))
        keys.append(batch.step * np.int64(data.num_nodes) + batch.dst[crossing])
    asker = np.concatenate(askers) if askers else np.zeros(0, np.int64)
    key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    scores, control = _score_patterns(_asks(asker, owner[key % data.num_nodes], key, world), len(units), world)
    return DiscreteShape({"halo:forward": forward, "halo:backward": backward.T, **scores}, control, edges, cells,
                         steps)


def _instance_shape(placement: Any, units: list[range], pairs: list[Any]) -> DiscreteShape:
    """DGC §4-5 / PSS: every rank's instance plan — spatial halo, carries per round, attention
    history, window rows — and pair scores asked from the holder of v's latest instance."""
    from dgbench.models.contract import Dependency
    from trainers.discrete.dgc.instances import build_instance_plans, window_exchange
    world = placement.ctx.world_size
    plans = build_instance_plans(placement.graph, placement.part, world, placement.data.adjacency)

    def matrix(splits: list[list[int]]) -> np.ndarray:
        return np.array(splits, np.int64).reshape(world, world)

    forward: dict[str, np.ndarray] = {}
    for note in placement.notes:
        if note.dependency is None:
            tag, m = "halo", matrix([p.spatial.send_splits for p in plans])
        elif note.dependency == Dependency.RECURRENT:
            tag = "carry"
            m = matrix([np.sum([r.send_splits for r in p.rounds[:-1]], axis=0).tolist() if len(p.rounds) > 1
                        else [0] * world for p in plans])
        elif note.dependency == Dependency.CAUSAL:
            tag, m = "history", matrix([p.history.send_splits for p in plans])
        elif note.dependency == Dependency.WINDOW:
            tag = "window"
            m = matrix([window_exchange(placement.graph, placement.part, p, note.window - 1)[0].send_splits
                        for p in plans])
        else:
            continue
        forward[tag] = forward.get(tag, 0) + m
    patterns = {}
    for tag, m in forward.items():
        patterns[f"{tag}:forward"], patterns[f"{tag}:backward"] = m, m.T
    askers, keys = [], []
    part, latest = placement.part, placement.latest
    for batch in pairs:
        u_instance = latest[batch.step, batch.src]
        asker = np.where(u_instance >= 0, part[np.maximum(u_instance, 0)], 0)
        v_instance = latest[batch.step, batch.dst]
        holder = np.where(v_instance >= 0, part[np.maximum(v_instance, 0)], asker)
        crossing = (v_instance >= 0) & (holder != asker)
        askers.append(asker[crossing])
        keys.append(v_instance[crossing])
    asker = np.concatenate(askers) if askers else np.zeros(0, np.int64)
    key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    scores, control = _score_patterns(_asks(asker, part[key], key, world), len(units), world)
    edges = np.array([p.operator.val.size for p in plans], np.float64)
    cells = np.array([p.own.sum() for p in plans], np.float64)
    steps = np.array([p.own.any(1).sum() for p in plans], np.float64)  # steps where the rank has instances
    return DiscreteShape({**patterns, **scores}, control, edges, cells, steps)


def _blad_shape(trainer: Any) -> DiscreteShape:
    """BLAD §5: each device runs whole groups; with two processes per device, p1 (rank 2d) hands the state
    after its p_i snapshots to p2 (rank 2d+1) point to point, preceded by its shape, and gets the gradient
    back. The two processes share one device, so each is given the device's whole work (no overlap
    credited: an upper bound on BLAD's compute, which §6 overlaps)."""
    placement, data = trainer.placement, trainer.data
    plan, world = placement.plan, trainer.ctx.world_size
    nnz = nonzeros_per_step(data)
    state, grads, control = (np.zeros((world, world), np.int64) for _ in range(3))
    dims = sum(t.dim() for layer in trainer.initial_state() for t in layer)
    edges, cells, steps = np.zeros(plan.devices), np.zeros(plan.devices), np.zeros(plan.devices)
    for index, target in enumerate(plan.targets):
        device, group = int(plan.device_of[index]), data.group_of(target)
        edges[device] += nnz[group.start:group.stop].sum()
        cells[device] += len(group) * data.num_nodes
        steps[device] += len(group)
        k = int(plan.p1_steps[index])
        if plan.procs == 2 and 0 < k < len(group):
            first, second = device * 2, device * 2 + 1
            state[first, second] += 1
            grads[second, first] += 1
            control[first, second] += dims
    spread = np.repeat(np.arange(plan.devices), plan.procs)
    return DiscreteShape({"intra:state": state, "intra:state_grad": grads}, {"counts": control} if dims else {},
                         edges[spread], cells[spread], steps[spread], PLAN,
                         {"intra:state": POINT_TO_POINT, "intra:state_grad": POINT_TO_POINT, "counts": POINT_TO_POINT})


def _even_shape(trainer: Any, units: list[range], passes: list[int], world: int) -> DiscreteShape:
    data = trainer.data
    nnz = nonzeros_per_step(data)
    edges = sum((runs + 2) / FORWARD_EQUIVALENTS * nnz[u.start:u.stop].sum() for u, runs in zip(units, passes))
    cells = sum((runs + 2) / FORWARD_EQUIVALENTS * len(u) * data.num_nodes for u, runs in zip(units, passes))
    steps = sum((runs + 2) / FORWARD_EQUIVALENTS * len(u) for u, runs in zip(units, passes))
    return DiscreteShape({}, {}, np.full(world, edges / world), np.full(world, cells / world), np.full(world, steps),
                         UNIFORM)


def discrete_shape(trainer: Any, units: list[range], passes: list[int], pairs: list[Any]) -> DiscreteShape:
    """The placement's plan read as patterns and work (an even split for placements not known here)."""
    from trainers.discrete.dgc.instance_placement import InstancePlacement
    from trainers.discrete.placement import TimePlacement, VertexPlacement
    placement, world = trainer.placement, trainer.ctx.world_size
    if isinstance(placement, TimePlacement):
        return _time_shape(placement, units, passes)
    if isinstance(placement, VertexPlacement):
        return _vertex_shape(placement, units, passes, pairs)
    if isinstance(placement, InstancePlacement) and passes == [1]:
        return _instance_shape(placement, units, pairs)
    if getattr(placement, "plan", None) is not None and type(placement).__name__ == "BladPlacement":
        return _blad_shape(trainer)
    return _even_shape(trainer, units, passes, world)


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


def discrete_epoch(run: Any, problem: Any, partition: Any, world: int, epoch: int) -> DryRun:
    """One training epoch of a discrete-time scheme (see the module docstring)."""
    from trainers.discrete import family
    from trainers.discrete.data import TRAIN
    from trainers.discrete.placement import CommProfile
    notes: list[str] = []
    trainer = family.build_rank(dry_context(0, world), run, partition, problem)
    units, passes = _units(trainer)
    calls, kinds = _probe_forward(trainer, units[0], notes)
    pairs = LazyPairs(problem, TRAIN, epoch)  # built only if the placement scores pairs across ranks
    predicted = trainer.schedule.predicted_elements(trainer, CommProfile.of(trainer.model), pairs)
    if predicted is None:
        raise DgbenchError(f"scheme '{run.scheme.name}' with model '{run.model.name}' has no model of its volume "
                           f"(predicted_elements is None), so its epoch cannot be counted without running it")
    shape = discrete_shape(trainer, units, passes, pairs)
    parameters = sum(p.numel() for p in trainer.model.parameters())
    float_bytes = next(trainer.model.parameters()).element_size()
    counter = TagCounter(world, 1)
    for tag, elements in sorted(predicted.items()):
        pattern = shape.patterns.get(tag)
        kind = UNIFORM if pattern is None or not pattern.sum() else shape.pattern
        pairs_matrix, exact = _scaled(_ones(world) if kind == UNIFORM else pattern, int(elements))
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
        for rank in range(world):
            counter.reduce("gradients", float_bytes, 0, rank, parameters)
            counter.reduce("loss", 8, 0, rank, 1)
    if shape.pattern == UNIFORM:
        notes.append(f"{type(trainer.placement).__name__}: no plan reader here; every tag spread evenly over the "
                     f"other ranks and the work split evenly (trainers/projection/plans.py)")
    return DryRun("discrete", run.scheme.name, run.model.name, world, store_entry(run.config.dataset),
                  run.hyperparameters(), "epoch", 1, counter.tags,
                  {"edges": shape.edges, "cells": shape.cells, "steps": shape.steps}, shape.pattern, parameters, notes,
                  {"units": len(units), "forward_passes": passes, "epoch_of_pairs": epoch,
                   "edges_total": int(nonzeros_per_step(trainer.data).sum()),
                   "cells_total": int(trainer.data.num_steps * trainer.data.num_nodes)})


# --------------------------------------------------------------------------- continuous

def node_state_traffic(counter: TagCounter, state: Any, plan: Any, write: tuple[np.ndarray, np.ndarray], rank: int,
                       unit: int, widths: dict[str, int], float_bytes: int, chunks: int) -> np.ndarray | None:
    """Count what ``state`` (rank ``rank``'s node state) sends for one batch plan; returns, for DepComm,
    the positions each owner computes views for (else None). ``widths``: row, view and update widths."""
    from trainers.continuous.state import (AGGREGATE_TAG, BACKWARD_SUFFIX, DISPATCH_TAG, ID_SUFFIX, TIME_SUFFIX,
                                           OwnerComputeState, PartitionedState, ReplicatedState, ResidentState,
                                           last_wins)
    from trainers.continuous.sven.formulas import dispatch_plan
    world = counter.world
    everyone = np.ones(world, np.int64)
    ids, priority = write
    if isinstance(state, ResidentState) or world == 1:
        return None
    if isinstance(state, ReplicatedState):  # DepCache: two uneven all-gathers of the deduplicated updates
        updates = len(last_wins(ids, priority)[0])
        counter.move("counts", ALL_TO_ALL, INT_BYTES, unit, rank, None, everyone * 2, calls=2)
        counter.move(AGGREGATE_TAG + ID_SUFFIX, ALL_GATHER, INT_BYTES, unit, rank, None, everyone * updates, 1)
        counter.move(AGGREGATE_TAG, ALL_GATHER, float_bytes, unit, rank, None,
                     everyone * updates * widths["update"], 1)
        return None
    if not isinstance(state, PartitionedState):
        raise DgbenchError(f"dry run: no count of {type(state).__name__}'s collectives (trainers/projection/plans.py)")
    requested = np.asarray(plan.route.send_counts, np.int64)
    computed = None
    if isinstance(state, OwnerComputeState):  # DepComm: ids and times out, views back, gradients out
        counter.move("counts", ALL_TO_ALL, INT_BYTES, unit, rank, None, everyone, calls=2)
        counter.move(DISPATCH_TAG + ID_SUFFIX, ALL_TO_ALL, INT_BYTES, unit, rank, None, requested, 1)
        counter.move(DISPATCH_TAG + TIME_SUFFIX, ALL_TO_ALL, float_bytes, unit, rank, None, requested, 1)
        counter.move(f"{DISPATCH_TAG}:forward", ALL_TO_ALL, float_bytes, unit, None, rank,
                     requested * widths["view"], 1)
        counter.move(DISPATCH_TAG + BACKWARD_SUFFIX, ALL_TO_ALL, float_bytes, unit, rank, None,
                     requested * widths["view"], 1)
        computed = requested
    else:  # Sven: deduplicated ids out, whole rows back in n micro-batches (Alg. 2, §3.3.2)
        counter.move("counts", ALL_TO_ALL, INT_BYTES, unit, rank, None, everyone * chunks, calls=2)  # per chunk
        counter.move(DISPATCH_TAG + ID_SUFFIX, ALL_TO_ALL, INT_BYTES, unit, rank, None, requested, 1)
        counter.move(DISPATCH_TAG, ALL_TO_ALL, float_bytes, unit, None, rank, requested * widths["row"], chunks)
    unique, _ = last_wins(ids, priority)  # the write-back of every partitioned state
    _, counts = dispatch_plan(unique, state.owner, world)
    counter.move("counts", ALL_TO_ALL, INT_BYTES, unit, rank, None, everyone, calls=2)
    counter.move(AGGREGATE_TAG + ID_SUFFIX, ALL_TO_ALL, INT_BYTES, unit, rank, None, counts, 1)
    counter.move(AGGREGATE_TAG, ALL_TO_ALL, float_bytes, unit, rank, None, counts * widths["update"], 1)
    return computed


def _eq12_inputs(plan: Any) -> tuple[float, float] | None:
    """Eq. 12's eta(bs) = A + B / bs fitted on one plan, as the trainer does after its first batch."""
    from trainers.continuous.sven.formulas import fit_redundancy_curve, redundancy_by_batch_size
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
    from trainers.continuous import family
    from trainers.continuous.state import DISPATCH_TAG
    from trainers.continuous.loop import GRAD_TAG
    from trainers.contract import ContinuousScheme
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
            served = node_state_traffic(counter, state, plan, trainer._write_ids(plan), rank, index, widths,
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
