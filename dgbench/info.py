"""`dgbench info`: a human summary of a store (sizes, edges per snapshot, time span, provenance)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from dgbench.store import SNAPSHOTS, EdgeStreamStore, SnapshotStore, open_store


def summarize(path: str | Path) -> dict[str, Any]:
    """The figures `dgbench info` prints, as a dict (also used by `--json`)."""
    store = open_store(path)
    out: dict[str, Any] = {"path": str(store.path), "kind": store.kind, "fingerprint": store.fingerprint,
                           "num_nodes": store.num_nodes, "num_edges": store.num_edges,
                           "directed": store.directed, "bipartite": store.attrs.get("bipartite"),
                           "arrays": sorted(store.attrs.get("arrays", {})),
                           "size_bytes": store.attrs.get("size_bytes"), "provenance": store.provenance}
    if isinstance(store, SnapshotStore):
        per = store.edges_per_snapshot()
        out.update(num_snapshots=store.num_snapshots, cut=store.attrs.get("cut"),
                   edges_per_snapshot={"min": int(per.min()), "median": float(np.median(per)), "max": int(per.max())})
        if store.has("time") and store.num_edges:
            out["time_span"] = _snapshot_time_span(store, per)
    elif isinstance(store, EdgeStreamStore):
        last = store.num_events - 1  # read through store.read: a damaged chunk is a one-line StoreError
        out.update(num_events=store.num_events, split=store.split,
                   time_span=_span(store.read("t", 0, 1)[0], store.read("t", last, last + 1)[0]),
                   edge_feature_dim=int(store.array("edge_features").shape[1]) if store.has("edge_features") else 0)
    return out


def _snapshot_time_span(store: SnapshotStore, per: np.ndarray) -> dict[str, float]:
    """Snapshots are in time order but sorted by (dst, src) inside: span = first/last non-empty one."""
    nonempty = np.flatnonzero(per)
    first, last = store.snapshot(int(nonempty[0])).time, store.snapshot(int(nonempty[-1])).time
    return _span(first.min(), last.max())


def _span(first, last) -> dict[str, float]:
    return {"first": float(first), "last": float(last), "seconds": float(last - first)}


WRAP_COLUMNS = 100  # long values (provenance) wrap here: the summary reads in a terminal


def format_summary(info: dict[str, Any]) -> str:
    lines = [f"store        {info['path']}",
             f"kind         {info['kind']}  ({'directed' if info['directed'] else 'undirected'})",
             f"fingerprint  {info['fingerprint']}",
             f"vertices     {info['num_nodes']:,}",
             f"edges        {info['num_edges']:,}"]
    if info["kind"] == SNAPSHOTS:
        per = info["edges_per_snapshot"]
        lines += [f"snapshots    {info['num_snapshots']:,}  (cut: {json.dumps(info['cut'])})",
                  f"edges/snap   min {per['min']:,}  median {per['median']:,.0f}  max {per['max']:,}"]
    else:
        lines += [f"split        {json.dumps(info['split'])}",
                  f"edge feats   {info['edge_feature_dim']}"]
    if "time_span" in info:
        span = info["time_span"]
        steps = (info.get("provenance") or {}).get("time_unit") == "step"  # AMLSim: simulation steps, not seconds
        length = f"{span['seconds']:,.0f} steps" if steps else f"{span['seconds'] / 86400:,.2f} days"
        lines.append(f"time span    {span['first']:g} .. {span['last']:g}  ({length})")
    if info.get("bipartite"):
        lines.append(f"bipartite    {json.dumps(info['bipartite'])}")
    lines += [f"arrays       {', '.join(info['arrays'])}",
              f"on disk      {info['size_bytes'] / 2**20:,.1f} MiB" if info.get("size_bytes") else "on disk      ?",
              "provenance   " + "\n             ".join(textwrap.wrap(json.dumps(info["provenance"], sort_keys=True),
                                                                   WRAP_COLUMNS, break_on_hyphens=False))]
    return "\n".join(lines)
