"""Parsed events before they become a store: time normalisation, stable time order, id relabelling.

Every format module returns :class:`Events` (original ids, raw times, optional weight/label/edge
features); :func:`normalise` turns them into :class:`PreparedEvents`: time sorted stably (counting
the rows that were out of order), vertex ids relabelled to 0..N-1 (the original ids are kept as
``node_ids``), bipartite user/item id spaces relabelled separately with items shifted after users.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dgbench.errors import InputError
from dgbench.store import id_dtype

# The presence-table relabelling (O(E)) is used while the id range is at most this many times the
# number of id occurrences (plus a floor); sparser or huge ids fall back to sort-based np.unique.
DENSE_RANGE_FACTOR = 4
DENSE_RANGE_FLOOR = 1 << 22
MAX_EXACT_FLOAT = 2**53


@dataclass
class RawFile:
    """One raw file that was read: its name, size and sha256 (of the exact bytes used)."""

    name: str
    sha256: str
    size_bytes: int
    role: str = "edges"

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "bytes": self.size_bytes, "role": self.role}


@dataclass
class Events:
    """Events as a format module parsed them: original ids, times in file order, optional columns."""

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    source_file: Path
    time_unit: str  # "s" (Unix or relative seconds) or "step" (simulation steps)
    weight: np.ndarray | None = None
    label: np.ndarray | None = None
    edge_features: Any = None  # (E, F) array-like supporting slice and index-array reads
    ext_roll: np.ndarray | None = None  # TGL chronological roll per event: 0 train, 1 val, 2 test
    bipartite: bool = False
    directed: bool = True
    nodes: np.ndarray | None = None  # the known vertex universe (original ids), e.g. AMLSim accounts
    node_label: np.ndarray | None = None  # aligned with ``nodes``
    node_features: Any = None  # (len(nodes), F), aligned with ``nodes``
    raw_files: list[RawFile] = field(default_factory=list)
    rows_dropped: int = 0
    details: dict[str, Any] = field(default_factory=dict)  # format-specific facts for provenance

    @property
    def num_rows(self) -> int:
        return len(self.src)


@dataclass
class PreparedEvents:
    """Events ready to write: relabelled ids, non-decreasing times, the permutation applied."""

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    node_ids: np.ndarray
    num_nodes: int
    source: Events  # metadata and edge features; its src/dst/t columns were released by normalise()
    rows: int  # events parsed (rows read minus rows dropped)
    order: np.ndarray | None  # the stable time sort applied to the parsed rows (None: already sorted)
    rows_out_of_order: int
    bipartite: dict[str, int] | None = None
    weight: np.ndarray | None = None
    label: np.ndarray | None = None
    ext_roll: np.ndarray | None = None
    node_label: np.ndarray | None = None
    node_features: Any = None

    def edge_feature_rows(self, start: int, stop: int) -> np.ndarray | None:
        """Edge features of prepared events [start, stop), read through the time-sort permutation."""
        features = self.source.edge_features
        if features is None:
            return None
        rows = features[start:stop] if self.order is None else features[np.sort(self.order[start:stop])]
        if self.order is not None:  # np.sort made reads sequential; put them back in event order
            rank = np.argsort(np.argsort(self.order[start:stop], kind="stable"), kind="stable")
            rows = rows[rank]
        return _as_float32(rows)


def _as_float32(rows: Any) -> np.ndarray:
    if hasattr(rows, "numpy"):  # a torch tensor (TGL .pt features, memory-mapped)
        rows = rows.float().numpy()
    return np.asarray(rows, dtype=np.float32)


def normalise_time(t: np.ndarray) -> np.ndarray:
    """Whole-number float times become int64 (exact Unix seconds); fractional times stay float64."""
    if np.issubdtype(t.dtype, np.floating) and len(t):
        if -MAX_EXACT_FLOAT < t.min() and t.max() < MAX_EXACT_FLOAT:  # NaN fails both
            whole = t.astype(np.int64)
            if np.array_equal(whole, t):  # exact: every value is below 2**53
                return whole
        return t.astype(np.float64, copy=False)
    return t.astype(np.int64, copy=False) if np.issubdtype(t.dtype, np.integer) else t


def to_seconds(t: np.ndarray, per_second: int) -> np.ndarray:
    """Times counted in 1/``per_second`` seconds (ms, us, ns) as seconds: exact integers when every
    time is a whole second, else float64."""
    if per_second == 1:
        return t
    if np.issubdtype(t.dtype, np.integer) and not np.any(t % per_second):
        return t // per_second
    return t / per_second


def relabel(arrays: list[np.ndarray], universe: np.ndarray | None, file: Path,
            what: str = "vertex") -> tuple[np.ndarray, list[np.ndarray]]:
    """Map original ids to 0..N-1 in increasing id order; returns (original ids, mapped arrays).

    With ``universe`` (e.g. an accounts file), N is its size and every id must belong to it.
    """
    known = universe if universe is not None else None
    total = sum(len(a) for a in arrays) + (0 if known is None else len(known))
    lows = [int(a.min()) for a in arrays if len(a)] + ([int(known.min())] if known is not None and len(known) else [])
    highs = [int(a.max()) for a in arrays if len(a)] + ([int(known.max())] if known is not None and len(known) else [])
    if not highs:
        raise InputError(file, f"no {what} ids")
    low, high = min(lows), max(highs)
    if low >= 0 and high < DENSE_RANGE_FACTOR * total + DENSE_RANGE_FLOOR:
        return _relabel_dense(arrays, known, high, file, what)
    return _relabel_sorted(arrays, known, file, what)


def _relabel_dense(arrays: list[np.ndarray], universe: np.ndarray | None, high: int, file: Path,
                   what: str) -> tuple[np.ndarray, list[np.ndarray]]:
    present = np.zeros(high + 1, dtype=bool)
    with ThreadPoolExecutor(max_workers=2) as pool:  # numpy scatters/gathers release the GIL
        list(pool.map(_mark_present, [present] * len(arrays), [universe] if universe is not None else arrays))
    if universe is not None:
        for values in arrays:
            missing = ~present[values]
            if missing.any():
                raise InputError(file, f"{what} id {values[np.argmax(missing)]} is not in the known vertex set "
                                       f"(the accounts/nodes file)")
    node_ids = np.flatnonzero(present)
    codes = np.cumsum(present, dtype=id_dtype(len(node_ids)))  # codes of the final dtype: no cast pass
    codes -= 1
    with ThreadPoolExecutor(max_workers=2) as pool:
        return node_ids, list(pool.map(codes.__getitem__, arrays))


def _mark_present(present: np.ndarray, values: np.ndarray) -> None:
    present[values] = True  # threads may mark the same id: they all write True


def _relabel_sorted(arrays: list[np.ndarray], universe: np.ndarray | None, file: Path,
                    what: str) -> tuple[np.ndarray, list[np.ndarray]]:
    node_ids = np.unique(universe if universe is not None else np.concatenate(arrays))
    dtype = id_dtype(len(node_ids))
    mapped = []
    for values in arrays:
        codes = np.searchsorted(node_ids, values)
        bad = (codes >= len(node_ids)) | (node_ids[np.minimum(codes, len(node_ids) - 1)] != values)
        if bad.any():
            raise InputError(file, f"{what} id {values[np.argmax(bad)]} is not in the known vertex set "
                                   f"(the accounts/nodes file)")
        mapped.append(codes.astype(dtype))
    return node_ids, mapped


def count_out_of_order(t: np.ndarray) -> int:
    """Rows whose time is earlier than the row before them."""
    return int(np.count_nonzero(t[1:] < t[:-1])) if len(t) > 1 else 0


def normalise(events: Events) -> PreparedEvents:
    """Sort by time (stably, counting out-of-order rows) and relabel vertex ids to 0..N-1.

    Takes ownership of the event columns: ``events.src/dst/t`` are released as soon as their
    relabelled/sorted replacements exist, so peak memory holds one copy of each column, not two.
    """
    rows = events.num_rows
    if rows == 0:
        raise InputError(events.source_file, "no events (the file has no data rows)")
    t, events.t = normalise_time(events.t), None
    out_of_order = count_out_of_order(t)
    order = np.argsort(t, kind="stable") if out_of_order else None

    def take(values: np.ndarray | None) -> np.ndarray | None:
        return values if values is None or order is None else values[order]

    src, dst, events.src, events.dst = take(events.src), take(events.dst), None, None
    t, weight, label, ext_roll = take(t), take(events.weight), take(events.label), take(events.ext_roll)
    if events.bipartite:
        user_ids, (src,) = relabel([src], None, events.source_file, "user")
        item_ids, (dst,) = relabel([dst], None, events.source_file, "item")
        node_ids = np.concatenate([user_ids, item_ids])
        dst = (dst.astype(id_dtype(len(node_ids))) + len(user_ids))  # items after users (JODIE/TGN layout)
        src = src.astype(dst.dtype)
        bipartite = {"num_users": int(len(user_ids)), "num_items": int(len(item_ids))}
    else:
        node_ids, (src, dst) = relabel([src, dst], events.nodes, events.source_file)
        bipartite = None
    return PreparedEvents(src=src, dst=dst, t=t, node_ids=node_ids, num_nodes=len(node_ids), source=events,
                          rows=rows, order=order, rows_out_of_order=out_of_order, bipartite=bipartite,
                          weight=weight, label=label, ext_roll=ext_roll,
                          node_label=_align_to_universe(events, node_ids, "node_label"),
                          node_features=_align_to_universe(events, node_ids, "node_features"))


def _align_to_universe(events: Events, node_ids: np.ndarray, name: str) -> Any:
    """A per-vertex array given in ``events.nodes`` order, reordered to the relabelled ids."""
    return align_to_universe(getattr(events, name), events.nodes, node_ids)


def align_to_universe(values: Any, nodes: np.ndarray | None, node_ids: np.ndarray) -> Any:
    """``values`` given per vertex of ``nodes`` (None: indexed by original id), reordered to ``node_ids``."""
    if values is None:
        return None
    if nodes is None:
        return values[node_ids]  # indexed by original id
    position = np.argsort(nodes, kind="stable")
    return values[position[np.searchsorted(nodes, node_ids, sorter=position)]]
