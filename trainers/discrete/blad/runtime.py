"""BLAD's runtime on the scheme contract (Fu et al., SC'23, §4-§6): plan, views, the two-process pipeline.

Ranks form ``devices × procs`` (:func:`dgbench.dist.make_mesh`); whole groups per device (§5.1),
p_i from Eq. 2 (§5.2.2, :mod:`dgbench.trainers.discrete.blad.balance`), 1F1B between p1 and p2 (§5.2.1),
Alg. 1's operator order per period (§6, ``blad`` only).
See docs/blad.md (section "Two processes per device on a CPU").
"""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from dgbench.costmodel import proxy_provenance
from dgbench.counting import PLAN, POINT_TO_POINT
from dgbench.dist import Comm, DistContext, PhaseTimer, make_mesh
from dgbench.errors import DgbenchError
from dgbench.models.contract import LayoutSequence, State
from dgbench.models.sparse import SparseOperator, block_diagonal, graph_attention, spmm
from dgbench.options import Options, option
from dgbench.trainers.discrete.blad.balance import (CORRECTED, PAPER, assign_groups, balance_split, even_split,
                                                    sync_ratio)
from dgbench.trainers.discrete.blad.reorder import Slot, manage_topology, operators_for
from dgbench.trainers.discrete.blad.table3 import table3
from dgbench.trainers.discrete.comm_shape import CommShape
from dgbench.trainers.discrete.data import TEST, VAL, DiscreteData, PairBatch
from dgbench.trainers.discrete.blad.groups import GroupSchedule, step_ranges
from dgbench.trainers.discrete.placement import CommProfile, Placement, pair_logits

if TYPE_CHECKING:
    from dgbench.trainers.discrete.loop import DiscreteTrainer

DEFAULT_GROUP_LENGTH = 4  # GUESS: §3.1 gives no l; the notes' default (l + 1 = 4)
# GUESS: §5.1 aggregates "after the GPU completes training one snapshot group", i.e. a step per group per
# device (B = devices); a protocol needs one B for every scheme and device count (its reference, `single`,
# has no devices): 2 is §5.1 literally on two devices, and on one device it leaves p1 a successor group
# to pipeline with inside the step (docs/blad.md, "Gradient aggregation")
DEFAULT_GROUP_BATCH = 2


@dataclass(frozen=True)
class BladOptions(Options):
    procs_per_device: int = option(0, "Processes per device (§5.2: 2); 0 = 2 when the world size is even, else 1.",
                                   minimum=0, upper=2)
    balance: str = option("dp", "Each group's split between a device's processes: Eq. 2's DP (dp) or by time "
                                "interval (even: BLAD-Even, §7.5).", choices=("dp", "even"))
    eq2: str = option("corrected", "Eq. 2 with its printed defects corrected, or as printed (docs/blad.md).",
                      choices=("corrected", "paper"))
    assign: str = option("balanced", "Groups to devices (§5.1): contiguous ranges of equal predicted load "
                                     "(balanced) or equal counts (even).", choices=("balanced", "even"))
    costmodel: Path | None = option(None, "Operator predictor fitted here by `dgbench costmodel fit blad` (§5.2.2); "
                                          "default: --durations.")
    durations: str = option("profile", "Per-snapshot durations without --costmodel: measured in the first epoch "
                                       "(profile, §4 step 1; the first epoch runs on the proxy's plan) or the "
                                       "operation-count proxy throughout (proxy).", choices=("profile", "proxy"))
    blad_sync: str = option("group", "Gradient aggregation (§5.1): after each group batch (--group-batch), summed "
                                     "inside each device, then across devices (group); or once per epoch over "
                                     "every process at once (epoch: needs --group-batch 0).",
                            choices=("group", "epoch"))
    first_layer: str = option("pair", "The first GCN layer: an (aggregate, update) pair run every forward pass, which "
                                      "the topology manager may reorder like the second (pair: Fig. 11), or Ã X⁰ "
                                      "precomputed once (precomputed: ESDG §5.5, only its update runs).",
                              choices=("pair", "precomputed"))
    pin: str = option("pair", "Cores: both processes of a device on the device's cores (pair) or as launched (none).",
                      choices=("pair", "none"))


def resolved_procs(options: BladOptions, world_size: int) -> int:
    if options.procs_per_device:
        return options.procs_per_device
    return 2 if world_size % 2 == 0 else 1


# --------------------------------------------------------------------------- operators of the model

@dataclass(frozen=True)
class Layout:
    """The model's per-snapshot operators (for durations and Alg. 1) and, per operator unit, the index
    of the :meth:`GroupView.convolve` call that runs it (None: not run through convolve)."""

    slots: list[Slot]
    convolve_call: dict[int, int]  # unit -> convolve call index (GCN pairs, in model order)
    hidden: int
    description: list[str]


def model_layout(model: torch.nn.Module, in_features: int, first_pair: bool = False) -> Layout:
    """Read the operators off the model's layers (dgbench.models.recurrent / discrete / attention).
    ``first_pair``: the first layer's aggregation runs (Fig. 11) instead of being precomputed."""
    slots: list[Slot] = []
    calls: dict[int, int] = {}
    names: list[str] = []
    conv = 0
    hidden = int(model.scorer.weight.shape[1] // 2)

    def gcn(fin: int, fout: int, precomputed: bool, commutative: bool = True) -> None:
        nonlocal conv
        unit = len({s.unit for s in slots})
        if precomputed:  # Ã X⁰ precomputed (ESDG §5.5): only the update runs
            slots.append(Slot("update", unit, fin, fin))
        else:
            slots.extend([Slot("aggregate", unit, fin, fout, commutative), Slot("update", unit, fin, fin, commutative)])
        calls[unit] = conv
        conv += 1

    def fixed(role: str, width: int) -> None:
        slots.append(Slot(role, len({s.unit for s in slots}), width, width, recurrent=True))

    for index, layer in enumerate(model.layers):
        kind = type(layer).__name__
        names.append(kind)
        first = index == 0 and not first_pair
        if kind == "GraphConvolution":
            gcn(*layer.weight.shape, precomputed=first)
        elif kind == "ConvolvedSequence":
            gcn(*layer.convolution.weight.shape, precomputed=first)
            fixed("lstm" if "LSTM" in type(layer.temporal).__name__ else "gru", layer.temporal.in_width)
        elif kind == "EvolveGCNOLayer":
            fixed("weight_lstm", layer.initial_weight.shape[0])
            gcn(*layer.initial_weight.shape, precomputed=first)
        elif kind == "CDGCNLayer":
            gcn(*layer.weight.shape, precomputed=first, commutative=False)
            fixed("lstm", layer.temporal.in_width)
        else:  # TM-GCN, DySAT, gate-wise T-GCN: a graph op and an update, in the model's own order
            weight = next(p for p in layer.parameters() if p.dim() == 2)
            gcn(*weight.shape, precomputed=first, commutative=False)
    return Layout(slots, calls, hidden, names)


def proxy_seconds(role: str, vertices: np.ndarray, edges: np.ndarray, width: int, hidden: int) -> np.ndarray:
    """Stated proxy when no predictor was fitted: multiply-adds of the op (unit-free; backward = 2x)."""
    v, e = np.asarray(vertices, np.float64), np.asarray(edges, np.float64)
    per_role = {"aggregate": (e + v) * width, "update": v * width * hidden,
                "lstm": v * 4 * (width + hidden) * hidden, "gru": v * 3 * (width + hidden) * hidden,
                "weight_lstm": np.full_like(v, width * 8.0 * hidden * hidden)}
    return per_role[role] * 1e-9


# --------------------------------------------------------------------------- plan

@dataclass
class Plan:
    """Who runs what, identical on every rank."""

    devices: int
    procs: int
    device: int
    slot: int
    targets: list[int]
    device_of: np.ndarray  # per target
    first: np.ndarray  # Eq. 2's p_i per target (counting a short group's padding)
    p1_steps: np.ndarray  # snapshots p1 actually runs per target
    exchanged: dict[tuple[int, int], frozenset[int]]  # (target index, step) -> convolve calls run exchanged
    steps: list[range] = field(default_factory=list)  # target indices of each optimiser step (group sync)
    profiled: bool = False  # built from the first epoch's measured durations
    report: dict[str, Any] = field(default_factory=dict)

    def mine_in(self, step: range) -> list[int]:
        """This device's groups of one optimiser step, in order."""
        return [i for i in step if self.device_of[i] == self.device]

    def mine(self) -> list[int]:
        """Indices (into targets) of this device's groups, in order."""
        return [i for i, d in enumerate(self.device_of) if d == self.device]

    def scorer_slot(self, index: int, group: range) -> int:
        """The process scoring target ``index``: p2, unless p1 runs the whole group."""
        if self.procs == 1:
            return 0
        return 0 if self.p1_steps[index] >= len(group) else 1


def _durations(trainer: DiscreteTrainer, layout: Layout, options: BladOptions, measured: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, Any, dict[str, Any]]:
    """Per input step: predicted forward and backward seconds (Eq. 2's l and b), and an op-duration
    function (role, direction, step, width) for Alg. 1. ``measured`` [steps, 2]: the first epoch's
    profile (forward, backward seconds per snapshot), which replaces the proxy's per-snapshot totals; Alg. 1's
    operators keep the proxy's shares of each snapshot's measured time."""
    data = trainer.data
    # full-graph groups: every vertex each step; a seed batch (§3.1): the vertices its sampler reached in each
    sampled = getattr(data, "sampled_vertices_per_step", None)
    vertices = sampled if sampled is not None else np.full(data.num_steps, data.num_nodes, np.int64)
    edges = data.edges_per_step
    if options.costmodel is not None:
        from dgbench.trainers.discrete.blad.predictor import load_predictor
        predictor, fitted = load_predictor(options.costmodel)
        if predictor.hidden != layout.hidden:
            raise DgbenchError(f"--costmodel {options.costmodel}: fitted with hidden width {predictor.hidden}, the run "
                               f"uses {layout.hidden}; refit with --hidden {layout.hidden}")

        def op(role: str, direction: str, steps: np.ndarray, width: int) -> np.ndarray:
            return predictor.duration(role, direction, vertices[steps], edges[steps], width)
        provenance = fitted.provenance()
    else:
        def op(role: str, direction: str, steps: np.ndarray, width: int) -> np.ndarray:
            forward = proxy_seconds(role, vertices[steps], edges[steps], width, layout.hidden)
            return forward if direction == "forward" else 2 * forward
        provenance = proxy_provenance("operation-count", "multiply-adds per operator (aggregation (E+V)·F, update "
                                      "V·F·H, LSTM/GRU V·gates·(F+H)·H); backward = 2x forward")
    if sampled is not None:  # --seed-batch: no profile (it times whole snapshots); each batch's own counts
        provenance = {**provenance, "per_seed_batch": "each seed batch planned from its sampled vertices and edges "
                      "per snapshot (§3.1); first-epoch profiling times whole snapshots and is not run"}
    every = np.arange(data.num_steps)
    forward = np.asarray(sum(op(s.role, "forward", every, s.width) for s in layout.slots), np.float64)
    backward = np.asarray(sum(op(s.role, "backward", every, s.width) for s in layout.slots), np.float64)
    if measured is None or options.costmodel is not None:
        return forward, backward, op, provenance
    proxy_op, scale = op, {"forward": measured[:, 0] / np.maximum(forward, 1e-30),
                           "backward": measured[:, 1] / np.maximum(backward, 1e-30)}

    def profiled(role: str, direction: str, steps: np.ndarray, width: int) -> np.ndarray:
        return proxy_op(role, direction, steps, width) * scale[direction][steps]
    profile = {"source": "profiled", "method": "first epoch (§4 step 1): every snapshot's forward and backward timed "
               "alone (one snapshot from the initial state, autograd.grad: no gradient kept), the snapshots split "
               "over the ranks and the seconds shared; operators keep the proxy's shares",
               "forward_seconds_total": float(measured[:, 0].sum()),
               "backward_seconds_total": float(measured[:, 1].sum())}
    return measured[:, 0].astype(np.float64), measured[:, 1].astype(np.float64), profiled, profile


def optimiser_steps(options: BladOptions, group_batch: int, targets: int, devices: int) -> list[range]:
    """Target indices per optimiser step: consecutive group batches under ``--blad-sync group`` (§5.1's
    aggregation after each device's group), every target at once under ``epoch``. A step with fewer groups
    than devices gives one group each to its first devices."""
    if options.blad_sync == "epoch":
        if group_batch:
            raise DgbenchError(f"--blad-sync epoch steps once per epoch: give --group-batch 0, not {group_batch}")
        return step_ranges(targets, 0)
    return step_ranges(targets, group_batch)  # a step with fewer groups than devices leaves some idle (recorded)


def make_plan(trainer: DiscreteTrainer, schedule: BladSchedule) -> Plan:
    options, ctx, data = schedule.options, trainer.ctx, trainer.data
    procs = resolved_procs(options, ctx.world_size)
    if ctx.world_size % procs:
        raise DgbenchError(f"--procs-per-device {procs}: the world size {ctx.world_size} is not a multiple of it")
    devices = ctx.world_size // procs
    layout = model_layout(trainer.model, data.in_features, first_pair=options.first_layer == "pair")
    started = time.perf_counter()
    step_forward, step_backward, op, provenance = _durations(trainer, layout, options, schedule.profile)
    predict_s = time.perf_counter() - started
    length = data.group_length
    targets = schedule.targets(trainer)
    if len(targets) < devices:
        raise DgbenchError(f"{len(targets)} training targets cannot keep {devices} devices busy; use fewer ranks")
    # [targets, L]: a short group is padded at its start with zero-length snapshots
    members = np.array([[t for t in range(s - length + 1, s + 1)] for s in targets])
    real = members >= 0
    forward = np.where(real, step_forward[np.maximum(members, 0)], 0.0)
    backward = np.where(real, step_backward[np.maximum(members, 0)], 0.0)
    steps = optimiser_steps(options, schedule.group_batch, len(targets), devices)
    device_of = np.zeros(len(targets), np.int64)
    first = np.full(len(targets), length, np.int64)  # procs = 1: the whole group on the one process
    dp_s = 0.0
    predicted_steps: dict[int, list[float]] = {}  # Eq. 2's value of each step's pipeline, per device
    variant = CORRECTED if options.eq2 == "corrected" else PAPER
    for step in steps:  # each step's groups over the devices, then Eq. 2 per device (the pipeline drains per step)
        loads = (forward + backward).sum(1)[list(step)]
        ranges = assign_groups(loads, devices, options.assign) if len(step) >= devices \
            else [range(i, i + 1) for i in range(len(step))]
        for d, r in enumerate(ranges):
            mine = [step[i] for i in r]
            device_of[mine] = d
            if procs != 2 or not mine:
                continue
            started = time.perf_counter()
            if options.balance == "dp":
                split = balance_split(forward[mine], backward[mine], variant)
                first[mine], value = split.first, split.predicted
            else:
                first[mine] = even_split(len(mine), length)
                value = None
            dp_s += time.perf_counter() - started
            if value is not None:
                predicted_steps.setdefault(d, []).append(value)
    predicted = {d: sum(values) for d, values in predicted_steps.items()} if options.balance == "dp" else \
        {d: None for d in range(devices)} if procs == 2 else {}
    if schedule.given_plan is not None:  # a dry run of a run whose plan came from its profile
        device_of = np.asarray(schedule.given_plan["device_of_target"], np.int64)
        first = np.asarray(schedule.given_plan["p1_snapshots"], np.int64)
    pad = (~real).sum(1)
    p1_steps = np.maximum(0, first - pad)
    plan = Plan(devices, procs, ctx.rank // procs, ctx.rank % procs, targets, device_of, first, p1_steps, {}, steps,
                schedule.profile is not None or schedule.given_plan is not None)
    reorder_s = 0.0
    if procs == 2 and schedule.reorder:
        started = time.perf_counter()
        plan.exchanged = _topology_decisions(plan, trainer, layout, op)
        reorder_s = time.perf_counter() - started
    grouped = options.blad_sync == "group"
    plan.report = {"table3": table3_group(trainer.model, devices if grouped else ctx.world_size),
                   "sync": {"mode": options.blad_sync, "optimiser_steps": len(steps) if grouped else 1,
                            "group_batch": schedule.group_batch,
                            "idle_device_steps": sum(max(0, devices - len(step)) for step in steps),
                            "order": "inside each device (p2 -> p1), across devices (p1s), back (p1 -> p2)"
                            if grouped else "one all-reduce over every process"},
                   "devices": devices,
                   "procs_per_device": procs, "group_length": length,
                   "device_of_target": device_of.tolist(), "p1_snapshots": first.tolist(),
                   "p1_real_snapshots": p1_steps.tolist(), "eq2_predicted_seconds": predicted,
                   "durations": provenance, "operators": [f"{s.role}({s.width})" for s in layout.slots],
                   "layers": layout.description, "reorder": schedule.reorder,
                   "pairs_exchanged": sum(len(v) for v in plan.exchanged.values()),
                   "first_layer": options.first_layer,
                   "pairs_exchanged_by_layer": {str(call): sum(call in v for v in plan.exchanged.values())
                                                for call in sorted(set(layout.convolve_call.values()))},
                   "overhead_seconds": {"prediction": predict_s, "dp": dp_s, "reordering": reorder_s,
                                        "profiling": schedule.profile_seconds}}
    return plan


def parameter_split(model: torch.nn.Module) -> dict[str, int]:
    """Table 3's W_GNN and W_RNN (and the link scorer, which Table 3 leaves out), in elements."""
    out = {"gnn": 0, "rnn": 0, "scorer": 0}
    for name, p in model.named_parameters():
        kind = "scorer" if name.startswith("scorer") else \
            "rnn" if any(k in name for k in ("temporal", "evolution")) else "gnn"
        out[kind] += p.numel()
    return out


def table3_group(model: torch.nn.Module, ranks: int) -> dict[str, int]:
    """Table 3's row for snapshot-group partitioning (§5.3, :func:`dgbench.trainers.discrete.blad.table3.table3`):
    every rank all-reduces the GNN and RNN parameters (p·W_GNN + p·W_RNN, p = ranks in the all-reduce)
    and the scorer's, and no features cross devices."""
    split = parameter_split(model)
    row = table3("group", ranks=ranks, w_gnn=split["gnn"], w_rnn=split["rnn"], w_scorer=split["scorer"],
                 group_lengths=())
    return {"ranks": ranks, "gnn_param": row.gnn_param, "rnn_param": row.rnn_param,
            "scorer_param": row.scorer_param, "features": row.features, "gradients_total": row.gradients}


def _topology_decisions(plan: Plan, trainer: DiscreteTrainer, layout: Layout, op: Any
                        ) -> dict[tuple[int, int], frozenset[int]]:
    """Alg. 1 per pipeline period of every device: p1's forward of sg_i^a against p2's of sg_{i-1}^b."""
    data = trainer.data
    decided: dict[tuple[int, int], frozenset[int]] = {}

    def part(index: int, which: str) -> list[int]:
        group = data.group_of(plan.targets[index])
        k = int(plan.p1_steps[index])
        return list(group)[:k] if which == "a" else list(group)[k:]

    def operators(steps: list[int]):
        table = {k: (op(s.role, "forward", np.array(steps), s.width), op(s.role, "forward", np.array(steps),
                                                                        s.swapped_width))
                 for k, s in enumerate(layout.slots)}
        return operators_for(layout.slots, lambda i, k: (float(table[k][0][i]), float(table[k][1][i])), len(steps))

    for d in range(plan.devices):
        order = [i for i, dev in enumerate(plan.device_of) if dev == d]
        for position, index in enumerate(order):
            first_steps = part(index, "a")
            second_steps = part(order[position - 1], "b") if position else []
            if not first_steps or not second_steps:
                continue
            schedule = manage_topology(operators(first_steps), operators(second_steps))
            for process, (target, steps) in enumerate(((index, first_steps), (order[position - 1], second_steps))):
                for snapshot, unit in schedule.exchanged[process]:
                    key = (target, steps[snapshot])
                    decided[key] = decided.get(key, frozenset()) | {layout.convolve_call[unit]}
    return decided


# --------------------------------------------------------------------------- views

class GroupView(LayoutSequence):
    """Steps [a, b) of one rank, every vertex, no layout change (a device holds whole snapshots, §5.1).
    :meth:`convolve` runs a GCN pair in the order the topology manager chose for each step."""

    def __init__(self, placement: BladPlacement, steps: range):
        data, device = placement.data, placement.ctx.device
        self.placement, self.block = placement, steps
        self.per_step = [SparseOperator(data.adjacency[t].to_torch(device)) for t in steps]
        self.operator = SparseOperator(block_diagonal([o.csr for o in self.per_step])) if len(steps) else None
        self.first_input = torch.from_numpy(data.first_layer_input[steps.start:steps.stop]).to(device)
        self._features: torch.Tensor | None = None
        self.exchanged: list[frozenset[int]] = [frozenset()] * len(steps)
        self._calls = 0

    def for_forward(self, exchanged: list[frozenset[int]]) -> GroupView:
        """This view for one forward pass, with each step's exchanged convolve calls."""
        twin = object.__new__(GroupView)
        twin.__dict__.update(self.__dict__)
        twin.exchanged, twin._calls = exchanged, 0
        return twin

    @property
    def num_steps(self) -> int:
        return len(self.block)

    @property
    def local_steps(self) -> slice:
        return slice(0, len(self.block))

    @property
    def vertex_rows(self) -> int:
        return self.placement.vertex_rows

    def aggregate(self, x: torch.Tensor | None) -> torch.Tensor:
        if x is None and not self.placement.first_pair:
            return self.first_input
        if x is None:  # the first layer's aggregation, run (Fig. 11) rather than precomputed
            x = self.input_features()
        steps, rows, width = x.shape
        return spmm(self.operator, x.reshape(steps * rows, width)).view(steps, rows, width)

    def convolve(self, x: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor | None = None
                 ) -> torch.Tensor:
        """Ã x W (+ b) per step; a step whose pair was exchanged runs Ã (x W) (Eq. 4), the others (Ã x) W.
        ``weight``: [in, out], or [steps, in, out] per step (EvolveGCN-O)."""
        call = self._calls
        self._calls += 1
        swap = [call in chosen for chosen in self.exchanged]
        if x is None and self.placement.first_pair:
            x = self.input_features()
        if x is None or not any(swap):
            return super().convolve(x, weight, bias)
        self.placement.exchanges_run += sum(swap)
        self.placement.exchanges_by_layer[call] = self.placement.exchanges_by_layer.get(call, 0) + sum(swap)
        outs = []
        for i, op in enumerate(self.per_step):
            w = weight[i] if weight.dim() == 3 else weight
            outs.append(spmm(op, x[i] @ w) if swap[i] else spmm(op, x[i]) @ w)
        out = torch.stack(outs)
        return out if bias is None else out + bias

    def input_features(self) -> torch.Tensor:
        if self._features is None:
            frames = np.stack(self.placement.data.degree_features[self.block.start:self.block.stop])
            self._features = torch.from_numpy(frames).to(self.placement.ctx.device)
        return self._features

    def attend(self, dst_score: torch.Tensor, src_score: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        steps, rows, heads, width = values.shape
        out = graph_attention(self.operator, dst_score.reshape(-1, heads), src_score.reshape(-1, heads),
                              values.reshape(-1, heads, width))
        return out.view(steps, rows, heads, width)

    def to_vertex(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def to_time(self, z: torch.Tensor) -> torch.Tensor:
        return z


class BladPlacement(Placement):
    """Whole snapshots of the device's groups on each of its processes (§5.1); views built on first use."""

    def __init__(self, ctx: DistContext, data: DiscreteData, first_pair: bool = False):
        super().__init__(ctx, data, 1)
        self.first_pair = first_pair  # --first-layer pair: the first aggregation runs in every forward pass
        self.exchanges_by_layer: dict[int, int] = {}  # convolve call (GCN layer) -> pairs run exchanged
        self._views: dict[tuple[int, int], GroupView] = {}
        self.plan: Plan | None = None
        self.schedule_report: dict[str, Any] = {}
        self.exchanges_run = 0  # GCN pairs run as Ã (x W) by this rank, over the run

    def view_of(self, steps: range, timer: PhaseTimer) -> GroupView:
        key = (steps.start, steps.stop)
        if key not in self._views:
            with timer.phase("transfer"):
                self._views[key] = GroupView(self, steps)
        return self._views[key]

    def owned(self, batch: PairBatch) -> PairBatch:
        raise DgbenchError("BLAD's pairs are assigned by its schedule")

    def score_table(self, view: GroupView, halves: torch.Tensor, batches: list[PairBatch]) -> tuple[torch.Tensor, int]:
        return halves, view.block.start

    def comm_shape(self, trainer: Any, units: list[range], passes: list[int], pairs: list[PairBatch]
                   ) -> CommShape:
        """BLAD §5: each device runs whole groups; with two processes per device, p1 (rank 2d) hands the state
        after its p_i snapshots to p2 (rank 2d+1) point to point, preceded by its shape, and gets the gradient
        back. The two processes share one device, so each is given the device's whole work (no overlap
        credited: an upper bound on BLAD's compute, which §6 overlaps)."""
        if self.plan is None:
            return super().comm_shape(trainer, units, passes, pairs)
        data, plan, world = self.data, self.plan, self.ctx.world_size
        nnz = data.nonzeros_per_step()
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
        point_to_point = {"intra:state": POINT_TO_POINT, "intra:state_grad": POINT_TO_POINT, "counts": POINT_TO_POINT}
        patterns, reduced = {"intra:state": state, "intra:state_grad": grads}, None
        syncs = len(plan.steps) if plan.report.get("sync", {}).get("mode") == "group" else 0
        if syncs:  # per optimiser step: p2 -> p1 -> p2 inside each device, an all-reduce over the p1s (§5.1)
            parameters = sum(p.numel() for p in trainer.model.parameters())
            reduced = np.zeros(world, np.int64)
            reduced[::plan.procs] = syncs * parameters if plan.devices > 1 else 0
            if plan.procs == 2:
                inside = np.zeros((world, world), np.int64)
                for device in range(plan.devices):
                    inside[2 * device, 2 * device + 1] = inside[2 * device + 1, 2 * device] = syncs * parameters
                patterns["intra:gradients"] = inside
                point_to_point["intra:gradients"] = POINT_TO_POINT
        return CommShape(patterns, {"counts": control} if dims else {}, edges[spread], cells[spread], steps[spread],
                         PLAN, point_to_point, reduced)

    def absorb(self, batch_placement: Placement) -> None:
        """A seed batch's counts added to the run's, its plan (the last batch's) kept for the record."""
        assert isinstance(batch_placement, BladPlacement)
        self.plan = batch_placement.plan
        self.exchanges_run += batch_placement.exchanges_run
        for call, n in batch_placement.exchanges_by_layer.items():
            self.exchanges_by_layer[call] = self.exchanges_by_layer.get(call, 0) + n
        for key, value in batch_placement.schedule_report.items():
            if isinstance(value, list):
                self.schedule_report.setdefault(key, []).extend(value)
            else:
                self.schedule_report[key] = value

    def extra(self) -> dict[str, Any]:
        """The plan and, summed over the ranks (one all-reduce after training, every rank calls this
        once), the GCN pairs run exchanged: epochs × the decided pairs when the manager is on."""
        layers = sorted(self.plan.report.get("pairs_exchanged_by_layer", {})) if self.plan else []
        ran = torch.tensor([float(self.exchanges_run)] + [float(self.exchanges_by_layer.get(int(call), 0))
                                                          for call in layers], dtype=torch.float64,
                           device=self.ctx.device)
        if self.ctx.world_size > 1:
            self.ctx.comm.all_reduce(ran, tag="blad:report")
        return {"blad": {**(self.plan.report if self.plan else {}), **self.schedule_report,
                         "exchanges_run": int(ran[0].item()),
                         "exchanges_run_by_layer": {call: int(n) for call, n in zip(layers, ran[1:].tolist())}}}


# --------------------------------------------------------------------------- the channel between a device's processes

class PairChannel:
    """The hand-over between p1 and p2 of one device (§5.2.1): state forward, its gradient back.

    Point to point on the device's process group, counted (``intra:state``, ``intra:state_grad``);
    each state's shapes go first under the control tag ``counts``. Boolean tensors travel as bytes."""

    def __init__(self, comm: Comm, like: list[State]):
        self.comm, self.peer = comm, 1 - comm.rank
        self.structure = [[(t.dtype, t.dim()) for t in layer] for layer in like]
        self.pending: list[Any] = []

    def _send(self, tensor: torch.Tensor, tag: str) -> None:
        tensor = tensor.detach().to(torch.uint8) if tensor.dtype == torch.bool else tensor.detach()
        self.pending.append((tensor, self.comm.send_async(tensor, self.peer, tag)))

    def send_state(self, state: list[State]) -> None:
        flat = [t for layer in state for t in layer]
        if flat:
            self._send(torch.tensor([d for t in flat for d in t.shape], dtype=torch.int64), "counts")
        for t in flat:
            self._send(t, "intra:state")

    def recv_state(self, device: torch.device) -> list[State]:
        """The state as leaves (floating tensors require grad) in the model's structure."""
        dims = [dim for layer in self.structure for _, dim in layer]
        if not dims:
            return [() for _ in self.structure]
        shape = self.comm.recv(torch.empty(sum(dims), dtype=torch.int64), self.peer, "counts").tolist()
        out, at = [], 0
        for layer in self.structure:
            tensors = []
            for dtype, dim in layer:
                size = shape[at:at + dim]
                at += dim
                wire = torch.uint8 if dtype == torch.bool else dtype
                t = self.comm.recv(torch.empty(size, dtype=wire), self.peer, "intra:state").to(device)
                t = t.bool() if dtype == torch.bool else t
                tensors.append(t.requires_grad_(t.is_floating_point()))
            out.append(tuple(tensors))
        return out

    def send_grads(self, leaves: list[State]) -> None:
        for t in (t for layer in leaves for t in layer if t.is_floating_point()):
            self._send(t.grad if t.grad is not None else torch.zeros_like(t), "intra:state_grad")

    def recv_grads(self, state: list[State]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(state tensor, its gradient) for every floating tensor p1 sent."""
        out = []
        for t in (t for layer in state for t in layer if t.is_floating_point()):
            grad = self.comm.recv(torch.empty(t.shape, dtype=t.dtype), self.peer, "intra:state_grad")
            out.append((t, grad.to(t.device)))
        return out

    def flush(self) -> None:
        for _, wait in self.pending:
            wait()
        self.pending.clear()


def state_elements(state: list[State]) -> tuple[int, int]:
    """(all elements, floating elements) of a state: what the channel moves forward and back."""
    flat = [t for layer in state for t in layer]
    return sum(t.numel() for t in flat), sum(t.numel() for t in flat if t.is_floating_point())


# --------------------------------------------------------------------------- the schedule

class BladSchedule(GroupSchedule):
    """BLAD's epoch on one rank: this device's groups, whole (one process) or as the §5.2.1 pipeline."""

    def __init__(self, options: BladOptions, reorder: bool):
        self.options, self.reorder = options, reorder
        self.plan: Plan | None = None
        self.channel: PairChannel | None = None
        self.profile: np.ndarray | None = None  # [steps, 2] first-epoch seconds (forward, backward) per snapshot
        self.profile_seconds = 0.0
        self.given_plan: dict[str, Any] | None = None  # a recorded plan (dry runs of a profiled run)
        self.epochs_run = 0
        self.process_comm: Comm | None = None  # the device's two processes
        self.device_comm: Comm | None = None  # the devices' first processes (p1s), with two per device

    def steps_optimizer(self) -> bool:
        return self.options.blad_sync == "group"

    def _ready(self, trainer: DiscreteTrainer, replan: bool = False) -> Plan:
        """The plan, made at first use; ``replan`` (an epoch's start): remade once from the first epoch's profile."""
        placement = trainer.placement
        assert isinstance(placement, BladPlacement)
        if placement.plan is not None and replan and self.profile is not None and not placement.plan.profiled:
            placement.plan = make_plan(trainer, self)
        if placement.plan is None:  # the run's placement, or a seed batch's (§3.1: each batch plans its own)
            placement.plan = make_plan(trainer, self)
        first = self.plan is None
        self.plan = placement.plan
        if first:
            if self.options.pin == "pair":
                placement.schedule_report["cores"] = _pin(self.plan)
            if self.plan.procs == 2:
                mesh = make_mesh(trainer.ctx, device=self.plan.devices, process=2)
                self.process_comm, self.device_comm = mesh.comm("process"), mesh.comm("device")
                self.channel = PairChannel(self.process_comm, trainer.initial_state())
        return self.plan

    def assign(self, trainer: DiscreteTrainer, pairs: list[PairBatch]) -> list[list[PairBatch]]:
        """Per group of this device, in order: the target's pairs on the scoring process, else none."""
        plan = self._ready(trainer, replan=True)
        placement = trainer.placement
        assert isinstance(placement, BladPlacement)
        placement.schedule_report.setdefault("pairs_exchanged_by_epoch", []).append(
            plan.report.get("pairs_exchanged_by_layer", {}))
        by_step = {b.step: b for b in pairs}
        self.step_pairs = [sum(len(by_step[plan.targets[i]].src) for i in step) for step in plan.steps]
        out = []
        for index in plan.mine():
            batch = by_step[plan.targets[index]]
            scorer = plan.scorer_slot(index, trainer.data.group_of(batch.step))
            out.append([batch if scorer == plan.slot else batch.select(np.zeros(len(batch.src), bool))])
        return out

    def forward_backward(self, trainer: DiscreteTrainer, batches: list[list[PairBatch]], total_pairs: int,
                         timer: PhaseTimer) -> float:
        """Per optimiser step (one per epoch under ``--blad-sync epoch``): this device's groups of the step,
        whole or through the pipeline, the loss divided by the step's pairs; under ``group`` the gradients
        are then summed hierarchically and the optimiser steps (the pipeline drains at each step)."""
        plan = self._ready(trainer)
        grouped = self.steps_optimizer()
        run = self._whole_groups if plan.procs == 1 else self._first_process if plan.slot == 0 \
            else self._second_process
        of_index = dict(zip(plan.mine(), batches))
        total = 0.0
        for step, pairs in zip(plan.steps, self.step_pairs):
            mine = plan.mine_in(step)
            divisor = pairs if grouped else total_pairs
            loss = run(trainer, mine, [of_index[i] for i in mine], divisor, timer)
            total += loss * divisor / max(total_pairs, 1) if grouped else loss
            if grouped:
                self._reduce_gradients(trainer)
                trainer.optimizer.step()
                trainer.optimizer.zero_grad(set_to_none=False)
        self.epochs_run += 1
        minibatch = hasattr(trainer.data, "sampled_vertices_per_step")  # each batch planned from its own counts
        if self.epochs_run == 1 and self.options.costmodel is None and self.options.durations == "profile" \
                and not minibatch:
            started = time.perf_counter()
            self.profile = _profile_snapshots(trainer, timer)
            self.profile_seconds = time.perf_counter() - started
        return total

    def _reduce_gradients(self, trainer: DiscreteTrainer) -> None:
        """§5.1's aggregation, hierarchical: p2's gradients to p1 inside the device (``intra:gradients``),
        an all-reduce over the devices' p1s (``gradients``), the sum back to p2 (``intra:gradients``).
        With one process per device: an all-reduce over the devices."""
        assert self.plan is not None
        if self.plan.procs == 1:
            trainer.gradients.synchronise()
            return
        assert self.process_comm is not None and self.device_comm is not None
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in trainer.model.parameters()])
        if self.plan.slot == 1:
            self.process_comm.send_async(flat, 0, "intra:gradients")()
            self.process_comm.recv(flat, 0, "intra:gradients")
        else:
            flat += self.process_comm.recv(torch.empty_like(flat), 1, "intra:gradients")
            if self.plan.devices > 1:
                self.device_comm.all_reduce(flat, "gradients")
            self.process_comm.send_async(flat, 1, "intra:gradients")()
        trainer.gradients.load(flat)

    def _view(self, trainer: DiscreteTrainer, index: int, steps: list[int], timer: PhaseTimer) -> GroupView:
        assert self.plan is not None
        view = trainer.placement.view_of(range(steps[0], steps[-1] + 1), timer)
        return view.for_forward([self.plan.exchanged.get((index, t), frozenset()) for t in steps])

    def _loss(self, trainer: DiscreteTrainer, view: GroupView, state: list[State], pairs: list[PairBatch],
              total_pairs: int) -> torch.Tensor:
        halves, _ = trainer.model.forward_block(view, state)
        logits = trainer.placement.score(view, halves, pairs, trainer.model.scorer.bias)
        labels = torch.from_numpy(np.concatenate([b.label for b in pairs])).to(logits.device)
        return F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / max(total_pairs, 1)

    def _whole_groups(self, trainer: DiscreteTrainer, indices: list[int], batches: list[list[PairBatch]],
                      total_pairs: int, timer: PhaseTimer) -> float:
        assert self.plan is not None
        total = 0.0
        for index, pairs in zip(indices, batches):
            steps = list(trainer.data.group_of(self.plan.targets[index]))
            loss = self._loss(trainer, self._view(trainer, index, steps, timer), trainer.initial_state(), pairs,
                              total_pairs)
            loss.backward()
            total += loss.item()
        return total

    def _first_process(self, trainer: DiscreteTrainer, indices: list[int], batches: list[list[PairBatch]],
                       total_pairs: int, timer: PhaseTimer) -> float:
        """p1: forward(sg_i^a), hand over, forward(sg_{i+1}^a), then backward(sg_i^a) when its gradient
        arrives (the queue q of Fig. 9b). A group p1 holds whole (Eq. 2 as printed allows p_i = group)
        is trained here completely, loss included."""
        plan, channel = self.plan, self.channel
        assert plan is not None and channel is not None
        queue: deque[list[State] | None] = deque()
        total = 0.0
        for index, pairs in zip(indices, batches):
            group = list(trainer.data.group_of(plan.targets[index]))
            k = int(plan.p1_steps[index])
            if k >= len(group):
                loss = self._loss(trainer, self._view(trainer, index, group, timer), trainer.initial_state(), pairs,
                                  total_pairs)
                loss.backward()
                total += loss.item()
                queue.append(None)
            elif k:
                _, state = trainer.model.forward_block(self._view(trainer, index, group[:k], timer),
                                                       trainer.initial_state())
                channel.send_state(state)
                queue.append(state)
            else:
                queue.append(None)
            if len(queue) == 2:
                self._backward_first(queue.popleft())
        while queue:
            self._backward_first(queue.popleft())
        channel.flush()
        return total

    def _backward_first(self, state: list[State] | None) -> None:
        if state is None:
            return
        assert self.channel is not None
        pairs = [(t, g) for t, g in self.channel.recv_grads(state) if t.requires_grad]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])

    def _second_process(self, trainer: DiscreteTrainer, indices: list[int], batches: list[list[PairBatch]],
                        total_pairs: int, timer: PhaseTimer) -> float:
        """p2: receive sg_i^a's state, forward and backward sg_i^b with the loss, return the gradient."""
        plan, channel = self.plan, self.channel
        assert plan is not None and channel is not None
        total = 0.0
        for index, pairs in zip(indices, batches):
            group = list(trainer.data.group_of(plan.targets[index]))
            k = int(plan.p1_steps[index])
            if k >= len(group):  # p1 trains this group alone
                continue
            state = channel.recv_state(trainer.ctx.device) if k else trainer.initial_state()
            loss = self._loss(trainer, self._view(trainer, index, group[k:], timer), state, pairs, total_pairs)
            loss.backward()
            total += loss.item()
            if k:
                channel.send_grads(state)
        channel.flush()
        return total

    def predicted_elements(self, trainer: DiscreteTrainer, profile: CommProfile, pairs: list[PairBatch]
                           ) -> dict[str, int] | None:
        """Across devices nothing but the gradients (Table 3's group row: no feature column); inside a
        device, per group p1 splits, its state after p1's snapshots forward and the floating part of it
        back. State sizes are read off a no-grad forward of the model over k snapshots (k = 1..L-1)."""
        plan = self._ready(trainer)
        out = self._gradient_elements(trainer)
        if plan.procs == 1:
            return out
        sizes: dict[int, tuple[int, int]] = {}
        forward = backward = 0
        for index, k in enumerate(plan.p1_steps.tolist()):
            group = trainer.data.group_of(plan.targets[index])
            if not k or k >= len(group):
                continue
            if k not in sizes:
                sizes[k] = _state_size_after(trainer, group, k)
            forward += sizes[k][0]
            backward += sizes[k][1]
        return {**out, **{tag: n for tag, n in (("intra:state", forward), ("intra:state_grad", backward)) if n}}

    def _gradient_elements(self, trainer: DiscreteTrainer) -> dict[str, int]:
        """Under ``--blad-sync group``, per optimiser step: every parameter all-reduced over the devices
        (their p1s; none with one device) and, with two processes per device, sent p2 -> p1 and back.
        Under ``epoch`` the loop's one all-reduce over every process (not predicted here, as for every scheme)."""
        assert self.plan is not None
        if not self.steps_optimizer():
            return {}
        plan, parameters = self.plan, sum(p.numel() for p in trainer.model.parameters())
        steps = len(plan.steps)
        across = plan.devices * parameters * steps if plan.devices > 1 else 0
        inside = {"intra:gradients": 2 * plan.devices * parameters * steps} if plan.procs == 2 else {}
        return {"gradients": across, **inside}

    @torch.no_grad()
    def evaluate(self, trainer: DiscreteTrainer, which: tuple[str, ...] = (VAL, TEST)
                 ) -> dict[str, dict[str, float]]:
        """Rank 0 scores the validation and test targets from their whole groups; the rows are shared."""
        timer = PhaseTimer(trainer.ctx.device)
        out = {}
        for split in which:
            rows = [torch.zeros((0, 2), dtype=torch.float64, device=trainer.ctx.device)]
            if trainer.ctx.rank == 0:
                for batch in trainer.data.split_pairs(split):
                    view = trainer.placement.view_of(trainer.data.group_of(batch.step), timer)
                    halves, _ = trainer.model.forward_block(view.for_forward([frozenset()] * view.num_steps),
                                                            trainer.initial_state())
                    logits = pair_logits(halves, view.block.start, [batch], trainer.model.scorer.bias)
                    rows.append(trainer.pair_rows(logits, [batch]))
            gathered = trainer.ctx.comm.all_gather_uneven(torch.cat(rows), tag="evaluation")
            out.update(trainer.split_metrics(split, gathered))  # the run's evaluation sets, as every scheme
        return out


def _profile_snapshots(trainer: DiscreteTrainer, timer: PhaseTimer) -> np.ndarray:
    """§4 step 1: [steps, 2] forward and backward seconds of every input snapshot, each run alone from the
    initial state (backward by autograd.grad: the parameters' gradients are left alone). Rank r times the
    snapshots t ≡ r (mod P); one all-reduce (``blad:profile``) gives every rank the same table, so every
    rank computes the same plan from it."""
    ctx, model = trainer.ctx, trainer.model
    seconds = torch.zeros((trainer.data.num_steps, 2), dtype=torch.float64, device=ctx.device)
    parameters = [p for p in model.parameters() if p.requires_grad]
    for t in range(ctx.rank, trainer.data.num_steps, ctx.world_size):
        view = trainer.placement.view_of(range(t, t + 1), timer).for_forward([frozenset()])
        started = time.perf_counter()
        halves, _ = model.forward_block(view, trainer.initial_state())
        forward = time.perf_counter() - started
        started = time.perf_counter()
        torch.autograd.grad(halves.sum(), parameters, allow_unused=True)
        seconds[t, 0], seconds[t, 1] = forward, time.perf_counter() - started
    if ctx.world_size > 1:
        ctx.comm.all_reduce(seconds, tag="blad:profile")
    return seconds.cpu().numpy()


@torch.no_grad()
def _state_size_after(trainer: DiscreteTrainer, group: range, k: int) -> tuple[int, int]:
    view = trainer.placement.view_of(range(group.start, group.start + k), PhaseTimer())
    _, state = trainer.model.forward_block(view.for_forward([frozenset()] * k), trainer.initial_state())
    return state_elements(state)


def _pin(plan: Plan) -> dict[str, Any]:
    """Both processes of a device on the device's share of this job's cores, half its threads each."""
    cores = sorted(os.sched_getaffinity(0))
    share = np.array_split(np.array(cores), plan.devices)[plan.device] if len(cores) >= plan.devices \
        else np.array(cores)
    os.sched_setaffinity(0, {int(c) for c in share})
    threads = max(1, len(share) // plan.procs)
    torch.set_num_threads(threads)
    return {"cores": [int(c) for c in share], "threads": threads}


def busy_balance(per_rank_compute_s: list[float], procs: int) -> dict[str, float]:
    """Per device, max / min busy (compute) seconds of its processes and §3.3.2's sync ratio."""
    out = {}
    for d in range(len(per_rank_compute_s) // procs):
        busy = per_rank_compute_s[d * procs:(d + 1) * procs]
        out[f"device{d}"] = {"max_over_min": max(busy) / max(min(busy), 1e-12), "sync_ratio": sync_ratio(busy)}
    return out
