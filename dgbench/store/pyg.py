"""PyTorch Geometric interop: a stream store as PyG's ``TemporalData``, a snapshot store as a list of PyG
``Data`` or a PyG Temporal (PGT) ``DynamicGraphTemporalSignal``, and a ``TemporalData`` written as a store
(docs/interop.md). torch-geometric is optional: imported here on first use, one line when it is missing.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.store.read import EdgeStreamStore, SnapshotStore, open_store
from dgbench.store.write import EdgeStreamStoreWriter

if TYPE_CHECKING:
    from torch_geometric.data import Data, TemporalData

PYG_HINT = "pip install torch-geometric"
BLOCK_EVENTS = 1 << 20  # events handed to the writer per append


def _pyg_data() -> Any:
    """torch_geometric.data, or one DgbenchError line saying how to install it."""
    try:
        import torch_geometric.data as pyg_data
    except ImportError as exc:
        raise DgbenchError(f"PyG interop needs torch-geometric, which is not installed ({PYG_HINT})") from exc
    return pyg_data


def to_temporal_data(store: EdgeStreamStore, start: int = 0, stop: int | None = None) -> TemporalData:
    """Events [start, stop) as PyG ``TemporalData``: ``src``, ``dst``, ``t`` (the stored dtype: int64 or
    float64 seconds), ``msg`` (float32 edge features) and ``y`` (int64 labels) where the store has them.
    The store's graph attributes (num_nodes, split) are not carried: pass ``like=store`` to
    :func:`from_temporal_data` to write the same store back."""
    import torch
    pyg_data = _pyg_data()
    columns = store.events(start, stop)
    fields: dict[str, Any] = {"src": torch.from_numpy(columns["src"].astype(np.int64)),
                              "dst": torch.from_numpy(columns["dst"].astype(np.int64)),
                              "t": torch.from_numpy(np.ascontiguousarray(columns["t"]))}
    if "edge_features" in columns:
        fields["msg"] = torch.from_numpy(columns["edge_features"].astype(np.float32))
    if "label" in columns:
        fields["y"] = torch.from_numpy(columns["label"].astype(np.int64))
    return pyg_data.TemporalData(**fields)


def snapshot_arrays(store: SnapshotStore) -> dict[str, list[np.ndarray | None]]:
    """The per-snapshot numpy arrays PGT's ``DynamicGraphTemporalSignal`` is built from: ``edge_indices``
    (2, E_t) int64 [src; dst], ``edge_weights`` (E_t,) float32 (1 where the store has no weights),
    ``features`` (N, F) float32 frames or None, ``targets`` None (dgbench stores hold no node targets)."""
    out: dict[str, list[np.ndarray | None]] = {"edge_indices": [], "edge_weights": [], "features": [],
                                               "targets": []}
    for snapshot in store.snapshots():
        out["edge_indices"].append(np.stack([snapshot.src, snapshot.dst]).astype(np.int64))
        weight = snapshot.weight if snapshot.weight is not None else np.ones(snapshot.num_edges)
        out["edge_weights"].append(np.asarray(weight, dtype=np.float32))
        out["features"].append(store.frame(snapshot.index))
        out["targets"].append(None)
    return out


def to_pyg_snapshots(store: SnapshotStore) -> list[Data]:
    """One PyG ``Data`` per snapshot: ``edge_index`` (2, E_t), ``edge_weight`` where the store has weights,
    ``edge_time``/``edge_label`` where it has times/labels, ``x`` where it has vertex frames, and
    ``num_nodes`` = the store's N (every snapshot spans all vertices, as dgbench's schemes see them)."""
    import torch
    pyg_data = _pyg_data()
    graphs = []
    for snapshot in store.snapshots():
        fields: dict[str, Any] = {"edge_index": torch.from_numpy(np.stack([snapshot.src, snapshot.dst])
                                                                 .astype(np.int64)),
                                  "num_nodes": store.num_nodes}
        optional = {"edge_weight": snapshot.weight, "edge_time": snapshot.time, "edge_label": snapshot.label,
                    "x": store.frame(snapshot.index)}
        fields.update({name: torch.from_numpy(np.ascontiguousarray(values))
                       for name, values in optional.items() if values is not None})
        graphs.append(pyg_data.Data(**fields))
    return graphs


def to_pgt_signal(store: SnapshotStore) -> Any:
    """The snapshot store as PGT's ``DynamicGraphTemporalSignal`` (of :func:`snapshot_arrays`)."""
    try:
        from torch_geometric_temporal.signal import DynamicGraphTemporalSignal
    except ImportError as exc:
        raise DgbenchError(f"PGT interop needs torch-geometric-temporal, which could not be imported "
                           f"({type(exc).__name__}: {exc})") from exc
    return DynamicGraphTemporalSignal(**snapshot_arrays(store))


def _numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def from_temporal_data(data: TemporalData, out: str | Path, *, like: EdgeStreamStore | str | Path | None = None,
                       num_nodes: int | None = None, directed: bool = True, bipartite: dict[str, int] | None = None,
                       split: dict[str, Any] | None = None, overwrite: bool = False,
                       provenance: dict[str, Any] | None = None) -> EdgeStreamStore:
    """Write PyG ``TemporalData`` (``src``, ``dst``, ``t``; ``msg`` as edge features, ``y`` as 0/1 labels
    when present) as a stream store at ``out`` and return it open. Events are stably sorted by ``t``
    when they are not already. The graph attributes default to ``like`` (a store, e.g. the one
    :func:`to_temporal_data` read: the same events give the same fingerprint), else ``num_nodes`` =
    max id + 1, directed, not bipartite and the 70/15/15 quantile split of ``EdgeStreamStoreWriter``;
    ``split`` is a store's split mapping (``train_end``, ``val_end``, ``method``, ...). Written through
    the store writer: complete and fingerprinted, or not there at all."""
    import dgbench
    if like is not None:
        template = like if isinstance(like, EdgeStreamStore) else open_store(like, "stream")
        assert isinstance(template, EdgeStreamStore)
        num_nodes = template.num_nodes if num_nodes is None else num_nodes
        directed, bipartite = template.directed, template.attrs.get("bipartite") if bipartite is None else bipartite
        split = template.split if split is None else split
    src, dst, t = (_numpy(data.src).astype(np.int64), _numpy(data.dst).astype(np.int64), _numpy(data.t))
    if not (len(src) == len(dst) == len(t)):
        raise DgbenchError(f"TemporalData: src, dst and t have {len(src)}, {len(dst)} and {len(t)} rows")
    if not len(t):
        raise DgbenchError("TemporalData has no events")
    order = None if np.all(t[1:] >= t[:-1]) else np.argsort(t, kind="stable")
    msg = _numpy(data.msg).astype(np.float32) if getattr(data, "msg", None) is not None else None
    label = _numpy(data.y).astype(np.int8) if getattr(data, "y", None) is not None else None
    if msg is not None and msg.ndim == 1:
        msg = msg[:, None]
    columns = {"src": src, "dst": dst, "t": t, "edge_features": msg, "label": label}
    if order is not None:
        columns = {name: None if values is None else values[order] for name, values in columns.items()}
    n = int(max(src.max(), dst.max())) + 1 if num_nodes is None else int(num_nodes)
    record = {"source": "temporal-data", "format": "pyg-temporal-data", "dgbench_version": dgbench.__version__,
              "events_sorted_by_t": order is not None, **(provenance or {})}
    with EdgeStreamStoreWriter(out, num_nodes=n, directed=directed, provenance=record, time_dtype=t.dtype,
                               edge_feature_dim=0 if msg is None else msg.shape[1], overwrite=overwrite,
                               bipartite=bipartite) as writer:
        for first in range(0, len(t), BLOCK_EVENTS):
            block = {name: None if values is None else values[first:first + BLOCK_EVENTS]
                     for name, values in columns.items()}
            writer.append_events(block["src"], block["dst"], block["t"], edge_features=block["edge_features"],
                                 label=block["label"])
        if split is not None:
            details = {k: v for k, v in split.items() if k not in ("train_end", "val_end", "method")}
            writer.set_split(split["train_end"], split["val_end"], split.get("method", "given"), **details)
        path = writer.close()
    store = open_store(path, "stream")
    assert isinstance(store, EdgeStreamStore)
    return store
