"""BLAD's overlap-aware topology manager (Fu et al., SC'23, §6: Eq. 3, Alg. 1, Eq. 4, Table 4).

Per-model operator layouts, Alg. 1 choosing (ÃX)W or Ã(XW) per GCN pair to maximise Eq. 3's
deployment reward, and ``gcn_pair`` in either order.
See docs/blad.md (section "Alg. 1 (topology manager)").
"""
from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from dgbench.errors import DgbenchError
from dgbench.models.sparse import SparseOperator, spmm

COMPUTE, MEMORY = True, False  # f = 1 (feature update, RNN) and f = 0 (graph aggregation), §6.2
OPERATOR_CLASS = {"aggregate": MEMORY, "update": COMPUTE, "lstm": COMPUTE, "gru": COMPUTE, "weight_lstm": COMPUTE}


@dataclass(frozen=True)
class Slot:
    """One operator of a model's per-snapshot topology, in the model's default order."""

    role: str  # an operator of dgbench.trainers.discrete.blad.predictor.OPERATORS
    unit: int  # consecutive slots of one unit form a pair (or a single fixed op); units run in order
    width: int  # input feature width in the default order
    swapped_width: int  # input width when the pair runs the other way (aggregate after update: output width)
    commutative: bool = False
    recurrent: bool = False  # reads its own output at the previous snapshot (RNN state, evolved weight)


def model_topology(model: str, in_features: int, hidden: int, precomputed_first: bool = False) -> list[Slot]:
    """The per-snapshot operators of a model (§7.1: two GCN layers, each one update + one aggregation).

    ``wdgcn`` / ``tgcn``: GCN, GCN, then an LSTM / GRU per vertex (Eq. 1's GNN-then-RNN layout, as
    dgbench.models.recurrent builds them). ``evolvegcn-o``: per layer an LSTM step over the weight,
    then the GCN. ``cdgcn``: per layer the aggregation (not commutative), update and an LSTM.
    """
    def gcn(unit: int, fin: int, fout: int, commutative: bool = True) -> list[Slot]:
        if unit == 0 and precomputed_first:
            return [Slot("update", unit, fin, fin)]
        return [Slot("aggregate", unit, fin, fout, commutative), Slot("update", unit, fin, fin, commutative)]

    if model in ("wdgcn", "tgcn"):
        rnn = "lstm" if model == "wdgcn" else "gru"
        return [*gcn(0, in_features, hidden), *gcn(1, hidden, hidden), Slot(rnn, 2, hidden, hidden, recurrent=True)]
    if model == "evolvegcn-o":
        return [Slot("weight_lstm", 0, in_features, in_features, recurrent=True),
                *_shift(gcn(0, in_features, hidden), 1),
                Slot("weight_lstm", 2, hidden, hidden, recurrent=True), *_shift(gcn(1, hidden, hidden), 3)]
    if model == "cdgcn":
        return [*gcn(0, in_features, hidden, False), Slot("lstm", 1, in_features + hidden, in_features + hidden,
                                                          recurrent=True),
                *_shift(gcn(1, hidden, hidden, False), 2), Slot("lstm", 3, 2 * hidden, 2 * hidden, recurrent=True)]
    raise DgbenchError(f"BLAD topology: no operator layout for model {model!r} "
                       f"(known: wdgcn, tgcn, evolvegcn-o, cdgcn)")


def _shift(slots: list[Slot], unit: int) -> list[Slot]:
    return [replace(s, unit=unit) for s in slots]


@dataclass(frozen=True)
class Operator:
    """One operator instance a process will run: which snapshot, which slot, how long."""

    snapshot: int  # position of the snapshot in this process's list (recurrence runs along it)
    slot: int  # index into the topology
    role: str
    unit: int
    compute: bool  # f = 1 compute-bound, 0 memory-bound
    duration: float  # predicted seconds in the default order
    swapped_duration: float  # predicted seconds when its pair runs the other way
    commutative: bool
    recurrent: bool

    @property
    def key(self) -> tuple[int, int]:
        return (self.snapshot, self.slot)


def operators_for(topology: list[Slot],
                  durations: list[tuple[float, float]] | Callable[[int, int], tuple[float, float]],
                  snapshots: int = 1, first_snapshot: int = 0) -> list[Operator]:
    """Operator instances of ``snapshots`` consecutive snapshots in default order. ``durations[k]``
    is (default, exchanged-order) seconds of slot k for every snapshot, or ``durations(s, k)`` per
    snapshot."""
    ops = []
    for s in range(first_snapshot, first_snapshot + snapshots):
        for k, slot in enumerate(topology):
            default, swapped = durations[k] if not callable(durations) else durations(s, k)
            ops.append(Operator(s, k, slot.role, slot.unit, OPERATOR_CLASS[slot.role], float(default),
                                float(swapped), slot.commutative, slot.recurrent))
    return ops


def predicted_operators(topology: list[Slot], predictor, vertices, edges, direction: str = "forward"
                        ) -> list[Operator]:
    """Operators of snapshots with the given V, E arrays, durations from a fitted
    :class:`~dgbench.trainers.discrete.blad.predictor.OperatorPredictor` (default and exchanged widths)."""
    vertices, edges = np.atleast_1d(vertices), np.atleast_1d(edges)
    table = {}
    for k, slot in enumerate(topology):
        table[k] = (predictor.duration(slot.role, direction, vertices, edges, slot.width),
                    predictor.duration(slot.role, direction, vertices, edges, slot.swapped_width))
    return operators_for(topology, lambda s, k: (table[k][0][s], table[k][1][s]), snapshots=len(vertices))


@dataclass(frozen=True)
class Placed:
    """An operator as scheduled: start and end on its process's clock, and its class."""

    op: Operator
    start: float
    end: float
    swapped: bool  # its pair runs in the exchanged order


@dataclass
class TopologySchedule:
    """Alg. 1's output: each process's execution queue EXE_k and the reward it achieves."""

    queues: tuple[list[Placed], list[Placed]]
    exchanged: tuple[set[tuple[int, int]], set[tuple[int, int]]] = field(default_factory=lambda: (set(), set()))

    @property
    def makespan(self) -> float:
        return max((q[-1].end for q in self.queues if q), default=0.0)

    def reward(self) -> float:
        """Eq. 3 over the whole schedule."""
        return deployment_reward(self.queues[0], self.queues[1])

    def order(self, process: int) -> list[Operator]:
        return [p.op for p in self.queues[process]]


def _xor_overlap(timeline: list[Placed], ends: list[float], start: float, stop: float, compute: bool) -> float:
    """Measure of [start, stop) during which ``timeline`` runs an op of the other class."""
    total, k = 0.0, bisect.bisect_right(ends, start)
    while k < len(timeline) and timeline[k].start < stop:
        placed = timeline[k]
        if placed.op.compute != compute:
            total += max(0.0, min(stop, placed.end) - max(start, placed.start))
        k += 1
    return total


def deployment_reward(first: list[Placed], second: list[Placed], t1: float = 0.0, t2: float = float("inf")) -> float:
    """Eq. 3, DR(t1, t2) = Σ f_{p1}(t) ⊕ f_{p2}(t), in continuous time (idle overlaps nothing)."""
    ends = [p.end for p in second]
    total = 0.0
    for placed in first:
        lo, hi = max(placed.start, t1), min(placed.end, t2)
        if hi > lo:
            total += _xor_overlap(second, ends, lo, hi, placed.op.compute)
    return total


def default_schedule(first: list[Operator], second: list[Operator]) -> TopologySchedule:
    """Both processes in the model's order, back to back (BLAD-NM, §7.4)."""
    queues = []
    for ops in (first, second):
        clock, queue = 0.0, []
        for op in ops:
            queue.append(Placed(op, clock, clock + op.duration, False))
            clock += op.duration
        queues.append(queue)
    return TopologySchedule((queues[0], queues[1]))


def _exchanged(op: Operator) -> Operator:
    return replace(op, duration=op.swapped_duration, swapped_duration=op.duration)


def manage_topology(first: list[Operator], second: list[Operator], literal: bool = False) -> TopologySchedule:
    """Alg. 1: the execution queues of two co-located processes, pairs exchanged where that raises DR."""
    pending = [list(reversed(first)), list(reversed(second))]  # pop() from the end = next op
    queues: tuple[list[Placed], list[Placed]] = ([], [])
    ends: tuple[list[float], list[float]] = ([], [])
    exchanged: tuple[set, set] = (set(), set())
    clocks = [0.0, 0.0]
    while pending[0] or pending[1]:
        here = 0 if pending[0] and (not pending[1] or clocks[0] <= clocks[1]) else 1  # line 4: arg-min T
        other = 1 - here
        op = pending[here].pop()  # line 5
        start = clocks[here]
        score = _xor_overlap(queues[other], ends[other], start, start + op.duration, op.compute)  # line 6
        swapped = (op.snapshot, op.unit) in exchanged[here]
        partner = pending[here][-1] if pending[here] else None
        if (op.commutative and not swapped and partner is not None and partner.commutative
                and partner.key[0] == op.snapshot and partner.unit == op.unit):  # line 7: first op of a pair
            if literal:  # line 8-9 as printed: same interval, f' = 1 - f
                score_alt = _xor_overlap(queues[other], ends[other], start, start + op.duration, not op.compute)
            else:  # the exchanged first op (the partner, at its exchanged-order duration)
                score_alt = _xor_overlap(queues[other], ends[other], start, start + partner.swapped_duration,
                                         partner.compute)
            if score_alt > score:  # line 10-11: exchange the pair
                pending[here][-1] = _exchanged(op)
                op, swapped = _exchanged(partner), True
                exchanged[here].add((op.snapshot, op.unit))
        queues[here].append(Placed(op, start, start + op.duration, swapped))  # line 12
        ends[here].append(start + op.duration)
        clocks[here] += op.duration  # line 13
    return TopologySchedule(queues, exchanged)


def check_order(sequence: list[Operator], default: list[Operator]) -> None:
    """Raise DgbenchError unless ``sequence`` is a valid topological order of ``default``'s dataflow:
    the same operators once each; per snapshot, its units in order, each unit's ops together (a
    commutative pair in either order, any other unit in its default order); a recurrent op after
    the same slot of the previous snapshot in the list."""
    keys = [o.key for o in sequence]
    if len(set(keys)) != len(keys) or set(keys) != {o.key for o in default} or len(keys) != len(default):
        raise DgbenchError("reordered operators are not the model's operators, each once")
    units: dict[int, list[list[Operator]]] = {}  # snapshot -> its units' ops, in default order
    for op in default:
        per_snapshot = units.setdefault(op.snapshot, [])
        if not per_snapshot or per_snapshot[-1][0].unit != op.unit:
            per_snapshot.append([])
        per_snapshot[-1].append(op)
    position = {s: 0 for s in units}  # index of the unit running (or next) per snapshot
    remaining: dict[int, list[Operator]] = {s: [] for s in units}
    done: set[tuple[int, int]] = set()
    all_keys = set(keys)
    for op in sequence:
        s = op.snapshot
        if not remaining[s]:
            unit_ops = units[s][position[s]]
            if op.unit != unit_ops[0].unit:
                raise DgbenchError(f"snapshot {s}: {op.role} of unit {op.unit} runs before unit {unit_ops[0].unit}")
            remaining[s] = list(unit_ops)
        pending = remaining[s]
        match = next((k for k, o in enumerate(pending) if o.key == op.key), None)
        if match is None:
            raise DgbenchError(f"snapshot {s}: {op.role} of unit {op.unit} interrupts unit {pending[0].unit}")
        if match != 0 and not pending[match].commutative:
            raise DgbenchError(f"snapshot {s}: {op.role} runs out of its unit's fixed order")
        if op.recurrent and (s - 1, op.slot) in all_keys and (s - 1, op.slot) not in done:
            raise DgbenchError(f"snapshot {s}: recurrent {op.role} runs before the previous snapshot's")
        pending.pop(match)
        done.add(op.key)
        if not pending:
            position[s] += 1


def gcn_pair(graph: SparseOperator, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             aggregate_first: bool = True) -> torch.Tensor:
    """One GCN layer's pair in either order (Eq. 4): (Ã X) W or Ã (X W), then the bias.

    The two are equal in exact arithmetic; in floating point they differ by rounding (different
    summation order), so a reordered run matches the default one to tolerance, not bit for bit.
    """
    out = spmm(graph, x) @ weight if aggregate_first else spmm(graph, x @ weight)
    return out if bias is None else out + bias
