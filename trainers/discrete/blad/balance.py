"""BLAD's two-level load scheduler (Fu et al., SC'23, §5): groups to devices, snapshots to processes.

Inter-device (§5.1): contiguous ranges of whole groups per device, ``even`` or ``balanced``.
Intra-device (§5.2.2, Eq. 2): the DP over p_i with backtracking; :class:`Eq2Variant` names the
printed recurrence's defects (:data:`PAPER` keeps them, :data:`CORRECTED` is the default).
See docs/blad.md (section "Eq. 2 as printed, and what we run").
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from dgbench.errors import DgbenchError


@dataclass(frozen=True)
class Eq2Variant:
    """Which defects of Eq. 2 as printed are corrected (see the module docstring; True = corrected),
    and whether periods are charged as in a barrier-synchronised pipeline (off: the paper's max)."""

    p2_starts_after_p1: bool = True
    p2_never_empty: bool = True
    drain: bool = True
    barrier_periods: bool = False

    @property
    def name(self) -> str:
        if self == PAPER:
            return "paper"
        if self == CORRECTED:
            return "corrected"
        return "custom(" + ",".join(k for k, v in self.__dict__.items() if v) + ")"


PAPER = Eq2Variant(p2_starts_after_p1=False, p2_never_empty=False, drain=False, barrier_periods=False)
CORRECTED = Eq2Variant()


@dataclass
class Split:
    """How many snapshots p1 takes of each group, and the objective Eq. 2 assigns to it."""

    first: list[int]  # p_i for each group, 1-based count of snapshots p1 runs
    predicted: float  # Eq. 2's value of this split (seconds, under the variant)
    variant: Eq2Variant = field(default=CORRECTED)


def _check_durations(forward: np.ndarray, backward: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    forward, backward = np.asarray(forward, np.float64), np.asarray(backward, np.float64)
    if forward.ndim != 2 or forward.shape != backward.shape:
        raise DgbenchError(f"Eq. 2: forward and backward durations must be [groups, snapshots] arrays of one shape, "
                           f"got {forward.shape} and {backward.shape}")
    if forward.shape[0] == 0:
        raise DgbenchError("Eq. 2: no snapshot groups to split")
    if not (np.all(np.isfinite(forward)) and np.all(np.isfinite(backward))) or forward.min() < 0 or backward.min() < 0:
        raise DgbenchError("Eq. 2: durations must be finite and non-negative")
    return forward, backward


def allowed_first(group: int, variant: Eq2Variant) -> range:
    """The values p_i may take: 1..group-1 (corrected) or 1..group (as printed)."""
    last = group - 1 if variant.p2_never_empty else group
    if last < 1:
        raise DgbenchError(f"Eq. 2: a group of {group} snapshot(s) cannot be split between two processes "
                           f"(need at least 2 when p2 must hold the loss snapshot)")
    return range(1, last + 1)


def period_cost(forward: np.ndarray, backward: np.ndarray, i: int, first_now: int | None, first_before: int,
                variant: Eq2Variant) -> float:
    """One pipeline period written term by term from Eq. 2 (no prefix sums): p1's forward of group
    ``i`` (its first ``first_now`` snapshots; None = the drain period, no forward) and backward of
    group ``i - 1``, and p2's forward and backward of group ``i - 1`` from snapshot ``p_{i-1}`` (as
    printed) or ``p_{i-1} + 1`` (corrected). 0-based ``i``; ``first_*`` are 1-based counts."""
    group = forward.shape[1]
    p1_forward = 0.0 if first_now is None else sum(forward[i, j] for j in range(first_now))
    p1_backward = sum(backward[i - 1, j] for j in range(first_before))
    p2_from = first_before if variant.p2_starts_after_p1 else first_before - 1  # 0-based start of T_p2's sum
    p2 = sum(forward[i - 1, j] + backward[i - 1, j] for j in range(p2_from, group))
    if first_now is None:  # the drain: p2's work, then p1's backward with the gradient
        return p2 + p1_backward
    if variant.barrier_periods:
        return max(p1_forward, p2) + p1_backward
    return max(p1_forward + p1_backward, p2)


def eq2_objective(forward: np.ndarray, backward: np.ndarray, first: list[int],
                  variant: Eq2Variant = CORRECTED) -> float:
    """Eq. 2's value of one given split ``first`` = (p_1..p_m), summed period by period."""
    forward, backward = _check_durations(forward, backward)
    groups, group = forward.shape
    if len(first) != groups or any(p not in allowed_first(group, variant) for p in first):
        raise DgbenchError(f"Eq. 2: split {first} is not one p_i in {allowed_first(group, variant)} per group")
    total = float(sum(forward[0, j] for j in range(first[0])))
    for i in range(1, groups):
        total += period_cost(forward, backward, i, first[i], first[i - 1], variant)
    if variant.drain:
        total += period_cost(forward, backward, groups, None, first[-1], variant)
    return total


def _padded(values: np.ndarray) -> np.ndarray:
    """Per row, the sums of the first 0..n entries: [rows, n + 1]."""
    return np.concatenate([np.zeros((values.shape[0], 1)), np.cumsum(values, axis=1)], axis=1)


def balance_split(forward: np.ndarray, backward: np.ndarray, variant: Eq2Variant = CORRECTED) -> Split:
    """Eq. 2 by dynamic programming over groups, with backtracking to every p_i.

    ``forward[i, j]``, ``backward[i, j]``: predicted l(i, j), b(i, j) of snapshot j of group i on
    this device, [m, group]. Ties go to the smaller p (p1 takes fewer snapshots).
    """
    forward, backward = _check_durations(forward, backward)
    groups, group = forward.shape
    choices = np.array(allowed_first(group, variant))
    head_f, head_b = _padded(forward), _padded(backward)  # Σ_{j≤p} l, Σ_{j≤p} b
    whole = head_f[:, -1] + head_b[:, -1]
    start = choices if variant.p2_starts_after_p1 else choices - 1  # snapshots before p2's first one
    p1_forward = head_f[:, choices]  # [m, k]: forward of p1's part for each choice
    p1_backward = head_b[:, choices]
    p2_work = whole[:, None] - head_f[:, start] - head_b[:, start]  # [m, k]

    value = p1_forward[0].copy()  # OPT(first group, p)
    came_from = np.zeros((groups, len(choices)), np.int64)
    for i in range(1, groups):
        now = p1_forward[i][None, :]  # columns: p_i
        before_p2, before_b = p2_work[i - 1][:, None], p1_backward[i - 1][:, None]  # rows: p_{i-1}
        period = (np.maximum(now, before_p2) + before_b) if variant.barrier_periods \
            else np.maximum(now + before_b, before_p2)
        total = value[:, None] + period
        came_from[i] = np.argmin(total, axis=0)
        value = total[came_from[i], np.arange(len(choices))]
    if variant.drain:
        value = value + p2_work[-1] + p1_backward[-1]
    best = int(np.argmin(value))
    picked = [best]
    for i in range(groups - 1, 0, -1):
        picked.append(int(came_from[i, picked[-1]]))
    first = [int(choices[k]) for k in reversed(picked)]
    return Split(first, float(value[best]), variant)


def exhaustive_split(forward: np.ndarray, backward: np.ndarray, variant: Eq2Variant = CORRECTED) -> Split:
    """Every split tried (group - 1)^m ways: the reference the DP is tested against (small m only)."""
    forward, backward = _check_durations(forward, backward)
    groups, group = forward.shape
    options = allowed_first(group, variant)
    if len(options) ** groups > 2_000_000:
        raise DgbenchError(f"exhaustive search over {len(options)}^{groups} splits is too large")
    best: Split | None = None
    for first in itertools.product(options, repeat=groups):
        value = eq2_objective(forward, backward, list(first), variant)
        if best is None or value < best.predicted:
            best = Split(list(first), value, variant)
    assert best is not None
    return best


def even_split(groups: int, group: int) -> list[int]:
    """BLAD-Even (§7.5): snapshots split by time interval, p1 the first ⌊group/2⌋ (p2 keeps the loss)."""
    if group < 2:
        raise DgbenchError(f"a group of {group} snapshot(s) cannot be split between two processes")
    return [group // 2] * groups


def assign_groups(group_costs: np.ndarray | list[float], devices: int, mode: str = "balanced") -> list[range]:
    """§5.1: contiguous ranges of groups, one per device (whole groups: no cross-device features).

    ``even``: equal counts (the first ``m mod devices`` devices take one more). ``balanced``: the
    ranges minimising the largest summed predicted cost (linear partition by DP; ties to the
    earliest cut). Every device gets at least one group when there are enough groups.
    """
    costs = np.asarray(group_costs, np.float64)
    groups = len(costs)
    if devices < 1:
        raise DgbenchError(f"cannot assign groups to {devices} devices")
    if groups < devices:
        raise DgbenchError(f"{groups} snapshot group(s) cannot keep {devices} devices busy; use fewer ranks")
    if mode == "even":
        sizes = [groups // devices + (1 if d < groups % devices else 0) for d in range(devices)]
    elif mode == "balanced":
        sizes = _linear_partition(costs, devices)
    else:
        raise DgbenchError(f"unknown group assignment {mode!r} (choose even or balanced)")
    bounds = np.cumsum([0] + sizes)
    return [range(int(bounds[d]), int(bounds[d + 1])) for d in range(devices)]


def _linear_partition(costs: np.ndarray, parts: int) -> list[int]:
    """Sizes of ``parts`` contiguous non-empty ranges minimising the largest range sum."""
    n = len(costs)
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    best = np.full((parts + 1, n + 1), np.inf)
    cut = np.zeros((parts + 1, n + 1), np.int64)
    best[0, 0] = 0.0
    for k in range(1, parts + 1):
        for end in range(k, n - (parts - k) + 1):
            starts = np.arange(k - 1, end)
            load = np.maximum(best[k - 1, starts], prefix[end] - prefix[starts])
            pick = int(np.argmin(load))
            best[k, end], cut[k, end] = load[pick], starts[pick]
    sizes, end = [], n
    for k in range(parts, 0, -1):
        sizes.append(end - int(cut[k, end]))
        end = int(cut[k, end])
    return sizes[::-1]


def sync_ratio(busy: list[float] | np.ndarray) -> float:
    """§3.3.2's synchronisation ratio: (slower - faster) / slower of the workers' compute times."""
    busy = np.asarray(busy, np.float64)
    return float((busy.max() - busy.min()) / busy.max()) if busy.max() > 0 else 0.0
