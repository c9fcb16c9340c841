"""`static-to-dynamic`: BLAD's construction of snapshots from one static graph.

The static graph is either drawn once (a Chung-Lu power-law graph) or taken from a prepared store
(``--static STORE``: every distinct (u, v) of a real graph, e.g. one `dgbench prepare file` wrote);
snapshot t keeps a random subset of its edges whose size follows the edge-count trend (random edge
deletion), e.g. growing, shrinking or periodic.
"""
from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from dgbench.errors import DgbenchError
from dgbench.progress import progress
from dgbench.registry import register_preparer
from dgbench.store import SnapshotStoreWriter, id_dtype, open_store
from dgbench.generators.common import generator_provenance, snapshot_rngs

TRENDS = ("increasing", "decreasing", "periodic", "constant")

DEFAULT_NODES, DEFAULT_STATIC_EDGES, DEFAULT_POWER_LAW = 2048, 16384, 2.5

OPTIONS = [
    click.Option(["--static", "static_store"], type=click.Path(path_type=Path), default=None,
                 help="A prepared store whose distinct edges are the static graph (instead of a generated one)."),
    click.Option(["--nodes", "-n"], type=click.IntRange(2), default=None,
                 help=f"Vertices of the generated static graph [default: {DEFAULT_NODES}]."),
    click.Option(["--static-edges"], type=click.IntRange(1), default=None,
                 help=f"Edges of the generated static graph [default: {DEFAULT_STATIC_EDGES}]."),
    click.Option(["--snapshots", "-T"], type=click.IntRange(1), default=32, show_default=True),
    click.Option(["--trend"], default="increasing", show_default=True,
                 help=f"Edge-count trend: one of {', '.join(TRENDS)}, or comma-separated keep fractions "
                      "(one per snapshot)."),
    click.Option(["--min-keep"], type=click.FloatRange(0, 1), default=0.3, show_default=True,
                 help="Smallest fraction of static edges a snapshot keeps."),
    click.Option(["--power-law"], type=click.FloatRange(min=1, min_open=True), default=None,
                 help=f"Degree exponent of the generated static graph [default: {DEFAULT_POWER_LAW}]."),
    click.Option(["--seed"], type=int, default=0, show_default=True),
]


def keep_fractions(trend: str, snapshots: int, min_keep: float) -> np.ndarray:
    """Fraction of static edges kept in each snapshot."""
    x = np.linspace(0.0, 1.0, snapshots)
    named = {"increasing": min_keep + (1 - min_keep) * x, "decreasing": 1 - (1 - min_keep) * x,
             "periodic": min_keep + (1 - min_keep) * (0.5 - 0.5 * np.cos(2 * np.pi * 2 * x)),
             "constant": np.full(snapshots, (1 + min_keep) / 2)}
    if trend in named:
        return named[trend]
    try:
        values = np.array([float(v) for v in trend.split(",")])
    except ValueError:
        raise DgbenchError(f"--trend: '{trend}' is neither one of {', '.join(TRENDS)} nor a list of numbers")
    if len(values) != snapshots or values.min() < 0 or values.max() > 1:
        raise DgbenchError(f"--trend: expected {snapshots} fractions in [0, 1], got {len(values)}")
    return values


def chung_lu_edges(nodes: int, edges: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """A static directed graph whose endpoints are drawn with power-law weights (Chung-Lu)."""
    weights = (np.arange(1, nodes + 1, dtype=np.float64)) ** (-1.0 / (exponent - 1.0))
    weights = rng.permutation(weights / weights.sum())
    return rng.choice(nodes, size=(2, edges), p=weights)


def static_from_store(path: Path) -> tuple[np.ndarray, int, dict]:
    """Every distinct (u, v) of a store (snapshot or stream), its vertex count and its identity."""
    store = open_store(path)
    n = store.num_nodes
    keys = np.unique(store.read("src").astype(np.int64) * n + store.read("dst"))
    if len(keys) == 0:
        raise DgbenchError(f"--static {path}: the store has no edges")
    src, dst = np.divmod(keys, n)
    identity = {"path": str(path), "fingerprint": store.fingerprint,
                "name": store.provenance.get("raw_file") or store.kind}
    return np.stack([src, dst]), n, identity


@register_preparer("static-to-dynamic", kind="generator", produces="snapshots", options=OPTIONS,
                   summary="BLAD snapshots by random edge deletion from a static graph")
def build(out: Path, overwrite: bool = False, nodes: int | None = None, static_edges: int | None = None,
          snapshots: int = 32, trend: str = "increasing", min_keep: float = 0.3, power_law: float | None = None,
          seed: int = 0, static_store: Path | None = None) -> Path:
    fractions = keep_fractions(trend, snapshots, min_keep)
    rngs = snapshot_rngs(seed, snapshots + 1)
    if static_store is not None:
        given = [name for name, value in (("--nodes", nodes), ("--static-edges", static_edges),
                                          ("--power-law", power_law)) if value is not None]
        if given:
            raise DgbenchError(f"{', '.join(given)}: the static graph comes from --static {static_store}")
        static, nodes, source = static_from_store(Path(static_store))
        static_edges = static.shape[1]
        params = {"static_store": source}
    else:
        nodes, static_edges = nodes or DEFAULT_NODES, static_edges or DEFAULT_STATIC_EDGES
        power_law = power_law or DEFAULT_POWER_LAW
        static = chung_lu_edges(nodes, static_edges, power_law, rngs[-1])
        params = {"power_law": power_law}
    static = static.astype(id_dtype(nodes))
    provenance = generator_provenance("static-to-dynamic", nodes=nodes, static_edges=static_edges,
                                      snapshots=snapshots, trend=trend, min_keep=min_keep, seed=seed, **params)
    cut = {"method": "generated", "unit": "snapshot"}
    with SnapshotStoreWriter(out, num_nodes=nodes, directed=True, cut=cut, provenance=provenance,
                             overwrite=overwrite) as writer:
        for t in progress(range(snapshots), desc="static-to-dynamic", unit="snap"):
            kept = rngs[t].permutation(static_edges)[: int(round(fractions[t] * static_edges))]
            kept.sort()
            writer.append_snapshot(static[0, kept], static[1, kept], start=t)
        return writer.close()
