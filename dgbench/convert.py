"""`dgbench convert`: cut an edge-stream store into a snapshot store (time windows or equal event counts).

Events are streamed from the source in blocks, so memory is bounded by one block plus one
snapshot (a snapshot must be held whole: the writer sorts it by (dst, src)). Time windows follow
snapshot k = floor((t - origin) / window); windows with no event become empty snapshots, so the
snapshot index keeps meaning "k windows after origin". Event timestamps are kept as the `time`
column and labels as `label`; edge features and vertex features are dropped (the snapshot schema
has no per-edge feature column) and the provenance says so.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import click
import numpy as np

import dgbench
from dgbench.errors import DgbenchError
from dgbench.progress import progress
from dgbench.store import STREAM, EdgeStreamStore, SnapshotStoreWriter, open_store

BLOCK_EVENTS = 1 << 20
MIN_SNAPSHOTS = 2  # a snapshot model learns to predict snapshot t+1 from the ones before it
# A guard against a window far smaller than the stream's span (e.g. 1s over ten years).
MAX_SNAPSHOTS = 1_000_000
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_WINDOW = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*$")


def parse_window(text: str | float | int) -> float | int:
    """Seconds in a window given as ``1d``, ``12h``, ``30m``, ``45s``, ``2w`` or a plain number."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = text
    else:
        match = _WINDOW.match(str(text))
        if match is None:
            raise DgbenchError(f"--window: '{text}' is not a duration (use e.g. 1d, 12h, 30m, 45s or seconds)")
        number, unit = match.groups()
        seconds = float(number) * UNIT_SECONDS[unit or "s"]
    if not math.isfinite(seconds) or seconds <= 0:
        raise DgbenchError(f"--window: '{text}' must be a positive duration")
    return int(seconds) if float(seconds).is_integer() else float(seconds)


class _SnapshotAssembler:
    """Collects the events of the snapshot being built and emits snapshots (and empty gaps) in order."""

    def __init__(self, writer: SnapshotStoreWriter, dtypes: dict[str, np.dtype], start_of: Any):
        self.writer, self.dtypes, self.start_of = writer, dtypes, start_of
        self.current = 0
        self.parts: dict[str, list[np.ndarray]] = {name: [] for name in dtypes}
        self.first_time: Any = None

    def add(self, snapshot_ids: np.ndarray, block: dict[str, np.ndarray]) -> None:
        """Add a block of events whose (non-decreasing) snapshot indices are ``snapshot_ids``."""
        bounds = np.flatnonzero(np.diff(snapshot_ids)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(snapshot_ids)]):
            self.advance_to(int(snapshot_ids[lo]))
            if self.first_time is None:
                self.first_time = block["t"][lo]
            for name in self.dtypes:
                self.parts[name].append(block[name][lo:hi])

    def advance_to(self, snapshot: int) -> None:
        """Emit snapshots until ``snapshot`` is the one being built (gaps become empty snapshots)."""
        while self.current < snapshot:
            self.emit()

    def emit(self) -> None:
        cols = {name: (np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtypes[name]))
                for name, parts in self.parts.items()}
        self.writer.append_snapshot(cols["src"], cols["dst"], time=cols["t"], label=cols.get("label"),
                                    start=self.start_of(self.current, self.first_time))
        self.current += 1
        self.parts = {name: [] for name in self.dtypes}
        self.first_time = None


def _window_indices(t: np.ndarray, origin: Any, window: float | int) -> np.ndarray:
    if np.issubdtype(t.dtype, np.integer) and isinstance(window, int) and float(origin).is_integer():
        return (t - int(origin)) // window  # exact for integer timestamps
    return np.floor((t.astype(np.float64) - float(origin)) / window).astype(np.int64)


def stream_to_snapshots(store_path: str | Path, out: str | Path, window: str | float | int | None = None,
                        events_per_snapshot: int | None = None, origin: float | None = None,
                        overwrite: bool = False) -> Path:
    """Cut the stream at ``store_path`` into a snapshot store at ``out``; returns ``out``.

    Exactly one of ``window`` (seconds or a string such as ``1d``) and ``events_per_snapshot``.
    ``origin`` (window cut only) is the start of snapshot 0; default: the first event's time.
    """
    if (window is None) == (events_per_snapshot is None):
        raise DgbenchError("convert: give exactly one of --window and --events-per-snapshot")
    seconds = None if window is None else parse_window(window)
    source = open_store(store_path, kind=STREAM)
    assert isinstance(source, EdgeStreamStore)
    first_t, last_t = source.read("t", 0, 1)[0], source.read("t", source.num_events - 1)[0]
    if seconds is not None:
        chosen, origin = origin, first_t.item() if origin is None else origin
        if not math.isfinite(origin):
            raise DgbenchError(f"convert: --origin {origin} is not a finite time")
        if origin > first_t:
            raise DgbenchError(f"convert: --origin {origin} is after the first event (t = {first_t})")
        if (float(last_t) - float(origin)) / seconds >= MAX_SNAPSHOTS:  # in floats: an int64 would overflow
            where = f"--origin {origin} is" if chosen is not None else "the first event is"
            raise DgbenchError(f"convert: {where} more than {MAX_SNAPSHOTS:,} windows of {seconds} s before the last "
                               f"event (t = {last_t}; snapshot limit {MAX_SNAPSHOTS:,}): use a larger window")
        num_snapshots = int(_window_indices(np.asarray([last_t]), origin, seconds)[0]) + 1
        cut = {"method": "time-window", "window_seconds": seconds, "origin": origin}

        def snapshot_ids(t: np.ndarray, first_row: int) -> np.ndarray:
            return _window_indices(t, origin, seconds)

        def start_of(k: int, first_time: Any) -> float:
            return origin + k * seconds
    else:
        if origin is not None:
            raise DgbenchError("convert: --origin only applies to --window cuts")
        if events_per_snapshot <= 0:
            raise DgbenchError(f"convert: --events-per-snapshot must be positive, got {events_per_snapshot}")
        num_snapshots = -(-source.num_events // events_per_snapshot)
        cut = {"method": "event-count", "events_per_snapshot": int(events_per_snapshot)}

        def snapshot_ids(t: np.ndarray, first_row: int) -> np.ndarray:
            return np.arange(first_row, first_row + len(t), dtype=np.int64) // events_per_snapshot

        def start_of(k: int, first_time: Any) -> float:
            return first_time
    if num_snapshots > MAX_SNAPSHOTS:
        raise DgbenchError(f"convert: this cut makes {num_snapshots:,} snapshots (limit {MAX_SNAPSHOTS:,}); "
                           f"use a larger window or more events per snapshot")
    return _write_snapshots(source, Path(out), cut, snapshot_ids, start_of, num_snapshots, overwrite)


def _write_snapshots(source: EdgeStreamStore, out: Path, cut: dict[str, Any], snapshot_ids, start_of,
                     num_snapshots: int, overwrite: bool) -> Path:
    columns = ["src", "dst", "t"] + (["label"] if source.has("label") else [])
    dropped = [name for name in ("edge_features", "node_features") if source.has(name)]
    provenance = conversion_provenance(source, cut, dropped)
    with SnapshotStoreWriter(out, num_nodes=source.num_nodes, directed=source.directed, cut=cut,
                             provenance=provenance, overwrite=overwrite, bipartite=source.attrs.get("bipartite"),
                             time_dtype=source.array("t").dtype) as writer:
        assembler = _SnapshotAssembler(writer, {name: source.array(name).dtype for name in columns}, start_of)
        for first_row in progress(range(0, source.num_events, BLOCK_EVENTS), desc="convert", unit="block"):
            block = {name: source.read(name, first_row, first_row + BLOCK_EVENTS) for name in columns}
            assembler.add(snapshot_ids(block["t"], first_row), block)
        assembler.advance_to(num_snapshots - 1)
        assembler.emit()
        if source.has("node_ids"):
            writer.write_array("node_ids", source.read("node_ids"))
        return writer.close()


def conversion_provenance(source: EdgeStreamStore, cut: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """Where the snapshots came from: the source store (by fingerprint), its provenance, and the cut."""
    step = {"name": "stream_to_snapshots", "cut": cut, "dropped_arrays": dropped}
    parent = source.provenance
    return {"source": "conversion", "converted_from": {"path": str(source.path.resolve()), "kind": source.kind,
                                                        "fingerprint": source.fingerprint},
            "parent_provenance": parent, "source_split": source.split, "conversion": step,
            "dgbench_version": dgbench.__version__, "transforms": [*parent.get("transforms", []), step]}


@click.command(name="convert")
@click.argument("stream_store", type=click.Path(path_type=Path))
@click.option("--out", "-o", type=click.Path(path_type=Path), required=True, help="Snapshot store to write.")
@click.option("--window", default=None, help="Snapshot length: 1d, 12h, 30m, 45s, 2w or seconds.")
@click.option("--events-per-snapshot", type=int, default=None, help="Cut into snapshots of K events each.")
@click.option("--origin", type=float, default=None,
              help="Start time of snapshot 0 for --window (default: the first event's time).")
@click.option("--overwrite", is_flag=True, help="Replace an existing store.")
def convert_command(stream_store: Path, out: Path, window: str | None, events_per_snapshot: int | None,
                    origin: float | None, overwrite: bool) -> None:
    """Cut STREAM_STORE (an edge stream) into a snapshot store by time window or event count."""
    path = stream_to_snapshots(stream_store, out, window=window, events_per_snapshot=events_per_snapshot,
                               origin=origin, overwrite=overwrite)
    store = open_store(path)
    click.echo(f"wrote {path}  (snapshots, {store.num_snapshots:,} snapshots, {store.num_edges:,} edges, "
               f"fingerprint {store.fingerprint[:16]})")
    if store.num_snapshots < MIN_SNAPSHOTS:
        click.echo(f"warning: {path} has {store.num_snapshots} snapshot; no snapshot model trains on fewer than "
                   f"{MIN_SNAPSHOTS} (each predicts the next one): cut with a smaller --window or "
                   f"--events-per-snapshot", err=True)
