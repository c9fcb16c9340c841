"""`communities`: snapshots with temporal structure a model can learn — the demo's default graph.

`esdg-random` is ESDG's scaling graph: uniform pairs, so no model can beat chance on it (AP 0.5 by
construction). This generator gives snapshots the structure real interaction graphs have
(Poursafaei et al. NeurIPS'22 §3 show that most test edges of real graphs recur):

* **activity**: every vertex has a lasting activity weight (Pareto, shape ``--activity-shape``), so some
  vertices send and receive far more than others, snapshot after snapshot;
* **communities** that persist and drift: vertices belong to one of ``--communities`` groups; a
  fraction ``--within`` of new edges stay inside the source's group; each snapshot a fraction
  ``--drift`` of the vertices moves to another group;
* **recurrence**: a fraction ``--persistence`` of each snapshot's edges is carried from the previous
  snapshot (ties that last), the rest drawn anew (source ∝ activity, destination ∝ activity within
  the chosen group).

Each snapshot has m = N·f edges. Deterministic given ``--seed``.
"""
from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from dgbench.progress import progress
from dgbench.registry import register_preparer
from dgbench.store import SnapshotStoreWriter, id_dtype
from dgbench.generators.common import generator_provenance

OPTIONS = [
    click.Option(["--nodes", "-n"], type=click.IntRange(4), default=1024, show_default=True),
    click.Option(["--snapshots", "-T"], type=click.IntRange(4), default=32, show_default=True),
    click.Option(["--edge-factor", "-f"], type=click.FloatRange(min=0, min_open=True), default=3.0,
                 show_default=True, help="Edges per vertex per snapshot, m = N*f."),
    click.Option(["--communities"], type=click.IntRange(1), default=16, show_default=True),
    click.Option(["--within"], type=click.FloatRange(0, 1), default=0.8, show_default=True,
                 help="Fraction of new edges inside the source's community."),
    click.Option(["--persistence"], type=click.FloatRange(0, 1), default=0.5, show_default=True,
                 help="Fraction of each snapshot's edges carried from the previous snapshot."),
    click.Option(["--drift"], type=click.FloatRange(0, 1), default=0.02, show_default=True,
                 help="Fraction of vertices moving to another community per snapshot."),
    click.Option(["--activity-shape"], type=click.FloatRange(min=0, min_open=True), default=1.5,
                 show_default=True, help="Pareto shape of the vertex activity (smaller: more skewed)."),
    click.Option(["--seed"], type=int, default=0, show_default=True),
]


def _new_edges(count: int, activity: np.ndarray, community: np.ndarray, groups: int, within: float,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` edges: source ∝ activity; destination ∝ activity inside the source's community (with
    probability ``within``) or over every vertex."""
    n = len(activity)
    cumulative = np.cumsum(activity) / activity.sum()
    src = np.minimum(np.searchsorted(cumulative, rng.random(count)), n - 1)
    dst = np.minimum(np.searchsorted(cumulative, rng.random(count)), n - 1)
    inside = rng.random(count) < within
    order = np.argsort(community, kind="stable")  # vertices grouped by community
    weights = activity[order]
    bounds = np.searchsorted(community[order], np.arange(groups + 1))
    for g in range(groups):
        picks = np.flatnonzero(inside & (community[src] == g))
        members = weights[bounds[g]:bounds[g + 1]]
        if not len(picks) or not len(members):
            continue
        cumulative_g = np.cumsum(members) / members.sum()
        chosen = np.minimum(np.searchsorted(cumulative_g, rng.random(len(picks))), len(members) - 1)
        dst[picks] = order[bounds[g] + chosen]
    return src, dst


@register_preparer("communities", kind="generator", produces="snapshots", options=OPTIONS,
                   summary="Drifting communities with lasting activity and recurring edges (the demo's graph)")
def build(out: Path, overwrite: bool = False, nodes: int = 1024, snapshots: int = 32, edge_factor: float = 3.0,
          communities: int = 16, within: float = 0.8, persistence: float = 0.5, drift: float = 0.02,
          activity_shape: float = 1.5, seed: int = 0) -> Path:
    m = int(round(nodes * edge_factor))
    provenance = generator_provenance("communities", nodes=nodes, snapshots=snapshots, edge_factor=edge_factor,
                                      communities=communities, within=within, persistence=persistence,
                                      drift=drift, activity_shape=activity_shape, seed=seed)
    rng = np.random.default_rng(seed)
    activity = 1.0 + rng.pareto(activity_shape, nodes)
    community = rng.integers(0, communities, nodes)
    src = dst = np.empty(0, np.int64)
    ids = id_dtype(nodes)
    with SnapshotStoreWriter(out, num_nodes=nodes, directed=True, cut={"method": "generated", "unit": "snapshot"},
                             provenance=provenance, overwrite=overwrite) as writer:
        for t in progress(range(snapshots), desc="communities", unit="snap"):
            movers = np.flatnonzero(rng.random(nodes) < drift)
            community[movers] = rng.integers(0, communities, len(movers))
            kept = np.flatnonzero(rng.random(len(src)) < persistence)
            fresh_src, fresh_dst = _new_edges(m - len(kept), activity, community, communities, within, rng)
            src = np.concatenate([src[kept], fresh_src])
            dst = np.concatenate([dst[kept], fresh_dst])
            writer.append_snapshot(src.astype(ids), dst.astype(ids), start=t)
        return writer.close()
