"""A discrete-event simulator of BLAD's two-process pipeline on one device (Fu et al., SC'23, §5.2.1).

1F1B order, optional barriers between Eq. 2's periods (then its makespan equals the DP's value,
:mod:`.balance`); no contention between the two processes (§6's overlap: :mod:`.reorder`).
See docs/blad.md (section "The pipeline simulator (§5.2.1, Fig. 9b)").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.blad.balance import sync_ratio

FIRST, SECOND = 0, 1  # p1 and p2


@dataclass(frozen=True)
class Task:
    """One pipeline task as it ran in the simulation."""

    process: int  # 0 = p1, 1 = p2
    kind: str  # "forward" | "backward"
    group: int
    start: float
    end: float


@dataclass
class PipelineTrace:
    """The simulated schedule: every task, the makespan and each process's busy time."""

    tasks: list[Task]
    makespan: float
    busy: tuple[float, float]

    @property
    def idle(self) -> tuple[float, float]:
        return (self.makespan - self.busy[0], self.makespan - self.busy[1])

    @property
    def busy_max_over_min(self) -> float:
        low = min(self.busy)
        return float("inf") if low == 0 else max(self.busy) / low

    @property
    def sync_ratio(self) -> float:
        return sync_ratio(self.busy)


def part_durations(forward: np.ndarray, backward: np.ndarray, first: list[int]) -> dict[str, np.ndarray]:
    """Per group, the durations of F_a, B_a (first p_i snapshots) and F_b, B_b (the rest)."""
    forward, backward = np.asarray(forward, np.float64), np.asarray(backward, np.float64)
    groups, group = forward.shape
    first_arr = np.asarray(first)
    if first_arr.shape != (groups,) or first_arr.min(initial=1) < 0 or first_arr.max(initial=0) > group:
        raise DgbenchError(f"pipeline: split {list(first)} does not give each of {groups} groups 0..{group} snapshots")
    mask = np.arange(group)[None, :] < first_arr[:, None]
    return {"F_a": (forward * mask).sum(1), "B_a": (backward * mask).sum(1),
            "F_b": (forward * ~mask).sum(1), "B_b": (backward * ~mask).sum(1)}


def _orders(groups: int) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    first = [("F_a", 0)]
    for i in range(1, groups):
        first += [("F_a", i), ("B_a", i - 1)]
    first.append(("B_a", groups - 1))
    second = [(name, i) for i in range(groups) for name in ("F_b", "B_b")]
    return first, second


def simulate_pipeline(forward: np.ndarray, backward: np.ndarray, first: list[int], barrier: bool = False,
                      handover: float = 0.0) -> PipelineTrace:
    """Simulate one device's two-process pipeline for the split ``first`` (p_i per group)."""
    parts = part_durations(forward, backward, first)
    groups = len(first)
    if barrier:
        return _simulate_periods(parts, groups, handover)
    orders = _orders(groups)
    end: dict[tuple[str, int], float] = {}
    clock, position, tasks = [0.0, 0.0], [0, 0], []
    while position[0] < len(orders[0]) or position[1] < len(orders[1]):
        progressed = False
        for process in (FIRST, SECOND):
            if position[process] == len(orders[process]):
                continue
            name, i = orders[process][position[process]]
            needs = {"F_a": None, "B_b": None, "F_b": ("F_a", i), "B_a": ("B_b", i)}[name]
            if needs is not None and needs not in end:
                continue
            ready = 0.0 if needs is None else end[needs] + handover
            start = max(clock[process], ready)
            end[(name, i)] = clock[process] = start + float(parts[name][i])
            tasks.append(Task(process, "forward" if name[0] == "F" else "backward", i, start, clock[process]))
            position[process] += 1
            progressed = True
        if not progressed:  # cannot happen with the orders above; a guard against editing them wrongly
            raise RuntimeError("pipeline simulation deadlocked")
    busy = tuple(float(sum(parts[n].sum() for n in names)) for names in (("F_a", "B_a"), ("F_b", "B_b")))
    return PipelineTrace(sorted(tasks, key=lambda t: (t.start, t.process)), max(clock), busy)


def _simulate_periods(parts: dict[str, np.ndarray], groups: int, handover: float) -> PipelineTrace:
    """Eq. 2's periods with a barrier after each: period k runs p1's F_a(k), B_a(k-1) and p2's
    F_b(k-1), B_b(k-1); the last period only drains group m."""
    tasks, now, forward_end = [], 0.0, {}
    for k in range(groups + 1):
        p1 = now
        if k < groups:
            p1 = now + float(parts["F_a"][k])
            forward_end[k] = p1
            tasks.append(Task(FIRST, "forward", k, now, p1))
        period_end = p1
        if k > 0:
            g = k - 1
            f_start = max(now, forward_end[g] + handover)
            f_end = f_start + float(parts["F_b"][g])
            b_end = f_end + float(parts["B_b"][g])
            a_start = max(p1, b_end + handover)
            a_end = a_start + float(parts["B_a"][g])
            tasks += [Task(SECOND, "forward", g, f_start, f_end), Task(SECOND, "backward", g, f_end, b_end),
                      Task(FIRST, "backward", g, a_start, a_end)]
            period_end = max(period_end, b_end, a_end)
        now = period_end
    busy = tuple(float(sum(parts[n].sum() for n in names)) for names in (("F_a", "B_a"), ("F_b", "B_b")))
    return PipelineTrace(sorted(tasks, key=lambda t: (t.start, t.process)), now, busy)
