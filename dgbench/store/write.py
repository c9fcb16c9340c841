"""Streaming writers of the two store kinds: columns appended in blocks, hashed while written, built in a
hidden directory and renamed into place when complete (docs/store-format.md, "Writing")."""
from __future__ import annotations

import hashlib
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from numcodecs import Blosc
from zarr.codecs import BloscCodec, BloscShuffle
from zarr.storage import LocalStore

from dgbench.errors import StoreError
from dgbench.files import scratch_dir
from dgbench.store.format import (CHECKSUM_ALGORITHM, SCHEMA_NAMES, SCHEMA_VERSION, SNAPSHOTS, STREAM,
                                  array_digest_update, combine_fingerprint, file_checksum, file_digest,
                                  fingerprint_header, id_dtype, store_files)
from dgbench.store import replace


# 256K elements per chunk: measured best of 64K/256K/1M for one-snapshot reads and full reads
# of a 10M-edge store (see benchmarks/test_store_bench.py and docs/store-format.md).
CHUNK_ELEMENTS = 1 << 18


COMPRESSOR = BloscCodec(cname="lz4", clevel=5, shuffle=BloscShuffle.shuffle)


# An array is compressed with COMPRESSOR only when its first chunk shrinks at least this much; below it the
# chunks are stored raw, read straight into place with no decoding (measured: docs/store-format.md, "Codec
# and checksum"). None: always compress (what stores written before it did).
COMPRESS_AT_RATIO: float | None = 4.0


class _ColumnWriter:
    """Appends rows to one Zarr array, writing only whole chunks until closed; hashes as it goes. The array is
    created when its first rows arrive: whether it is compressed depends on how well they compress."""

    def __init__(self, group: zarr.Group, name: str, dtype: np.dtype, row_shape: tuple[int, ...] = ()):
        self.group, self.name, self.dtype, self.row_shape = group, name, np.dtype(dtype), tuple(row_shape)
        row_elems = int(np.prod(row_shape)) if row_shape else 1
        self.chunk_rows = max(1, CHUNK_ELEMENTS // row_elems)
        self._array: zarr.Array | None = None
        self.hasher = hashlib.sha256()
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.rows = 0
        self.chunk_directory: Path | None = None
        self.encoder: Callable[[np.ndarray], bytes] | None = None

    @property
    def array(self) -> zarr.Array:
        if self._array is None:
            self._create(np.empty((0, *self.row_shape), dtype=self.dtype))
        assert self._array is not None
        return self._array

    def _create(self, sample: np.ndarray) -> None:
        """Create the array, compressed or raw as ``sample`` (the first rows) compresses (COMPRESS_AT_RATIO)."""
        compressor = COMPRESSOR if _worth_compressing(sample[:self.chunk_rows]) else None
        self._array = self.group.create_array(self.name, shape=(0, *self.row_shape), dtype=self.dtype,
                                              chunks=(self.chunk_rows, *self.row_shape), fill_value=0,
                                              compressors=None if compressor is None else [compressor])
        self.chunk_directory = _local_chunk_directory(self._array)
        if self.chunk_directory and not self.row_shape:
            self.encoder = _chunk_encoder(self.dtype, compressor)

    def append(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=self.dtype)
        if values.shape[1:] != self.row_shape:
            raise ValueError(f"{self.name}: rows of shape {values.shape[1:]}, expected {self.row_shape}")
        if len(values) == 0:
            return
        array_digest_update(self.hasher, values)
        self.pending.append(values)
        self.pending_rows += len(values)
        if self.pending_rows >= 4 * self.chunk_rows:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self.pending:
            return
        block = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        if self._array is None:
            self._create(block)
        take = len(block) if final else (len(block) // self.chunk_rows) * self.chunk_rows
        start = self.rows
        whole = (take // self.chunk_rows) * self.chunk_rows if self.encoder is not None else 0
        if whole:
            self._store_whole_chunks(start, block[:whole])
        if take > whole:
            if start + take > self.array.shape[0]:  # grow geometrically (each resize rewrites the metadata)
                self.array.resize((max(start + take, 2 * self.array.shape[0]), *self.row_shape))
            self.array[start + whole:start + take] = block[whole:take]
        self.rows += take
        rest = block[take:]
        self.pending = [rest] if len(rest) else []
        self.pending_rows = len(rest)

    def _store_whole_chunks(self, start: int, block: np.ndarray) -> None:
        """Encode and store whole chunks as zarr would (same codec, key and bytes; all-zero chunks are
        not stored, zarr's write_empty_chunks=False) without its per-chunk overhead, the write path's
        main cost. ``start`` is chunk-aligned: only the final flush writes a partial chunk."""
        assert self.encoder is not None and self.chunk_directory is not None
        for offset in range(0, len(block), self.chunk_rows):
            chunk = block[offset:offset + self.chunk_rows]
            if not chunk.view(np.uint8).any():
                continue
            key = self.array.metadata.encode_chunk_key(((start + offset) // self.chunk_rows,))
            target = self.chunk_directory / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.encoder(np.ascontiguousarray(chunk)))

    def close(self) -> dict[str, Any]:
        self._flush(final=True)
        if self.array.shape[0] != self.rows:  # trim the spare capacity: the shape is exactly the rows written
            self.array.resize((self.rows, *self.row_shape))
        return {"dtype": self.dtype.str.replace(">", "<"), "shape": [self.rows, *self.row_shape],
                "sha256": self.hasher.hexdigest()}


def _local_chunk_directory(array: zarr.Array) -> Path | None:
    """Where a local store keeps the array's chunk files; None for other stores or big-endian hosts."""
    store = array.store_path.store
    if not isinstance(store, LocalStore) or sys.byteorder != "little":
        return None
    return Path(store.root) / array.store_path.path


def _chunk_encoder(dtype: np.dtype, compressor: BloscCodec | None) -> Callable[[np.ndarray], bytes] | None:
    """What zarr would store for one whole chunk: its raw bytes, or numcodecs' Blosc configured as zarr
    configures ``compressor`` for this dtype (typesize = item size); None: leave it to zarr."""
    if dtype.byteorder == ">" or dtype.kind not in "iuf":
        return None
    if compressor is None:
        return lambda chunk: chunk.tobytes()
    return _blosc(compressor, dtype.itemsize).encode


def _blosc(compressor: BloscCodec, typesize: int) -> Blosc:
    shuffles = {BloscShuffle.noshuffle: Blosc.NOSHUFFLE, BloscShuffle.shuffle: Blosc.SHUFFLE,
                BloscShuffle.bitshuffle: Blosc.BITSHUFFLE}
    return Blosc.from_config({"cname": compressor.cname.value, "clevel": compressor.clevel,
                              "shuffle": shuffles[compressor.shuffle], "blocksize": compressor.blocksize,
                              "typesize": typesize})


def _worth_compressing(sample: np.ndarray) -> bool:
    """Whether COMPRESSOR shrinks ``sample`` (one chunk's rows) by COMPRESS_AT_RATIO or more."""
    if COMPRESSOR is None or COMPRESS_AT_RATIO is None:
        return COMPRESSOR is not None
    if not sample.size or sample.dtype.kind not in "iuf":
        return False
    values = np.ascontiguousarray(sample)
    return values.nbytes >= COMPRESS_AT_RATIO * len(_blosc(COMPRESSOR, values.itemsize).encode(values))


class _StoreWriter:
    """Shared machinery: temporary directory, columns, attributes, atomic rename."""

    kind: str

    def __init__(self, path: str | Path, *, num_nodes: int, directed: bool, provenance: dict[str, Any],
                 overwrite: bool = False, bipartite: dict[str, int] | None = None):
        self.path = Path(path)
        if num_nodes <= 0:
            raise StoreError(f"{self.path}: a store needs at least one vertex (num_nodes={num_nodes})")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace.recover_interrupted_replacement(self.path)
        replace.check_replaceable(self.path, overwrite)
        self.tmp = scratch_dir(self.path.parent, f".{self.path.name}.tmp", create=False)
        self.group = zarr.open_group(str(self.tmp), mode="w")
        self.overwrite = overwrite
        self.attrs: dict[str, Any] = {"schema": SCHEMA_NAMES[self.kind], "schema_version": SCHEMA_VERSION,
                                      "kind": self.kind, "num_nodes": int(num_nodes), "directed": bool(directed),
                                      "bipartite": bipartite, "provenance": provenance}
        self.columns: dict[str, _ColumnWriter] = {}
        self.digests: dict[str, dict] = {}
        self.ids = id_dtype(num_nodes)
        self.closed = False

    def _column(self, name: str, dtype: Any, row_shape: tuple[int, ...] = ()) -> _ColumnWriter:
        if name not in self.columns:
            self.columns[name] = _ColumnWriter(self.group, name, dtype, row_shape)
        return self.columns[name]

    def _check_ids(self, src: np.ndarray, dst: np.ndarray, where: str) -> None:
        """Refuse ids outside 0..N-1 and columns of different lengths, naming the block."""
        if len(src) != len(dst):
            raise StoreError(f"{self.path}: {where}: {len(src)} sources but {len(dst)} destinations")
        n = self.attrs["num_nodes"]
        for name, ids in (("src", src), ("dst", dst)):
            if len(ids) and (ids.min() < 0 or ids.max() >= n):
                bad = ids[(ids < 0) | (ids >= n)][0]
                raise StoreError(f"{self.path}: {where}: {name} vertex id {bad} is outside 0..{n - 1}")

    def write_array(self, name: str, values: np.ndarray) -> None:
        """Write a whole (small, node-sized) array at once, e.g. ``node_ids`` or ``node_features``."""
        values = np.asarray(values)
        column = _ColumnWriter(self.group, name, values.dtype, values.shape[1:])
        column.append(values)
        self.digests[name] = column.close()

    def _finish(self) -> Path:
        for name, column in self.columns.items():
            self.digests[name] = column.close()
        self.attrs["arrays"] = self.digests
        self.attrs["fingerprint"] = combine_fingerprint(self.kind, fingerprint_header(self.kind, self.attrs),
                                                        self.digests)
        files = store_files(self.tmp)
        self.attrs["size_bytes"] = sum(f.stat().st_size for f in files.values())
        digests, checksums = {}, {}
        for key, f in files.items():  # one file in memory at a time
            data = f.read_bytes()
            digests[key], checksums[key] = file_digest(data), file_checksum(data, CHECKSUM_ALGORITHM)
        self.attrs["file_digests"], self.attrs["file_checksums"] = digests, checksums
        self.attrs["file_checksum_algorithm"] = CHECKSUM_ALGORITHM
        self.group.attrs.update(self.attrs)  # written last: a store without it is never valid
        try:
            self._install()
        except BaseException:
            self.abort()
            raise
        self.closed = True
        return self.path

    def _install(self) -> None:
        """Move the finished store to its path in one atomic step (see the module docstring)."""
        replace.install_store(self.tmp, self.path, self.overwrite)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self.closed:
            self.abort()


class SnapshotStoreWriter(_StoreWriter):
    """Writes a snapshot store one snapshot at a time (each sorted by (dst, src), ties by time, weight, label).

    Use as a context manager and call :meth:`close` at the end; an exception aborts cleanly.
    """

    kind = SNAPSHOTS

    def __init__(self, path: str | Path, *, num_nodes: int, directed: bool, cut: dict[str, Any],
                 provenance: dict[str, Any], overwrite: bool = False, bipartite: dict[str, int] | None = None,
                 time_dtype: Any = None):
        super().__init__(path, num_nodes=num_nodes, directed=directed, provenance=provenance,
                         overwrite=overwrite, bipartite=bipartite)
        self.attrs["cut"] = cut
        self.offsets = [0]
        self.time_dtype = None if time_dtype is None else np.dtype(time_dtype)
        self.snapshot_start: list[float] = []
        self.frames: _ColumnWriter | None = None
        self._column("src", self.ids)
        self._column("dst", self.ids)

    def append_snapshot(self, src: np.ndarray, dst: np.ndarray, *, weight: np.ndarray | None = None,
                        time: np.ndarray | None = None, label: np.ndarray | None = None,
                        start: float | None = None, features: np.ndarray | None = None) -> None:
        """Add the next snapshot's edges (any order; sorted here) and optionally its (N, F) frame."""
        src, dst = np.asarray(src), np.asarray(dst)
        n_before = len(self.offsets) - 1
        self._check_ids(src, dst, f"snapshot {n_before}")
        order = _dst_src_order(src, dst, [np.asarray(v) for v in (label, weight, time) if v is not None])
        self.columns["src"].append(src[order])
        self.columns["dst"].append(dst[order])
        self._append_optional({"weight": weight, "time": time, "label": label}, order, n_before)
        if features is not None:
            features = np.asarray(features, dtype=np.float32)
            if self.frames is None:
                self.frames = self._column("node_features", np.float32, (self.attrs["num_nodes"], features.shape[1]))
            self.frames.append(features[None])
        if start is not None:
            self.snapshot_start.append(start)
        self.offsets.append(self.offsets[-1] + len(src))

    def append_snapshots(self, src: np.ndarray, dst: np.ndarray, bounds: np.ndarray, *,
                         weight: np.ndarray | None = None, time: np.ndarray | None = None,
                         label: np.ndarray | None = None, starts: np.ndarray | None = None) -> None:
        """Add many snapshots at once: snapshot k is rows [bounds[k], bounds[k+1]) of the columns.

        Stores exactly what one :meth:`append_snapshot` call per snapshot would; snapshots handed in
        sorted (the usual case) are only checked, vectorised, and the columns are written in big
        blocks, which is much faster than hundreds of small appends.
        """
        src, dst, bounds = np.asarray(src), np.asarray(dst), np.asarray(bounds, dtype=np.int64)
        if len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != len(src) or np.any(np.diff(bounds) < 0):
            raise ValueError(f"bounds must rise from 0 to {len(src)} (the number of rows)")
        n_before = len(self.offsets) - 1
        self._check_ids(src, dst, f"snapshots {n_before}..{n_before + len(bounds) - 2}")
        optional = {"weight": weight, "time": time, "label": label}
        tie_breakers = [np.asarray(v) for v in (label, weight, time) if v is not None]
        order = _snapshots_order(src, dst, bounds, tie_breakers)
        given = {"src": src, "dst": dst, **self._optional_columns(optional, n_before)}

        def append(name: str) -> None:
            self.columns[name].append(given[name] if order is None else given[name][order])

        # one thread per column: gathering, sha256 and Blosc release the GIL, so columns overlap
        with ThreadPoolExecutor(max_workers=len(given)) as pool:
            list(pool.map(append, given))
        if starts is not None:
            self.snapshot_start.extend(np.asarray(starts).tolist())
        self.offsets.extend((self.offsets[-1] + bounds[1:]).tolist())

    def _append_optional(self, optional: dict[str, np.ndarray | None], order: np.ndarray, n_before: int) -> None:
        """Append the weight/time/label columns (rows in ``order``); all snapshots must have the same ones."""
        for name, values in self._optional_columns(optional, n_before).items():
            self.columns[name].append(values[order])

    def _optional_columns(self, optional: dict[str, np.ndarray | None], n_before: int) -> dict[str, np.ndarray]:
        """The given weight/time/label columns, their writers created; all snapshots must have the same ones."""
        dtypes = {"weight": np.float32, "time": self.time_dtype, "label": np.int8}
        given = {}
        for name, values in optional.items():
            if values is None:
                if name in self.columns:
                    raise ValueError(f"snapshot {n_before}: column '{name}' given before but missing now")
                continue
            if name not in self.columns and n_before > 0 and self.offsets[-1] > 0:
                raise ValueError(f"snapshot {n_before}: column '{name}' missing from earlier snapshots")
            given[name] = np.asarray(values)
            self._column(name, dtypes[name] if dtypes[name] is not None else given[name].dtype)
        return given

    def close(self) -> Path:
        num_snapshots = len(self.offsets) - 1
        if num_snapshots == 0:
            raise StoreError(f"{self.path}: no snapshots were written")
        self.attrs["num_snapshots"] = num_snapshots
        self.attrs["num_edges"] = int(self.offsets[-1])
        self.write_array("offsets", np.asarray(self.offsets, dtype=np.int64))
        if self.snapshot_start:
            self.write_array("snapshot_start", np.asarray(self.snapshot_start))
        return self._finish()


def _dst_src_order(src: np.ndarray, dst: np.ndarray, tie_breakers: list[np.ndarray] = ()) -> np.ndarray:
    """Row order sorting edges by (dst, src), repeated pairs by time, weight, label (``tie_breakers``
    in order label, weight, time), so the stored order, hence the fingerprint, depends only on the
    snapshot's multiset of edges. Transforms hand in already sorted snapshots: checking that is
    ~50x cheaper than sorting. Always an index array, so the rows written are copies.
    Ids must be in range (checked by the writer) so that they pack into one int64 key."""
    if np.all(_in_order(src, dst, tie_breakers)):
        return np.arange(len(src))
    if len(src) and max(int(src.max()), int(dst.max())) >= 2**31:
        return np.lexsort((*tie_breakers, src, dst))
    # One packed int64 key sorts ~4x faster than lexsort((src, dst)) (the write path's main cost).
    key = (dst.astype(np.int64) << 32) | src.astype(np.int64)
    order = np.argsort(key)
    if len(tie_breakers):
        sorted_key = key[order]
        tie = sorted_key[1:] == sorted_key[:-1]
        if tie.any():  # re-sort only the rows of repeated pairs, by (pair, time, weight, label)
            in_run = np.zeros(len(key), dtype=bool)
            in_run[1:] |= tie
            in_run[:-1] |= tie
            rows = order[in_run]
            order[in_run] = rows[np.lexsort((*[values[rows] for values in tie_breakers], key[rows]))]
    return order


def _in_order(src: np.ndarray, dst: np.ndarray, tie_breakers: list[np.ndarray] = ()) -> np.ndarray:
    """For each pair of neighbouring rows, whether they already are in the stored order: (dst, src),
    then repeated pairs by time, weight, label (the most significant tie breaker is the last)."""
    same_dst = dst[1:] == dst[:-1]
    in_order = (dst[1:] > dst[:-1]) | (same_dst & (src[1:] > src[:-1]))
    repeated = np.flatnonzero(same_dst & (src[1:] == src[:-1]))
    if len(repeated) and not len(tie_breakers):
        in_order[repeated] = True
    elif len(repeated):  # lexicographic (time, weight, label) comparison of the few repeated pairs
        earlier, undecided = np.zeros(len(repeated), dtype=bool), np.ones(len(repeated), dtype=bool)
        for values in reversed(tie_breakers):
            before, after = values[repeated], values[repeated + 1]
            earlier |= undecided & (before < after)
            undecided &= before == after
        in_order[repeated] = earlier | undecided
    return in_order


def _snapshots_order(src: np.ndarray, dst: np.ndarray, bounds: np.ndarray,
                     tie_breakers: list[np.ndarray]) -> np.ndarray | None:
    """The row order of :func:`_dst_src_order` applied to each snapshot; None when all are sorted."""
    in_order = _in_order(src, dst, tie_breakers)
    in_order[bounds[1:-1][(bounds[1:-1] > 0) & (bounds[1:-1] < len(src))] - 1] = True  # snapshot boundaries
    unsorted = np.unique(np.searchsorted(bounds, np.flatnonzero(~in_order), side="right") - 1)
    if not len(unsorted):
        return None
    order = np.arange(len(src))
    for k in unsorted:
        a, b = int(bounds[k]), int(bounds[k + 1])
        order[a:b] = a + _dst_src_order(src[a:b], dst[a:b], [values[a:b] for values in tie_breakers])
    return order


class EdgeStreamStoreWriter(_StoreWriter):
    """Writes an edge-stream store from time-sorted blocks of events."""

    kind = STREAM

    def __init__(self, path: str | Path, *, num_nodes: int, directed: bool, provenance: dict[str, Any],
                 time_dtype: Any = np.int64, edge_feature_dim: int = 0, overwrite: bool = False,
                 bipartite: dict[str, int] | None = None):
        super().__init__(path, num_nodes=num_nodes, directed=directed, provenance=provenance,
                         overwrite=overwrite, bipartite=bipartite)
        self._column("src", self.ids)
        self._column("dst", self.ids)
        self._column("t", np.dtype(time_dtype))
        if edge_feature_dim:
            self._column("edge_features", np.float32, (edge_feature_dim,))
        self.last_time: Any = None
        self.num_events = 0
        self.split: dict[str, Any] | None = None

    def append_events(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, *,
                      edge_features: np.ndarray | None = None, label: np.ndarray | None = None) -> None:
        t = np.asarray(t)
        if len(t) == 0:
            return
        if np.any(t[1:] < t[:-1]) or (self.last_time is not None and t[0] < self.last_time):
            raise StoreError(f"{self.path}: events must be appended in time order (event {self.num_events})")
        if np.issubdtype(t.dtype, np.floating) and np.isnan(t).any():
            raise StoreError(f"{self.path}: NaN time near event {self.num_events}")
        src, dst = np.asarray(src), np.asarray(dst)
        self._check_ids(src, dst, f"events from {self.num_events}")
        self.columns["src"].append(src)
        self.columns["dst"].append(dst)
        self.columns["t"].append(t)
        if "edge_features" in self.columns:
            if edge_features is None:
                raise ValueError("edge_features declared but not given")
            self.columns["edge_features"].append(edge_features)
        if label is not None:
            self._column("label", np.int8).append(label)
        self.last_time = t[-1]
        self.num_events += len(t)

    def set_split(self, train_end: int, val_end: int, method: str, **details: Any) -> None:
        """Store the chronological split as event indices: train [0, train_end), val, test [val_end, E)."""
        self.split = {"train_end": int(train_end), "val_end": int(val_end), "method": method, **details}

    def close(self, val_fraction: float = 0.15, test_fraction: float = 0.15) -> Path:
        if self.num_events == 0:
            raise StoreError(f"{self.path}: no events were written")
        self.attrs["num_events"] = self.num_events
        self.attrs["num_edges"] = self.num_events
        if self.split is None:
            train_end = int(round(self.num_events * (1 - val_fraction - test_fraction)))
            val_end = int(round(self.num_events * (1 - test_fraction)))
            self.set_split(train_end, val_end, "quantile", fractions=[1 - val_fraction - test_fraction,
                                                                      val_fraction, test_fraction])
        if not 0 <= self.split["train_end"] <= self.split["val_end"] <= self.num_events:
            raise StoreError(f"{self.path}: split {self.split} does not fit {self.num_events} events")
        self.attrs["split"] = self.split
        return self._finish()
