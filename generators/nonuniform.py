"""`nonuniform`: DGC's synthetic non-uniform graphs (Chen et al., DGC §7.3.1, Figs. 13-14).

Edges per snapshot are drawn from a normal distribution (mean, std knobs); every vertex lives over
its own interval of snapshots (*lifetime presence*: V_t = the vertices whose lifetime covers t, so
vertex sequence lengths differ, the load imbalance DGC studies), and edges join only vertices alive in
that snapshot. With ``--presence lifetime`` the lifetimes are stored (array ``vertex_lifetime``: first
and last snapshot per vertex), so V_t is the generator's, not only the vertices an edge touches (the
default, ``edges``, writes the older store, bit for bit). ``--instances-per-edge R``
sizes N so that Σ_t |V_t| ≈ R · Σ_t |E_t| (§7.3.1: 5M vertex instances over 2M edges, R = 2.5);
``--endpoints communities`` draws endpoints within planted communities, a share ``--mixing`` of
them across (array ``vertex_community``). See docs/discrete-schemes.md (DGC section).
"""
from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from dgbench.errors import DgbenchError
from dgbench.progress import progress
from dgbench.registry import register_preparer
from dgbench.store import SnapshotStoreWriter, id_dtype
from dgbench.generators.common import generator_provenance, snapshot_rngs

PAPER_INSTANCES_PER_EDGE = 2.5  # DGC §7.3.1: 5M vertices (instances, Σ_t |V_t|) over 2M edges, 100 snapshots
ENDPOINTS = ("uniform", "communities")
PRESENCES = ("edges", "lifetime")

OPTIONS = [
    click.Option(["--nodes", "-n"], type=click.IntRange(2), default=2048, show_default=True,
                 help="N vertices (ignored with --instances-per-edge, which sizes N)."),
    click.Option(["--snapshots", "-T"], type=click.IntRange(1), default=32, show_default=True),
    click.Option(["--mean-edges"], type=click.IntRange(1), default=8192, show_default=True,
                 help="Mean edges per snapshot."),
    click.Option(["--std-edges"], type=click.FloatRange(0), default=2048.0, show_default=True,
                 help="Standard deviation of edges per snapshot (the variance knob)."),
    click.Option(["--min-presence"], type=click.FloatRange(0, 1, min_open=True), default=0.2, show_default=True,
                 help="Shortest vertex lifetime as a fraction of T (1 = every vertex always present)."),
    click.Option(["--presence"], type=click.Choice(PRESENCES), default="edges", show_default=True,
                 help="lifetime: store the vertex lifetimes (array vertex_lifetime), V_t = the vertices alive "
                      "at t (the trainers' --presence lifetime reads this V_t); edges: store edges only (the older "
                      "store, V_t by the edges)."),
    click.Option(["--instances-per-edge"], type=click.FloatRange(0, min_open=True), default=None,
                 help=f"With --presence lifetime: size N so that Σ_t|V_t| / Σ_t|E_t| is this (DGC §7.3.1: "
                      f"{PAPER_INSTANCES_PER_EDGE}); default: use --nodes."),
    click.Option(["--endpoints"], type=click.Choice(ENDPOINTS), default="uniform", show_default=True,
                 help="Edge ends: uniform over the alive vertices, or within planted communities."),
    click.Option(["--communities"], type=click.IntRange(1), default=16, show_default=True,
                 help="Planted communities (--endpoints communities)."),
    click.Option(["--mixing"], type=click.FloatRange(0, 1), default=0.2, show_default=True,
                 help="Share of edges whose destination is in another community than the source's "
                      "(--endpoints communities)."),
    click.Option(["--seed"], type=int, default=0, show_default=True),
]


def vertex_lifetimes(nodes: int, snapshots: int, min_presence: float, rng: np.random.Generator):
    """First and last snapshot (inclusive) of each vertex; lengths uniform in [min_presence*T, T]."""
    shortest = max(1, int(np.ceil(min_presence * snapshots)))
    length = rng.integers(shortest, snapshots + 1, size=nodes)
    first = rng.integers(0, snapshots - length + 1)
    return first, first + length - 1


def nodes_for_ratio(ratio: float, total_edges: int, snapshots: int, min_presence: float) -> int:
    """N whose expected instance count Σ_t|V_t| = N · E[lifetime] is ``ratio`` · the edges drawn."""
    shortest = max(1, int(np.ceil(min_presence * snapshots)))
    mean_lifetime = (shortest + snapshots) / 2  # lengths uniform on the integers shortest..T
    return max(2, int(round(ratio * total_edges / mean_lifetime)))


def _uniform_ends(present: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    if not m or not len(present):
        return np.zeros((2, 0), np.int64)
    return present[rng.integers(0, len(present), size=(2, m))]


def _community_ends(present: np.ndarray, m: int, community: np.ndarray, mixing: float,
                    rng: np.random.Generator) -> np.ndarray:
    """Source uniform over the alive vertices; destination uniform within the source's community, or,
    with probability ``mixing``, within the alive vertices of the other communities (falling back to
    the other side when one side has no alive vertex)."""
    if not m or not len(present):
        return np.zeros((2, 0), np.int64)
    src = present[rng.integers(0, len(present), size=m)]
    dst = np.empty(m, np.int64)
    across = rng.random(m) < mixing
    groups = community[present]
    order = np.argsort(groups, kind="stable")
    members = present[order]
    bounds = np.searchsorted(groups[order], np.arange(community.max() + 2))
    for g in np.unique(community[src]):
        inside = members[bounds[g]:bounds[g + 1]]
        outside = np.concatenate([members[:bounds[g]], members[bounds[g + 1]:]])
        for picks, pool, fallback in ((np.flatnonzero((community[src] == g) & ~across), inside, outside),
                                      (np.flatnonzero((community[src] == g) & across), outside, inside)):
            chosen = pool if len(pool) else fallback
            dst[picks] = chosen[rng.integers(0, len(chosen), size=len(picks))]
    return np.stack([src, dst])


@register_preparer("nonuniform", kind="generator", produces="snapshots", options=OPTIONS,
                   summary="DGC non-uniform snapshots (normal edge counts, vertex lifetimes define V_t)")
def build(out: Path, overwrite: bool = False, nodes: int = 2048, snapshots: int = 32, mean_edges: int = 8192,
          std_edges: float = 2048.0, min_presence: float = 0.2, presence: str = "edges",
          instances_per_edge: float | None = None, endpoints: str = "uniform", communities: int = 16,
          mixing: float = 0.2, seed: int = 0) -> Path:
    if endpoints not in ENDPOINTS or presence not in PRESENCES:
        raise DgbenchError(f"--endpoints {endpoints} / --presence {presence}: choose from {', '.join(ENDPOINTS)} "
                           f"/ {', '.join(PRESENCES)}")
    if instances_per_edge is not None and presence != "lifetime":
        raise DgbenchError("--instances-per-edge counts the instances of the stored lifetimes: add --presence lifetime")
    rngs = snapshot_rngs(seed, snapshots + 1)
    # each snapshot's edge count is the first draw of its generator, so drawing them all first changes nothing
    counts = [max(0, int(round(rng.normal(mean_edges, std_edges)))) for rng in rngs[:snapshots]]
    if instances_per_edge is not None:
        nodes = nodes_for_ratio(instances_per_edge, sum(counts), snapshots, min_presence)
    params: dict[str, object] = dict(nodes=nodes, snapshots=snapshots, mean_edges=mean_edges, std_edges=std_edges,
                  min_presence=min_presence, seed=seed)
    if presence != "edges" or endpoints != "uniform":  # the older stores keep their provenance and fingerprint
        params.update(presence=presence, instances_per_edge=instances_per_edge, endpoints=endpoints)
        if endpoints == "communities":
            params.update(communities=communities, mixing=mixing)
    provenance = generator_provenance("nonuniform", **params)
    first, last = vertex_lifetimes(nodes, snapshots, min_presence, rngs[-1])
    community = np.random.default_rng([seed, 1]).integers(0, communities, nodes) \
        if endpoints == "communities" else None
    cut = {"method": "generated", "unit": "snapshot"}
    with SnapshotStoreWriter(out, num_nodes=nodes, directed=True, cut=cut, provenance=provenance,
                             overwrite=overwrite) as writer:
        for t in progress(range(snapshots), desc="nonuniform", unit="snap"):
            rng = rngs[t]
            present = np.flatnonzero((first <= t) & (last >= t))
            m = counts[t]
            ends = _uniform_ends(present, m, rng) if community is None \
                else _community_ends(present, m, community, mixing, rng)
            writer.append_snapshot(ends[0].astype(id_dtype(nodes)), ends[1].astype(id_dtype(nodes)), start=t)
        if presence == "lifetime":
            writer.write_array("vertex_lifetime", np.stack([first, last], axis=1).astype(np.int32))
        if community is not None:
            writer.write_array("vertex_community", community.astype(np.int32))
        return writer.close()


def lifetime_presence(store) -> np.ndarray:
    """[T, N] bool: vertex v alive in snapshot t, from a `nonuniform` store's ``vertex_lifetime``."""
    if not store.has("vertex_lifetime"):
        raise DgbenchError(f"{store.path}: no vertex_lifetime array (made by an older `nonuniform`?)")
    first, last = store.read("vertex_lifetime").T
    steps = np.arange(store.num_snapshots)[:, None]
    return (first[None, :] <= steps) & (steps <= last[None, :])
