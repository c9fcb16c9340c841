"""Temporal smoothing of snapshot stores: edge-life (ESDG §5.4) and the M-product (TM-GCN).

Both combine the window of the last w adjacencies (sum, or mean with the features averaged too),
streamed into a new store or applied in memory with ESDG Table 1's model pairing
(:data:`MODEL_SMOOTHING`), so a run's targets stay the raw next snapshots.
See docs/discrete-schemes.md (section "Task", paragraph "Smoothing").
"""
from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from dgbench.errors import DgbenchError
from dgbench.progress import progress
from dgbench.store import EDGE_COLUMNS, SNAPSHOTS, SnapshotStore, SnapshotStoreWriter, id_dtype, open_store

EDGE_LIFE, M_PRODUCT, RAW = "edge-life", "m-product", "none"
# ESDG Table 1 / §5.4: the smoothing each model is trained on (models not listed: the raw graph)
MODEL_SMOOTHING = {"tmgcn": M_PRODUCT, "evolvegcn-o": EDGE_LIFE, "cdgcn": RAW}
# Rows read from the input per Zarr call: many small snapshots are read together (one call per
# snapshot costs more than the snapshot), large ones one at a time.
READ_BLOCK_ROWS = 1 << 20
# Written by the SnapshotStoreWriter itself or rebuilt here; every other array is copied unchanged.
REBUILT_ARRAYS = frozenset(EDGE_COLUMNS[SNAPSHOTS]) | {"offsets", "node_features", "snapshot_start"}


@dataclass
class WeightedAdjacency:
    """One coalesced snapshot: sorted unique keys dst*N + src and their float64 summed weights."""

    keys: np.ndarray
    weights: np.ndarray


def coalesce(keys: np.ndarray, weights: np.ndarray) -> WeightedAdjacency:
    """Sum the weights of equal keys; the result is sorted by key.

    A stable sort runs timsort, which merges the already sorted runs of a concatenated window
    in O(n log w) rather than sorting from scratch.
    """
    if len(keys) == 0:
        return WeightedAdjacency(np.empty(0, np.int64), np.empty(0, np.float64))
    order = np.argsort(keys, kind="stable")
    keys, weights = keys[order], weights[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return WeightedAdjacency(keys[starts], np.add.reduceat(weights, starts))


def window_sum(window: Sequence[WeightedAdjacency]) -> WeightedAdjacency:
    """Entry-wise sum of the snapshots in the window, coalesced over the union of their supports."""
    if len(window) == 1:
        return window[0]
    return coalesce(np.concatenate([a.keys for a in window]), np.concatenate([a.weights for a in window]))


def check_smoothing(name: str, window: int) -> None:
    """Refuse an unknown smoothing or a window shorter than one snapshot."""
    if name not in (EDGE_LIFE, M_PRODUCT):
        raise DgbenchError(f"unknown smoothing {name!r}; expected {EDGE_LIFE} or {M_PRODUCT}")
    if window < 1:
        raise DgbenchError(f"{name}: the window must be at least 1 snapshot (got {window})")


def coalesced_snapshot(src: np.ndarray, dst: np.ndarray, weight: np.ndarray | None,
                       num_nodes: int) -> WeightedAdjacency:
    """One raw snapshot's entries as keys dst*N + src with float64 summed weights (1 per row when unweighted)."""
    keys = np.asarray(dst, dtype=np.int64) * np.int64(num_nodes) + np.asarray(src, dtype=np.int64)
    weights = np.ones(len(keys)) if weight is None else np.asarray(weight, dtype=np.float64)
    return coalesce(keys, weights)


def smoothed_entries(window: Sequence[WeightedAdjacency], name: str, num_nodes: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, weight) of one smoothed snapshot from the coalesced snapshots of its window, oldest first:
    their sum (edge-life) or mean over the window's length (M-product)."""
    smoothed = window_sum(window)
    values = smoothed.weights / len(window) if name == M_PRODUCT else smoothed.weights
    out_dst, out_src = np.divmod(smoothed.keys, np.int64(num_nodes))
    return out_src, out_dst, values


def smooth_adjacencies(snapshots: Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]], num_nodes: int,
                       name: str, window: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """In memory: (src, dst, weight) of every snapshot after edge-life (window sum) or the M-product
    (window mean) over the last ``window`` snapshots; the same entries the streaming transform writes."""
    check_smoothing(name, window)
    edges: deque[WeightedAdjacency] = deque(maxlen=window)
    for src, dst, weight in snapshots:
        edges.append(coalesced_snapshot(src, dst, weight, num_nodes))
        yield smoothed_entries(edges, name, num_nodes)


def frame_mean(frames: Sequence[np.ndarray]) -> np.ndarray:
    """The mean of a window of frames (float64 arithmetic, the frames' dtype): one frame of the M-product."""
    return np.mean(np.stack(frames), axis=0, dtype=np.float64).astype(frames[-1].dtype)


def window_mean(frames: list[np.ndarray], window: int) -> list[np.ndarray]:
    """TM-GCN's M-product on a feature tensor: frame t becomes the mean of frames max(0, t-w+1)..t."""
    return [frame_mean(frames[max(0, t - window + 1):t + 1]) for t in range(len(frames))]


def store_smoothing(store: SnapshotStore) -> str | None:
    """The smoothing transform a store was written by (its provenance), or None for a raw store."""
    names = [t.get("name") for t in store.provenance.get("transforms", []) if isinstance(t, dict)]
    smoothed = [name for name in names if name in (EDGE_LIFE, M_PRODUCT)]
    return smoothed[-1] if smoothed else None


def _snapshot_adjacencies(store: SnapshotStore) -> Iterator[WeightedAdjacency]:
    """Each input snapshot as a coalesced weighted adjacency, read a block of snapshots at a time."""
    offsets, n, t = store.offsets, np.int64(store.num_nodes), 0
    while t < store.num_snapshots:
        stop = max(t + 1, int(np.searchsorted(offsets, offsets[t] + READ_BLOCK_ROWS, side="right")) - 1)
        stop = min(stop, store.num_snapshots)
        a, b = int(offsets[t]), int(offsets[stop])
        keys = store.read("dst", a, b).astype(np.int64) * n + store.read("src", a, b)
        weights = (store.read("weight", a, b).astype(np.float64) if store.has("weight")
                   else np.ones(b - a, np.float64))
        for first, last in zip(offsets[t:stop] - a, offsets[t + 1:stop + 1] - a):
            yield coalesce(keys[first:last], weights[first:last])
        t = stop


def _frames(store: SnapshotStore) -> Iterator[np.ndarray | None]:
    for t in range(store.num_snapshots):
        yield store.frame(t)


def _output_provenance(store: SnapshotStore, name: str, parameter: str, value: int) -> dict[str, Any]:
    provenance = copy.deepcopy(store.provenance)
    transforms = list(provenance.get("transforms", []))
    transforms.append({"name": name, parameter: value, "input_fingerprint": store.fingerprint})
    provenance["transforms"] = transforms
    return provenance


def _smooth(store_path: str | Path, out: str | Path, *, name: str, parameter: str, window: int,
            overwrite: bool) -> Path:
    """Write the windowed sum (edge-life) or mean (M-product) of every snapshot to ``out``."""
    if window < 1:
        raise DgbenchError(f"{name}: the window must be at least 1 snapshot (got {window})")
    store = open_store(store_path, kind=SNAPSHOTS)
    out = Path(out)
    if out.resolve() == store.path.resolve():
        raise DgbenchError(f"{out}: the output store must differ from the input store")
    average = name == M_PRODUCT
    n = store.num_nodes
    ids = id_dtype(n)
    starts = store.read("snapshot_start") if store.has("snapshot_start") else None
    edges: deque[WeightedAdjacency] = deque(maxlen=window)
    frames: deque[np.ndarray] = deque(maxlen=window)
    with SnapshotStoreWriter(out, num_nodes=n, directed=store.directed, cut=store.attrs.get("cut", {}),
                             provenance=_output_provenance(store, name, parameter, window),
                             overwrite=overwrite, bipartite=store.attrs.get("bipartite")) as writer:
        snapshots = zip(_snapshot_adjacencies(store), _frames(store))
        for t, (adjacency, frame) in enumerate(progress(snapshots, total=store.num_snapshots, desc=name,
                                                        unit="snap")):
            edges.append(adjacency)
            smoothed = window_sum(edges)
            weights = smoothed.weights / len(edges) if average else smoothed.weights
            if frame is not None:
                frames.append(frame)
                # TM-GCN applies M to the feature tensor too; ESDG's edge-life smooths only the graph.
                frame = np.mean(np.stack(frames), axis=0, dtype=np.float64) if average else frame
            dst, src = np.divmod(smoothed.keys, n)
            writer.append_snapshot(src.astype(ids), dst.astype(ids), weight=weights.astype(np.float32),
                                   start=None if starts is None else starts[t].item(), features=frame)
        for array in sorted(set(store.attrs.get("arrays", {})) - REBUILT_ARRAYS):
            writer.write_array(array, store.read(array))
        return writer.close()


def edge_life(store_path: str | Path, out: str | Path, life: int, overwrite: bool = False) -> Path:
    """ESDG §5.4 edge-life: A_t <- A_t + sum_{i=t-L+1}^{t-1} A_i, written as a new snapshot store."""
    return _smooth(store_path, out, name=EDGE_LIFE, parameter="life", window=life, overwrite=overwrite)


def m_product(store_path: str | Path, out: str | Path, window: int, overwrite: bool = False) -> Path:
    """TM-GCN M-product A ×1 M, M_tk = 1/min(W,t) for max(1,t-W+1) <= k <= t, on edges and frames."""
    return _smooth(store_path, out, name=M_PRODUCT, parameter="window", window=window, overwrite=overwrite)


def default_output_path(store_path: str | Path, name: str, window: int) -> Path:
    """``X.zarr`` -> ``X.edgelife3.zarr`` / ``X.mproduct3.zarr`` beside the input."""
    store_path = Path(store_path)
    stem = store_path.name[:-len(".zarr")] if store_path.name.endswith(".zarr") else store_path.name
    return store_path.with_name(f"{stem}.{name.replace('-', '')}{window}.zarr")


def smooth(store_path: str | Path, *, life: int | None = None, window: int | None = None,
           out: str | Path | None = None, overwrite: bool = False) -> Path:
    """Apply exactly one of edge-life ``life`` or M-product ``window`` (what `prepare` and the CLI call)."""
    if (life is None) == (window is None):
        raise DgbenchError("choose exactly one smoothing transform: --edge-life L or --m-product W")
    name, size = (EDGE_LIFE, life) if life is not None else (M_PRODUCT, window)
    target = Path(out) if out is not None else default_output_path(store_path, name, size)
    transform = edge_life if name == EDGE_LIFE else m_product
    return transform(store_path, target, size, overwrite=overwrite)


@click.command(name="transform")
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--edge-life", "life", type=click.IntRange(1), default=None,
              help="ESDG edge-life: each snapshot becomes the sum of the last L snapshots.")
@click.option("--m-product", "window", type=click.IntRange(1), default=None,
              help="TM-GCN M-product: each snapshot (and frame) becomes the mean of the last W.")
@click.option("--out", "-o", type=click.Path(path_type=Path), default=None,
              help="Store to write (default: beside STORE, e.g. X.edgelife3.zarr).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output store.")
def transform_command(store: Path, life: int | None, window: int | None, out: Path | None,
                      overwrite: bool) -> None:
    """Smooth the snapshot store STORE over time into a new store (--edge-life L or --m-product W)."""
    if (life is None) == (window is None):
        raise click.UsageError("give exactly one of --edge-life L or --m-product W")
    path = smooth(store, life=life, window=window, out=out, overwrite=overwrite)
    rows, after = open_store(store).num_edges, open_store(path).num_edges
    # growth against the input's distinct (snapshot, u, v) entries: smoothing merges repeated rows
    distinct = distinct_entries(store)
    growth = after / distinct if distinct else float("nan")
    click.echo(f"wrote {path}  ({rows:,} input rows, {distinct:,} distinct per snapshot -> {after:,} entries, "
               f"x{growth:.1f})")


def distinct_entries(store_path: str | Path) -> int:
    """Non-zeros of the adjacency tensor: each snapshot's (u, v) pairs counted once."""
    return sum(len(adjacency.keys) for adjacency in _snapshot_adjacencies(open_store(store_path, kind=SNAPSHOTS)))
