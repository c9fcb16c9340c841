"""The edge-sparsification pre-pass of T-GCN's workflow (Alg. 7: E' = Sampling(E), then Partition(E')).

§5: "for each training step it first samples edges from the original dataset and then partitions the
sampled dataset"; §6.3: node-/layer-wise sampling keeps "50% edges"; §3: n is "half of the neighbor
size". The paper does not say whose neighbourhood an edge of the stream belongs to. Choice: every event
belongs to its *source*'s neighbourhood (the stream's direction), so each source keeps
ceil(fraction * out-degree) of its events, drawn without replacement by one Sample(V, n) of Alg. 4 per
source (``sis`` by default; any method of :func:`~dgbench.trainers.continuous.tgcn.sampling.sample_without_replacement`
gives the same law). Every event is in exactly one neighbourhood, so about ``fraction`` of the events stay
and no source loses all of its events. Weights: uniform, or time decay exp(-decay (t_last - t_e)) towards
the source's latest event (favouring recent interactions; an event whose weight underflows to 0 is never
kept, so a source may keep fewer than the ceiling). The kept events keep their chronological
order; resampling with a new ``epoch`` draws a new subset (§6.3 samples again each training pass).
"""
from __future__ import annotations

import math

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.trainers.continuous.tgcn.sampling.samplers import sample_without_replacement


def sparsify_events(src: np.ndarray, t: np.ndarray, fraction: float = 0.5, method: str = "sis", seed: int = 0,
                    epoch: int = 0, decay: float = 0.0) -> np.ndarray:
    """Sorted indices (into ``src``/``t``) of the events kept: ceil(fraction * d) of each source's d events."""
    if not 0 < fraction <= 1:
        raise DgbenchError(f"sparsification fraction must be in (0, 1], got {fraction}")
    if not (decay >= 0 and math.isfinite(decay)):
        raise DgbenchError(f"sparsification decay must be finite and >= 0, got {decay}")
    src = np.asarray(src, dtype=np.int64)
    t = np.asarray(t, dtype=np.float64)
    if len(src) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(src, kind="stable")  # per source, chronological
    _, starts, counts = np.unique(src[order], return_index=True, return_counts=True)
    groups = np.split(order, starts[1:])
    if decay > 0:
        weights = [np.exp(-decay * (t[g][-1] - t[g])) for g in groups]
    else:
        weights = [np.ones(len(g)) for g in groups]
    draws = np.ceil(fraction * counts).astype(np.int64)
    seed_stream = int(np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0])
    picks = sample_without_replacement(weights, draws, method, seed=seed_stream).indices
    kept = [g[p[p >= 0]] for g, p in zip(groups, picks)]
    return np.sort(np.concatenate(kept))
