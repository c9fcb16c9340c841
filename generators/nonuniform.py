"""`nonuniform`: DGC's synthetic non-uniform graphs.

Edges per snapshot are drawn from a normal distribution (mean, std knobs); every vertex is present
only over its own interval of snapshots, so vertex sequence lengths differ (the load imbalance DGC
studies). Edges join vertices present in that snapshot.
"""
from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from dgbench.progress import progress
from dgbench.registry import register_preparer
from dgbench.store import SnapshotStoreWriter, id_dtype
from generators.common import generator_provenance, snapshot_rngs

OPTIONS = [
    click.Option(["--nodes", "-n"], type=click.IntRange(2), default=2048, show_default=True),
    click.Option(["--snapshots", "-T"], type=click.IntRange(1), default=32, show_default=True),
    click.Option(["--mean-edges"], type=click.IntRange(1), default=8192, show_default=True,
                 help="Mean edges per snapshot."),
    click.Option(["--std-edges"], type=click.FloatRange(0), default=2048.0, show_default=True,
                 help="Standard deviation of edges per snapshot (the variance knob)."),
    click.Option(["--min-presence"], type=click.FloatRange(0, 1, min_open=True), default=0.2, show_default=True,
                 help="Shortest vertex lifetime as a fraction of T (1 = every vertex always present)."),
    click.Option(["--seed"], type=int, default=0, show_default=True),
]


def vertex_lifetimes(nodes: int, snapshots: int, min_presence: float, rng: np.random.Generator):
    """First and last snapshot (inclusive) of each vertex; lengths uniform in [min_presence*T, T]."""
    shortest = max(1, int(np.ceil(min_presence * snapshots)))
    length = rng.integers(shortest, snapshots + 1, size=nodes)
    first = rng.integers(0, snapshots - length + 1)
    return first, first + length - 1


@register_preparer("nonuniform", kind="generator", produces="snapshots", options=OPTIONS,
                   summary="DGC non-uniform snapshots (normal edge counts, varying vertex lifetimes)")
def build(out: Path, overwrite: bool = False, nodes: int = 2048, snapshots: int = 32, mean_edges: int = 8192,
          std_edges: float = 2048.0, min_presence: float = 0.2, seed: int = 0) -> Path:
    provenance = generator_provenance("nonuniform", nodes=nodes, snapshots=snapshots, mean_edges=mean_edges,
                                      std_edges=std_edges, min_presence=min_presence, seed=seed)
    rngs = snapshot_rngs(seed, snapshots + 1)
    first, last = vertex_lifetimes(nodes, snapshots, min_presence, rngs[-1])
    cut = {"method": "generated", "unit": "snapshot"}
    with SnapshotStoreWriter(out, num_nodes=nodes, directed=True, cut=cut, provenance=provenance,
                             overwrite=overwrite) as writer:
        for t in progress(range(snapshots), desc="nonuniform", unit="snap"):
            rng = rngs[t]
            present = np.flatnonzero((first <= t) & (last >= t))
            m = max(0, int(round(rng.normal(mean_edges, std_edges))))
            if len(present) == 0:
                m = 0
            ends = present[rng.integers(0, max(1, len(present)), size=(2, m))] if m else np.zeros((2, 0), np.int64)
            writer.append_snapshot(ends[0].astype(id_dtype(nodes)), ends[1].astype(id_dtype(nodes)), start=t)
        return writer.close()
