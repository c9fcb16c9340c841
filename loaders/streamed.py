"""`prepare --to stream` in bounded memory: parse block by block, then write block by block.

Pass 1 parses the file a block at a time (:class:`~dgbench.loaders.parsing.TableBlocks`: the same checks
and one-line errors as a whole-file read), spills the columns to flat files in a scratch folder beside
the store, marks every vertex id seen in a presence table, and keeps the few numbers the guards and the
split need. Pass 2 relabels the spilled ids block by block (ids in increasing order, as
:func:`~dgbench.loaders.events.relabel` numbers them), counts repeated events
(:class:`~dgbench.loaders.stores.RepeatCounter`) and appends to the store writer. Memory: a block, the
presence table (one byte per id up to the largest) and its codes; never a whole column.

The store is the one the in-memory path writes (same fingerprint and provenance). A file whose times
are not sorted needs a global sort: pass 1 stops at the first backward step and the in-memory path
prepares it. docs/loader-formats.md, "Preparing large files".
"""
from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dgbench.errors import InputError
from dgbench.files import scratch_dir
from dgbench.progress import progress
from dgbench.store import EdgeStreamStoreWriter, id_dtype
from dgbench.loaders.events import MAX_EXACT_FLOAT, Events, RawFile, align_to_universe
from dgbench.loaders.guards import check_time_range, check_vertex_count
from dgbench.loaders.parsing import TableBlocks, column_numpy
from dgbench.loaders.stores import STREAM_BLOCK, TGL_ROLLS, RepeatCounter

FEATURE_BLOCK_BYTES = 64 << 20  # edge features copied per write block (GDELT: 182 floats an event, 92K events)
SPILLED = {"src": np.int64, "dst": np.int64, "t": None, "ext_roll": np.int8}  # None: the parsed dtype


@dataclass
class StreamSource:
    """What a format hands the streamed prepare: its file's blocks, which parsed column is which role
    (src, dst, t and optionally ext_roll), and ``finish(rows)``, called after the parse, which
    returns the Events metadata (raw files, details, edge and vertex features, no columns)."""

    blocks: TableBlocks
    roles: dict[str, str]
    finish: Callable[[int], Events]
    nodes: np.ndarray | None = None  # the known vertex universe (original ids), when the format has one
    bipartite: bool = False


STREAM_SOURCES: dict[str, Callable[[Path, Any], StreamSource | None]] = {}


class NotTimeSorted(Exception):
    """Raised in pass 1 at the first backward time step: the file goes to the in-memory path."""


@dataclass
class _Spill:
    """One column appended to a flat file, read back in blocks (into fresh memory, not mapped)."""

    path: Path
    dtype: np.dtype | None  # None: the first block's dtype
    handle: Any = None

    def append(self, values: np.ndarray) -> None:
        if self.handle is None:
            self.handle = open(self.path, "wb")
            self.dtype = self.dtype or values.dtype
        np.ascontiguousarray(values, dtype=self.dtype).tofile(self.handle)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()

    def read(self, start: int, stop: int) -> np.ndarray:
        dtype = np.dtype(self.dtype)
        return np.fromfile(self.path, dtype=dtype, count=stop - start, offset=start * dtype.itemsize)


class _Presence:
    """Which ids occur: a boolean table up to the largest id, grown by doubling."""

    def __init__(self, universe: np.ndarray | None = None):
        self.table = np.zeros(0, dtype=bool)
        self.fixed = universe is not None
        if universe is not None:
            self.mark(universe)

    def mark(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        high = int(ids.max())
        if high >= len(self.table):
            grown = np.zeros(max(high + 1, 2 * len(self.table)), dtype=bool)
            grown[:len(self.table)] = self.table
            self.table = grown
        self.table[ids] = True

    def first_unknown(self, ids: np.ndarray) -> int | None:
        """The first id not in the universe (None: all known)."""
        if not len(self.table):
            return int(ids[0]) if len(ids) else None
        outside = ids >= len(self.table)
        unknown = outside | ~self.table[np.where(outside, 0, ids)]
        return int(ids[np.argmax(unknown)]) if unknown.any() else None

    def codes(self) -> tuple[np.ndarray, np.ndarray]:
        """(original ids in increasing order, the dense code of every id up to the largest)."""
        node_ids = np.flatnonzero(self.table)
        codes = np.cumsum(self.table, dtype=id_dtype(len(node_ids)))
        codes -= 1
        return node_ids, codes


@dataclass
class _Pass1:
    """What pass 1 keeps besides the spilled columns."""

    rows: int = 0
    low: Any = None
    high: Any = None
    last_t: Any = None
    whole_times: bool = True  # every time a whole number below 2**53 (stored as int64, as normalise_time does)
    float_times: bool = False
    roll_backward: str | None = None  # the first ext_roll step back, described
    roll_outside: bool = False
    last_roll: int | None = None
    roll_counts: list[int] = field(default_factory=lambda: [0, 0, 0])  # events in train, val, test
    unknown: dict[str, int] = field(default_factory=dict)  # first id outside the universe, per column


def prepare_stream_store(source: StreamSource, out: Path, *, overwrite: bool, force: bool,
                         provenance_of: Callable[[Events, int], dict[str, Any]],
                         report: Callable[[Events], None]) -> Path:
    """Parse ``source`` and write its stream store to ``out`` in bounded memory (module docstring).

    Raises NotTimeSorted (nothing written) when the times step back. ``provenance_of(events, rows)`` gives
    the provenance, ``report(events)`` prints the notes the in-memory path prints."""
    spill_folder = scratch_dir(Path(out).parent, f".{Path(out).name}.spill")
    try:
        spills = {role: _Spill(spill_folder / role, np.dtype(dtype) if dtype else None)
                  for role, dtype in SPILLED.items() if role in source.roles}
        presences = ({"src": _Presence(), "dst": _Presence()} if source.bipartite
                     else {"ids": _Presence(source.nodes)})
        stats = _Pass1()
        for table in source.blocks:
            _take_block(table, source, spills, presences, stats)
        for spill in spills.values():
            spill.close()
        events = source.finish(source.blocks.rows)
        events.rows_dropped = source.blocks.rows_dropped
        _check_whole_file(events, stats, force)
        node_ids, num_nodes, relabel, bipartite = _relabelling(presences, events.source_file, stats)
        if not force:
            check_vertex_count(events.source_file, num_nodes, stats.rows)
        report(events)
        provenance = provenance_of(events, stats.rows)
        return _write(out, events, spills, stats, node_ids, num_nodes, relabel, bipartite, provenance, overwrite)
    finally:
        shutil.rmtree(spill_folder, ignore_errors=True)


def _take_block(table: pa.Table, source: StreamSource, spills: dict[str, _Spill],
                presences: dict[str, _Presence], stats: _Pass1) -> None:
    columns = {role: column_numpy(table, name) for role, name in source.roles.items()}
    t = columns["t"]
    if not len(t):
        return
    if (stats.last_t is not None and t[0] < stats.last_t) or bool((t[1:] < t[:-1]).any()):
        raise NotTimeSorted
    low, high = t[0], t[-1]
    stats.low = low if stats.low is None else stats.low
    stats.high, stats.last_t = high, high
    if t.dtype.kind == "f":
        stats.float_times = True
        stats.whole_times = stats.whole_times and bool(-MAX_EXACT_FLOAT < low and high < MAX_EXACT_FLOAT
                                                       and np.array_equal(t.astype(np.int64), t))
    for role in ("src", "dst"):
        presence = presences.get(role) or presences["ids"]
        if presence.fixed:
            unknown = presence.first_unknown(columns[role])
            if unknown is not None:
                stats.unknown.setdefault(role, unknown)
        else:
            presence.mark(columns[role])
    if "ext_roll" in columns:
        _track_roll(columns["ext_roll"].astype(np.int8), stats)
    for role, spill in spills.items():
        spill.append(columns[role])
    stats.rows += len(t)


def _track_roll(roll: np.ndarray, stats: _Pass1) -> None:
    """What chronological_split checks, block by block: no step back, values 0..2, events per roll."""
    joined = roll if stats.last_roll is None else np.concatenate([[stats.last_roll], roll]).astype(np.int8)
    back = np.flatnonzero(joined[1:] < joined[:-1])
    if len(back) and stats.roll_backward is None:
        row = int(back[0]) + 1
        event = stats.rows + row - (0 if stats.last_roll is None else 1)
        stats.roll_backward = f"ext_roll goes back from {joined[row - 1]} to {joined[row]} at event {event} " \
                              f"in time order: not a chronological split"
    stats.roll_outside = stats.roll_outside or bool((roll < 0).any() or (roll > 2).any())
    for value in TGL_ROLLS.values():
        stats.roll_counts[value] += int(np.count_nonzero(roll == value))
    stats.last_roll = int(roll[-1])


def _check_whole_file(events: Events, stats: _Pass1, force: bool) -> None:
    """The in-memory path's checks, in its order: guards on times, no events, vertices outside the
    universe; the split's (``chronological_split``) come at writing."""
    if stats.rows and not force:
        check_time_range(events.source_file, stats.low.item(), stats.high.item(), stats.rows, events.time_unit)
    if stats.rows == 0:
        raise InputError(events.source_file, "no events (the file has no data rows)")
    for role in ("src", "dst"):
        if role in stats.unknown:
            raise InputError(events.source_file, f"vertex id {stats.unknown[role]} is not in the known vertex set "
                                                 f"(the accounts/nodes file)")


def _relabelling(presences: dict[str, _Presence], path: Path, stats: _Pass1
                 ) -> tuple[np.ndarray, int, Callable[[str, np.ndarray], np.ndarray], dict[str, int] | None]:
    """(original ids, N, relabel(role, ids), bipartite counts) from the presence tables."""
    if "ids" in presences:
        node_ids, codes = presences["ids"].codes()
        return node_ids, len(node_ids), lambda role, ids: codes[ids], None
    user_ids, user_codes = presences["src"].codes()
    item_ids, item_codes = presences["dst"].codes()
    node_ids = np.concatenate([user_ids, item_ids])
    dtype = id_dtype(len(node_ids))

    def relabel(role: str, ids: np.ndarray) -> np.ndarray:
        if role == "src":
            return user_codes[ids].astype(dtype)
        return item_codes[ids].astype(dtype) + len(user_ids)  # items after users (JODIE/TGN layout)

    return node_ids, len(node_ids), relabel, {"num_users": int(len(user_ids)), "num_items": int(len(item_ids))}


def _write(out: Path, events: Events, spills: dict[str, _Spill], stats: _Pass1, node_ids: np.ndarray,
           num_nodes: int, relabel: Callable[[str, np.ndarray], np.ndarray], bipartite: dict[str, int] | None,
           provenance: dict[str, Any], overwrite: bool) -> Path:
    if stats.roll_backward is not None:
        raise InputError(events.source_file, stats.roll_backward, field="ext_roll")
    if stats.roll_outside:
        raise InputError(events.source_file, "ext_roll values must be 0 (train), 1 (val) or 2 (test)",
                         field="ext_roll")
    features = events.edge_features
    width = 0 if features is None else int(features.shape[1])
    time_dtype = np.int64 if not stats.float_times or stats.whole_times else np.float64
    provenance = {**provenance, "duplicates": 0}  # counted while writing
    repeats = RepeatCounter(num_nodes)
    with EdgeStreamStoreWriter(out, num_nodes=num_nodes, directed=events.directed, provenance=provenance,
                               time_dtype=time_dtype, edge_feature_dim=width,
                               overwrite=overwrite, bipartite=bipartite) as writer:
        step = STREAM_BLOCK if features is None else max(1, min(STREAM_BLOCK, FEATURE_BLOCK_BYTES // (4 * width)))
        for a, b in _blocks(stats.rows, step):
            src, dst = relabel("src", spills["src"].read(a, b)), relabel("dst", spills["dst"].read(a, b))
            t = spills["t"].read(a, b).astype(time_dtype, copy=False)
            repeats.add(src, dst, t)
            writer.append_events(src, dst, t, edge_features=None if features is None else _float32(features[a:b]))
        if "ext_roll" in spills:
            train, val, _ = stats.roll_counts
            writer.set_split(train, train + val, "tgl-ext_roll")
        writer.attrs["provenance"]["duplicates"] = repeats.repeated
        writer.write_array("node_ids", node_ids)
        node_features = align_to_universe(events.node_features, events.nodes, node_ids)
        if node_features is not None:
            writer.write_array("node_features", np.asarray(node_features, dtype=np.float32))
        return writer.close()


def _blocks(rows: int, step: int) -> Iterator[tuple[int, int]]:
    for a in progress(range(0, rows, step), desc="events", unit="block"):
        yield a, min(a + step, rows)


def _float32(rows: Any) -> np.ndarray:
    if hasattr(rows, "numpy"):  # a torch tensor (TGL .pt features, memory-mapped)
        rows = rows.float().numpy()
    return np.asarray(rows, dtype=np.float32)


def raw_file(blocks: TableBlocks) -> RawFile:
    """The record of the file a source's blocks parsed (valid after the parse)."""
    return RawFile(blocks.path.name, blocks.sha256, blocks.size_bytes)
