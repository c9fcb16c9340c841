"""BLAD §5.2.2 Eq. 2 (the DP splitting each group between a device's two processes), §5.1's group
assignment, and the §5.2.1 pipeline simulator the DP is checked against."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.blad.balance import (CORRECTED, PAPER, Eq2Variant, allowed_first, assign_groups,
                                                    balance_split, eq2_objective, even_split, exhaustive_split,
                                                    sync_ratio)
from dgbench.trainers.discrete.blad.pipeline import simulate_pipeline

# Four groups of four snapshots whose sizes jump and then fall (an AS-733-like trend): forward and
# backward times typed by hand, backward ~2x forward but not proportional (with b = c·l and p2
# dominating every period, the first group's split would not matter and optima would tie).
HAND_FORWARD = np.array([[1.0, 1.3, 1.9, 2.6],
                         [3.9, 5.7, 7.8, 10.2],
                         [3.8, 5.2, 6.8, 4.4],
                         [2.6, 3.4, 2.2, 1.1]])
HAND_BACKWARD = np.array([[1.7, 2.9, 4.1, 6.0],
                          [7.2, 12.9, 16.5, 23.7],
                          [8.4, 10.2, 15.4, 8.8],
                          [5.8, 6.6, 4.9, 2.0]])


def _all_optima(forward, backward, variant) -> list[tuple[int, ...]]:
    options = allowed_first(forward.shape[1], variant)
    values = {first: eq2_objective(forward, backward, list(first), variant)
              for first in itertools.product(options, repeat=forward.shape[0])}
    best = min(values.values())
    return [first for first, value in values.items() if abs(value - best) < 1e-12]


@pytest.mark.parametrize("variant", [CORRECTED, PAPER], ids=lambda v: v.name)
def test_dp_split_equals_exhaustive_search_on_hand_built_instance(variant):
    optima = _all_optima(HAND_FORWARD, HAND_BACKWARD, variant)
    assert len(optima) == 1, "the hand-built instance must have one optimal split"
    dp = balance_split(HAND_FORWARD, HAND_BACKWARD, variant)
    assert tuple(dp.first) == optima[0] == tuple(exhaustive_split(HAND_FORWARD, HAND_BACKWARD, variant).first)
    assert dp.predicted == pytest.approx(eq2_objective(HAND_FORWARD, HAND_BACKWARD, dp.first, variant))
    # the split is not the even one here: the growing loads push work onto p1 where p2 is loaded
    assert dp.first != even_split(4, 4)
    assert dp.first == {"corrected": [1, 3, 2, 3], "paper": [1, 3, 3, 1]}[variant.name]


def test_eq2_values_worked_by_hand():
    forward = np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]])
    backward = 2 * forward
    # corrected, split (1, 2): period 1 = l(1,1) = 1; period 2 = max(T_p1 = l(2,1)+l(2,2) + b(1,1) = 4 + 2,
    # T_p2 = (2+3) + (4+6) = 15) = 15; drain (serial) = p2's 2 + 4, then p1's 4 + 4 -> 14
    assert eq2_objective(forward, backward, [1, 2], CORRECTED) == pytest.approx(1 + 15 + 14)
    # barrier periods: period 2 = max(4, 15) + 2 = 17
    assert eq2_objective(forward, backward, [1, 2], Eq2Variant(barrier_periods=True)) == pytest.approx(1 + 17 + 14)
    # as printed: T_p2 sums from j = p_1 = 1 (snapshot 1 counted twice): (1+2+3)+(2+4+6) = 18;
    # T_p1 = 4 + 2 = 6; no drain -> 1 + 18
    assert eq2_objective(forward, backward, [1, 2], PAPER) == pytest.approx(19)
    # the printed range lets p1 take the whole group (p2 then holds no snapshot and no loss)
    assert list(allowed_first(3, PAPER)) == [1, 2, 3] and list(allowed_first(3, CORRECTED)) == [1, 2]


def test_each_switch_moves_the_objective_the_documented_way():
    forward, backward = HAND_FORWARD, HAND_BACKWARD
    split = [2, 2, 2, 2]
    corrected = eq2_objective(forward, backward, split, CORRECTED)
    assert eq2_objective(forward, backward, split, Eq2Variant(p2_starts_after_p1=False)) > corrected  # counted twice
    assert eq2_objective(forward, backward, split, Eq2Variant(drain=False)) < corrected  # last group never charged
    assert eq2_objective(forward, backward, split, Eq2Variant(barrier_periods=True)) > corrected  # p1 waits


def test_property_dp_never_worse_than_even_or_any_split_and_matches_the_barrier_simulator():
    rng = np.random.default_rng(7)
    barrier = Eq2Variant(barrier_periods=True)
    for _ in range(150):
        groups, group = int(rng.integers(1, 7)), int(rng.integers(2, 7))
        forward = rng.uniform(0.05, 3.0, (groups, group)) * rng.uniform(0.2, 4.0, (groups, 1))
        backward = forward * rng.uniform(1.0, 3.0, (groups, group))
        for variant in (CORRECTED, PAPER, barrier):
            dp = balance_split(forward, backward, variant)
            even = eq2_objective(forward, backward, even_split(groups, group), variant)
            assert dp.predicted <= even + 1e-9
            random_split = [int(rng.choice(allowed_first(group, variant))) for _ in range(groups)]
            assert dp.predicted <= eq2_objective(forward, backward, random_split, variant) + 1e-9
        dp = balance_split(forward, backward, barrier)
        simulated = simulate_pipeline(forward, backward, dp.first, barrier=True)
        assert simulated.makespan == pytest.approx(dp.predicted, rel=1e-12)
        assert simulate_pipeline(forward, backward, dp.first).makespan <= simulated.makespan + 1e-9


def test_bad_input_is_one_clear_error():
    with pytest.raises(DgbenchError, match="at least 2"):
        balance_split(np.ones((3, 1)), np.ones((3, 1)))
    with pytest.raises(DgbenchError, match="one shape"):
        balance_split(np.ones((3, 4)), np.ones((3, 5)))
    with pytest.raises(DgbenchError, match="non-negative"):
        balance_split(-np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(DgbenchError, match="not one p_i"):
        eq2_objective(np.ones((2, 3)), np.ones((2, 3)), [3, 1], CORRECTED)


def test_pipeline_simulator_trace_worked_by_hand():
    forward = np.array([[1.0, 2.0], [3.0, 1.0]])
    backward = np.array([[2.0, 4.0], [6.0, 2.0]])
    trace = simulate_pipeline(forward, backward, [1, 1])
    spans = {(t.process, t.kind, t.group): (t.start, t.end) for t in trace.tasks}
    # p1: F_a(1) [0,1), F_a(2) [1,4), B_a(1) waits for p2's B_b(1) which ends at 1+2+4 = 7 -> [7,9), B_a(2)
    # p2: F_b(1) [1,3), B_b(1) [3,7), F_b(2) needs F_a(2) (ends 4): [7,8), B_b(2) [8,10); p1 B_a(2) [10,16)
    assert spans == {(0, "forward", 0): (0, 1), (0, "forward", 1): (1, 4), (0, "backward", 0): (7, 9),
                     (1, "forward", 0): (1, 3), (1, "backward", 0): (3, 7), (1, "forward", 1): (7, 8),
                     (1, "backward", 1): (8, 10), (0, "backward", 1): (10, 16)}
    assert trace.makespan == 16 and trace.busy == (1 + 3 + 2 + 6, 2 + 1 + 4 + 2)
    assert trace.sync_ratio == pytest.approx((12 - 9) / 12) == sync_ratio([12, 9])
    handed = simulate_pipeline(forward, backward, [1, 1], handover=0.5)
    # critical path F_a(1) -> F_b(1), B_b(1), F_b(2), B_b(2) -> B_a(2): two hand-overs
    assert handed.makespan == 16 + 2 * 0.5


def test_group_assignment_balanced_minimises_the_largest_device_load():
    costs = np.array([1.0, 1.0, 1.0, 1.0, 6.0, 1.0, 1.0, 4.0])
    even = assign_groups(costs, 2, "even")
    balanced = assign_groups(costs, 2, "balanced")
    assert [list(r) for r in even] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    best = min(max(costs[:cut].sum(), costs[cut:].sum()) for cut in range(1, 8))
    assert max(costs[list(r)].sum() for r in balanced) == best == 10.0
    assert sum(len(r) for r in assign_groups(costs, 3, "balanced")) == 8
    with pytest.raises(DgbenchError, match="cannot keep 9 devices busy"):
        assign_groups(costs, 9)
