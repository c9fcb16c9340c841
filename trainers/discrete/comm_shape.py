"""The shape of a discrete epoch's communication, read from a placement's own plan (for dry runs).

A schedule's ``predicted_elements`` gives each tag's total; :meth:`Placement.comm_shape
<dgbench.trainers.discrete.placement.Placement.comm_shape>` gives which rank sends how much to which and each
rank's work, so a dry run (trainers/projection/) counts any placement without knowing its type. See
docs/projection.md.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dgbench.counting import PLAN, UNIFORM

FORWARD_EQUIVALENTS = 3.0  # one forward and one backward (about twice a forward) per unit: what single runs


@dataclasses.dataclass
class CommShape:
    """What a placement's plan says beyond the totals: per-tag (sender, receiver) patterns, control
    exchanges per unit, and per-rank work."""

    patterns: dict[str, np.ndarray]
    control: dict[str, np.ndarray]  # tag -> [P, P] elements over the epoch (every call of the unit)
    edges: np.ndarray  # [P] normalised-Ã nonzeros aggregated, in forward-equivalents of the epoch
    cells: np.ndarray  # [P] vertex-steps computed, in forward-equivalents
    steps: np.ndarray  # [P] timesteps run (per-step overheads: kernel launches, the models' step loops)
    pattern: str = PLAN
    kinds: dict[str, str] = dataclasses.field(default_factory=dict)  # tags that are not all-to-alls
    # [P] gradient elements each rank all-reduces per epoch when not every rank reduces every parameter
    # once (BLAD's per-step sync over the devices' first processes); None: the loop's one flat all-reduce
    gradients: np.ndarray | None = None


def to_every_other(world: int) -> np.ndarray:
    """[P, P] ones off the diagonal: one element from every rank to every other."""
    return np.ones((world, world), np.int64) - np.eye(world, dtype=np.int64)


def unit_weight(runs: int) -> float:
    """Forward-equivalents of a unit whose forward runs ``runs`` times (and its backward once)."""
    return (runs + 2) / FORWARD_EQUIVALENTS


def distinct_asks(asker: np.ndarray, holder: np.ndarray, key: np.ndarray, world: int) -> np.ndarray:
    """[asker, holder] counts of distinct (asker, key) requests (``holder[i]`` holds ``key[i]``)."""
    if not len(key):
        return np.zeros((world, world), np.int64)
    span = np.int64(key.max()) + 1
    _, first = np.unique(asker * span + key, return_index=True)
    return np.bincount(asker[first] * world + holder[first], minlength=world * world).reshape(world, world)


def score_patterns(asks: np.ndarray, units: int, world: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Pair scoring: ids asked (asker -> holder), values back, gradients back; one row-count exchange
    per unit (``Comm.exchange_counts``: one int64 to every other rank)."""
    return ({"scores:ids": asks, "scores:forward": asks.T, "scores:backward": asks},
            {"counts": units * to_every_other(world)})


def even_shape(data: Any, units: list[range], passes: list[int], world: int) -> CommShape:
    """No plan to read: every tag spread evenly over the other ranks and the work split evenly."""
    nnz = data.nonzeros_per_step()
    edges = sum(unit_weight(runs) * nnz[u.start:u.stop].sum() for u, runs in zip(units, passes))
    cells = sum(unit_weight(runs) * len(u) * data.num_nodes for u, runs in zip(units, passes))
    steps = sum(unit_weight(runs) * len(u) for u, runs in zip(units, passes))
    return CommShape({}, {}, np.full(world, edges / world), np.full(world, cells / world), np.full(world, steps),
                     UNIFORM)
