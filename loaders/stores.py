"""Writing prepared events as dgbench stores: snapshot cutting by time window, streams with splits.

Snapshot windows reuse dgbench.convert's window parser and window arithmetic (snapshot k holds
times in [origin + k*window, origin + (k+1)*window), origin = first event, empty windows kept),
so `prepare --to snapshots` and `convert` cut identically. Duplicate (src, dst) edges inside one
snapshot are counted and either kept as multi-edges or merged with summed weights.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

import dgbench
from dgbench.convert import MAX_SNAPSHOTS, _window_indices, parse_window
from dgbench.errors import DgbenchError, InputError
from dgbench.progress import progress
from dgbench.store import EdgeStreamStoreWriter, SnapshotStoreWriter
from dgbench.loaders.events import Events, PreparedEvents

STREAM_BLOCK = 1 << 20
SNAPSHOT_BATCH = 1 << 20  # rows sorted per batch while the previous batch is written
DUPLICATE_POLICIES = ("keep", "sum")
TGL_ROLLS = {"train": 0, "val": 1, "test": 2}


def resolve_window(window: str | None, time_unit: str) -> int | float:
    """The window in time units: ``auto`` is one step for step-timed data, else one day."""
    if window in (None, "auto"):
        return 1 if time_unit == "step" else 86400
    return parse_window(window)


def loader_provenance(prepared: PreparedEvents, *, source: str, fmt: str, loader: str,
                      params: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Where a store came from: raw files with sha256, loader, parameters, row accounting."""
    return events_provenance(prepared.source, prepared.rows, prepared.rows_out_of_order, source=source, fmt=fmt,
                             loader=loader, params=params, extra=extra)


def events_provenance(events: Events, rows: int, rows_out_of_order: int, *, source: str, fmt: str, loader: str,
                      params: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`loader_provenance` from the parsed file's metadata (``events``) and its row counts."""
    return {"source": source, "format": fmt, "loader": loader, "params": params,
            "raw": [raw.record() for raw in events.raw_files],
            "raw_file": events.source_file.name, "raw_sha256": events.raw_files[0].sha256 if events.raw_files else None,
            "rows_read": int(rows + events.rows_dropped), "rows_dropped": int(events.rows_dropped),
            "rows_out_of_order": int(rows_out_of_order), "time_unit": events.time_unit,
            "format_details": events.details, "dgbench_version": dgbench.__version__, "transforms": [],
            **(extra or {})}


# --------------------------------------------------------------------------- snapshots

def write_snapshots(prepared: PreparedEvents, out: Path, *, window: int | float, duplicates: str,
                    provenance: dict[str, Any], overwrite: bool = False) -> Path:
    """Cut the events into time windows and write a snapshot store; duplicates counted per snapshot."""
    if duplicates not in DUPLICATE_POLICIES:
        raise DgbenchError(f"--duplicates must be one of {', '.join(DUPLICATE_POLICIES)}, got '{duplicates}'")
    t = prepared.t
    origin = t[0].item()
    snapshot_of = _window_indices(t, origin, window)
    num_snapshots = int(snapshot_of[-1]) + 1
    if num_snapshots > MAX_SNAPSHOTS:
        raise DgbenchError(f"a {window}-unit window over this data makes {num_snapshots:,} snapshots "
                           f"(limit {MAX_SNAPSHOTS:,}); pass a larger --window")
    bounds = np.searchsorted(snapshot_of, np.arange(num_snapshots + 1))
    cut = {"method": "time-window", "window_seconds" if prepared.source.time_unit == "s" else "window_steps": window,
           "origin": origin, "time_unit": prepared.source.time_unit}
    # the snapshot schema has no per-edge features and holds vertex features only as (T, N, F) frames
    dropped = [name for name, value in (("edge_features", prepared.source.edge_features),
                                        ("node_features", prepared.node_features)) if value is not None]
    provenance = {**provenance, "params": {**provenance["params"], "window": window, "duplicates": duplicates},
                  "dropped_arrays": dropped}
    with SnapshotStoreWriter(out, num_nodes=prepared.num_nodes, directed=prepared.source.directed, cut=cut,
                             provenance=provenance, overwrite=overwrite, bipartite=prepared.bipartite,
                             time_dtype=t.dtype) as writer:
        writer.attrs["provenance"]["duplicates"] = _write_batches(writer, prepared, bounds, duplicates,
                                                                  [origin + k * window for k in range(num_snapshots)])
        _write_vertex_arrays(writer, prepared)
        return writer.close()


def _write_batches(writer: SnapshotStoreWriter, prepared: PreparedEvents, bounds: np.ndarray, duplicates: str,
                   starts: list[int | float]) -> int:
    """Sort the snapshots batch by batch (~SNAPSHOT_BATCH rows) while a thread writes the batch before;
    returns the number of duplicate pairs."""
    repeated = 0
    writing: Future | None = None
    with progress(total=len(bounds) - 1, desc="snapshots", unit="snap") as bar, \
            ThreadPoolExecutor(max_workers=1) as writer_thread:
        first = 0
        while first < len(bounds) - 1:
            last = max(first + 1, int(np.searchsorted(bounds, bounds[first] + SNAPSHOT_BATCH, side="right")) - 1)
            last = min(last, len(bounds) - 1)
            columns, batch_bounds, batch_repeated = _sorted_snapshots(prepared, bounds[first:last + 1], duplicates)
            repeated += batch_repeated
            if writing is not None:
                writing.result()
            writing = writer_thread.submit(writer.append_snapshots, **columns, bounds=batch_bounds,
                                           starts=starts[first:last])
            bar.update(last - first)
            first = last
        if writing is not None:
            writing.result()
    return repeated


def pair_order(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The stable (dst, src) order of a block of edges and its sorted pair keys ``dst * N + src``.

    When ``pair key * len`` fits in int64 the row index is packed into the low bits, so a plain
    value sort (faster than a stable argsort) gives the stable order; otherwise a stable argsort.
    """
    key = dst.astype(np.int64) * num_nodes + src
    index_bits = max(1, int(len(key)).bit_length())
    if num_nodes * num_nodes < (1 << (62 - index_bits)):
        packed = np.sort((key << index_bits) | np.arange(len(key), dtype=np.int64))
        return packed & ((1 << index_bits) - 1), packed >> index_bits
    order = np.argsort(key, kind="stable")
    return order, key[order]


def _snapshots_pair_order(prepared: PreparedEvents, bounds: np.ndarray) -> np.ndarray:
    """The row order of events [bounds[0], bounds[-1]) (relative to bounds[0]): snapshot by snapshot
    (rows [bounds[k], bounds[k+1])), each in its stable (dst, src) order, so repeated pairs stay in time order."""
    origin = int(bounds[0])
    order = np.empty(int(bounds[-1]) - origin, dtype=np.int64)
    for k in range(len(bounds) - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        order[a - origin:b - origin] = pair_order(prepared.src[a:b], prepared.dst[a:b], prepared.num_nodes)[0]
        order[a - origin:b - origin] += a - origin
    return order


def _sorted_snapshots(prepared: PreparedEvents, bounds: np.ndarray,
                      duplicates: str) -> tuple[dict[str, np.ndarray | None], np.ndarray, int]:
    """The columns of the snapshots delimited by ``bounds`` (event rows), sorted by (snapshot, dst, src);
    duplicate pairs counted and, for ``sum``, merged (earliest time, summed weight, largest label).
    Returns (columns, snapshot bounds within them, number of duplicate pairs)."""
    order = _snapshots_pair_order(prepared, bounds)
    rows = slice(int(bounds[0]), int(bounds[-1]))
    given = {"src": prepared.src, "dst": prepared.dst, "time": prepared.t, "weight": prepared.weight,
             "label": prepared.label}
    columns = {name: None if values is None else values[rows][order] for name, values in given.items()}
    bounds = bounds - bounds[0]
    src, dst = columns["src"], columns["dst"]
    first = np.ones(len(src), dtype=bool)  # first row of each (snapshot, pair) run
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    first[bounds[:-1][bounds[:-1] < len(src)]] = True
    repeated = int(len(src) - np.count_nonzero(first))
    if duplicates == "keep" or not repeated:
        if duplicates == "sum" and columns["weight"] is None:
            columns["weight"] = np.ones(len(src), dtype=np.float32)
        return columns, bounds, repeated
    starts = np.flatnonzero(first)
    weight = columns["weight"] if columns["weight"] is not None else np.ones(len(src), np.float32)
    merged = {"src": src[starts], "dst": dst[starts], "time": np.minimum.reduceat(columns["time"], starts),
              "weight": np.add.reduceat(weight, starts),
              "label": None if columns["label"] is None else np.maximum.reduceat(columns["label"], starts)}
    return merged, np.searchsorted(starts, bounds), repeated


# --------------------------------------------------------------------------- streams

def chronological_split(prepared: PreparedEvents) -> tuple[int, int, str] | None:
    """TGL's ext_roll split (0 train / 1 val / 2 test) as event indices, or None without ext_roll."""
    roll = prepared.ext_roll
    if roll is None:
        return None
    if np.any(roll[1:] < roll[:-1]):
        row = int(np.argmax(roll[1:] < roll[:-1])) + 1
        raise InputError(prepared.source.source_file, f"ext_roll goes back from {roll[row - 1]} to {roll[row]} "
                                                      f"at event {row} in time order: not a chronological split",
                         field="ext_roll")
    if len(roll) and (roll.min() < 0 or roll.max() > 2):
        raise InputError(prepared.source.source_file, "ext_roll values must be 0 (train), 1 (val) or 2 (test)",
                         field="ext_roll")
    return int(np.searchsorted(roll, 1)), int(np.searchsorted(roll, 2)), "tgl-ext_roll"


def write_stream(prepared: PreparedEvents, out: Path, *, provenance: dict[str, Any], overwrite: bool = False,
                 val_fraction: float = 0.15, test_fraction: float = 0.15) -> Path:
    """Write a time-sorted edge stream; split from ext_roll when present, else the 70/15/15 quantiles."""
    features = prepared.source.edge_features
    weight_as_feature = features is None and prepared.weight is not None
    feature_dim = int(features.shape[1]) if features is not None else (1 if weight_as_feature else 0)
    if weight_as_feature:
        provenance = {**provenance, "edge_features": "weight (amount/rating) as a 1-dim edge feature"}
    duplicates = _count_stream_duplicates(prepared)
    provenance = {**provenance, "duplicates": duplicates}
    with EdgeStreamStoreWriter(out, num_nodes=prepared.num_nodes, directed=prepared.source.directed,
                               provenance=provenance, time_dtype=prepared.t.dtype, edge_feature_dim=feature_dim,
                               overwrite=overwrite, bipartite=prepared.bipartite) as writer:
        total = len(prepared.t)
        for a in progress(range(0, total, STREAM_BLOCK), desc="events", unit="block"):
            b = min(a + STREAM_BLOCK, total)
            rows = (prepared.weight[a:b, None].astype(np.float32) if weight_as_feature
                    else prepared.edge_feature_rows(a, b))
            writer.append_events(prepared.src[a:b], prepared.dst[a:b], prepared.t[a:b], edge_features=rows,
                                 label=None if prepared.label is None else prepared.label[a:b])
        split = chronological_split(prepared)
        if split is not None:
            writer.set_split(split[0], split[1], split[2])
        _write_vertex_arrays(writer, prepared)
        return writer.close(val_fraction=val_fraction, test_fraction=test_fraction)


def _count_stream_duplicates(prepared: PreparedEvents) -> int:
    """Events identical to another in (src, dst, t): kept in a stream (they are distinct interactions)."""
    return count_repeated_events(prepared.src, prepared.dst, prepared.t, prepared.num_nodes)


def count_repeated_events(src: np.ndarray, dst: np.ndarray, t: np.ndarray, num_nodes: int) -> int:
    """How many events repeat an earlier one's (src, dst, t). In a time-sorted stream repeats share a run
    of equal times, so only events sharing their time with a neighbour are looked at, their (run index,
    src · N + dst) packed into one int64 and one sort of it counts them exactly; an unsorted stream, or one
    whose packed key could overflow, takes the two-key lexsort."""
    if len(t) < 2:
        return 0
    new_time = t[1:] != t[:-1]
    pairs = int(num_nodes) ** 2  # a Python int: no overflow in the check
    if bool((t[1:] >= t[:-1]).all()) and int(np.count_nonzero(new_time)) < np.iinfo(np.int64).max // pairs:
        shares_time = np.zeros(len(t), dtype=bool)
        shares_time[1:] = ~new_time
        shares_time[:-1] |= shares_time[1:].copy()
        rows = np.flatnonzero(shares_time)
        packed = np.concatenate([[0], np.cumsum(new_time, dtype=np.int64)])[rows]
        packed *= pairs
        packed += src[rows].astype(np.int64) * num_nodes + dst[rows]
        packed.sort()
        return int(np.count_nonzero(packed[1:] == packed[:-1]))
    key = src.astype(np.int64) * num_nodes + dst
    order = np.lexsort((key, t))
    key = key[order]
    same = key[1:] == key[:-1]
    same &= t[order][1:] == t[order][:-1]
    return int(np.count_nonzero(same))


class RepeatCounter:
    """:func:`count_repeated_events` of a time-sorted stream fed in blocks: each block is counted together
    with the rows of the previous block's last time (repeats share a time), minus the repeats among those
    rows, counted before. Memory: a block plus the rows of one time."""

    def __init__(self, num_nodes: int):
        self.num_nodes, self.repeated = num_nodes, 0
        self.carry: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.carry_repeated = 0

    def add(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> None:
        if not len(t):
            return
        if self.carry is not None:
            src, dst, t = (np.concatenate([kept, new]) for kept, new in zip(self.carry, (src, dst, t)))
        self.repeated += count_repeated_events(src, dst, t, self.num_nodes) - self.carry_repeated
        last = int(np.searchsorted(t, t[-1], side="left"))
        self.carry = (src[last:].copy(), dst[last:].copy(), t[last:].copy())
        self.carry_repeated = count_repeated_events(*self.carry, self.num_nodes)


def _write_vertex_arrays(writer: SnapshotStoreWriter | EdgeStreamStoreWriter, prepared: PreparedEvents) -> None:
    writer.write_array("node_ids", prepared.node_ids)
    if prepared.node_label is not None:
        writer.write_array("node_label", np.asarray(prepared.node_label, dtype=np.int8))
    # snapshot stores hold vertex features as (T, N, F) frames, so static (N, F) ones go to streams only
    if prepared.node_features is not None and isinstance(writer, EdgeStreamStoreWriter):
        writer.write_array("node_features", np.asarray(prepared.node_features, dtype=np.float32))
