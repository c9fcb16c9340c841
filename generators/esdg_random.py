"""`esdg-random`: the ESDG paper's weak-scaling graphs (§6.1): each snapshot has m = N·f uniform pairs."""
from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from dgbench.progress import progress
from dgbench.registry import register_preparer
from dgbench.store import SnapshotStoreWriter, id_dtype
from dgbench.generators.common import generator_provenance, snapshot_rngs

OPTIONS = [
    click.Option(["--nodes", "-n"], type=click.IntRange(2), default=1024, show_default=True,
                 help="N vertices (paper: 2^14 and up)."),
    click.Option(["--snapshots", "-T"], type=click.IntRange(1), default=32, show_default=True,
                 help="T snapshots (paper: 256)."),
    click.Option(["--edge-factor", "-f"], type=click.FloatRange(min=0, min_open=True), default=3.0,
                 show_default=True, help="Edges per vertex per snapshot, m = N*f (paper: 3)."),
    click.Option(["--seed"], type=int, default=0, show_default=True),
]


def sorted_pairs(pairs: np.ndarray, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of the [2, m] ``pairs`` sorted by (dst, src), as the writer stores them, by sorting one
    packed int64 key (np.sort, several times faster than the writer's argsort and gather, which then only
    checks the order); the store is byte-identical."""
    if nodes >= 2**31:
        order = np.lexsort((pairs[0], pairs[1]))
        return pairs[0][order].astype(id_dtype(nodes)), pairs[1][order].astype(id_dtype(nodes))
    key = np.sort((pairs[1] << 32) | pairs[0])
    return (key & 0xFFFFFFFF).astype(id_dtype(nodes)), (key >> 32).astype(id_dtype(nodes))


@register_preparer("esdg-random", kind="generator", produces="snapshots", options=OPTIONS,
                   summary="ESDG weak-scaling random snapshots (m = N*f pairs each)")
def build(out: Path, overwrite: bool = False, nodes: int = 1024, snapshots: int = 32,
          edge_factor: float = 3.0, seed: int = 0) -> Path:
    m = int(round(nodes * edge_factor))
    provenance = generator_provenance("esdg-random", nodes=nodes, snapshots=snapshots,
                                      edge_factor=edge_factor, seed=seed)
    cut = {"method": "generated", "unit": "snapshot"}
    with SnapshotStoreWriter(out, num_nodes=nodes, directed=True, cut=cut, provenance=provenance,
                             overwrite=overwrite) as writer:
        for t, rng in enumerate(progress(snapshot_rngs(seed, snapshots), desc="esdg-random", unit="snap")):
            src, dst = sorted_pairs(rng.integers(0, nodes, size=(2, m), dtype=np.int64), nodes)
            writer.append_snapshot(src, dst, start=t)
        return writer.close()
