"""The two Zarr store kinds every dgbench part meets: writing (atomic), reading, fingerprinting.

Format: docs/store-format.md (schema version SCHEMA_VERSION). In short:

* snapshot store (``kind = "snapshots"``): T snapshots over N vertices; edges as flat columns
  ``src``, ``dst`` (+ optional ``weight``, ``time``, ``label``) sorted by (snapshot, dst, src),
  ``offsets`` (T+1) delimiting snapshots; optional ``node_features`` (T, N, F) frames,
  ``node_label`` (N) or (T, N), ``snapshot_start`` (T) and ``node_ids`` (N, original ids).
* edge-stream store (``kind = "stream"``): time-sorted events ``src``, ``dst``, ``t``; optional
  ``edge_features`` (E, F), ``label`` (E), ``node_features`` (N, F), ``node_ids`` (N); the
  chronological split is stored in the ``split`` attribute as event indices.

Writers stream: columns are appended in blocks and flushed whole chunks at a time, content hashes
are computed while writing, and the store is built in a hidden temporary directory that is renamed
into place only once complete, so a crash never leaves a store that looks valid. The last step is one
atomic rename that never replaces (a second writer to the same path fails) or, with ``overwrite``, an
atomic exchange with the previous store (``renameat2``), which must itself be a dgbench store: nothing
else is ever replaced, and no moment exists where the path holds no store.

Readers verify what they read: every file's digest is recorded when the store is written
(``file_digests``), and an opened store checks each file it reads against it, so a flipped byte, a
missing chunk or a store replaced while it is being read fails with one line instead of mixing data.
Opening also checks the attributes code uses (types, sizes, names) and recomputes the fingerprint
from them, and checks the offsets / split (docs/store-format.md, "Integrity").
"""
from __future__ import annotations

import asyncio
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from numcodecs import Blosc
from zarr.codecs import BloscCodec, BloscShuffle
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import LocalStore

from dgbench.errors import StoreError
from dgbench.files import remove_stale, scratch_dir, stale_scratch

SCHEMA_VERSION = 1
SNAPSHOTS, STREAM = "snapshots", "stream"
SCHEMA_NAMES = {SNAPSHOTS: "dgbench.snapshots", STREAM: "dgbench.stream"}
# 256K elements per chunk: measured best of 64K/256K/1M for one-snapshot reads and full reads
# of a 10M-edge store (see benchmarks/test_store_bench.py and docs/store-format.md).
CHUNK_ELEMENTS = 1 << 18
COMPRESSOR = BloscCodec(cname="lz4", clevel=5, shuffle=BloscShuffle.shuffle)
# Arrays that describe, not define, the graph: left out of the content fingerprint so that the
# same events parsed from two formats (with different original ids) fingerprint the same.
METADATA_ARRAYS = frozenset({"node_ids"})
EDGE_COLUMNS = {SNAPSHOTS: ("src", "dst", "weight", "time", "label"),
                STREAM: ("src", "dst", "t", "edge_features", "label")}
REQUIRED_ARRAYS = {SNAPSHOTS: ("src", "dst", "offsets"), STREAM: ("src", "dst", "t")}


def id_dtype(num_nodes: int) -> np.dtype:
    """int32 vertex ids while N < 2^31, else int64."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


# --------------------------------------------------------------------------- fingerprinting

def array_digest_update(hasher: "hashlib._Hash", values: np.ndarray) -> None:
    """Feed an array block into a content hash in canonical (little-endian, C-order) bytes."""
    values = np.ascontiguousarray(values)
    if values.dtype.byteorder == ">":
        values = values.astype(values.dtype.newbyteorder("<"))
    hasher.update(memoryview(values).cast("B"))


def combine_fingerprint(kind: str, header: dict[str, Any], array_digests: dict[str, dict]) -> str:
    """The store fingerprint: sha256 over the defining attributes and each array's content hash."""
    content = {"schema": SCHEMA_NAMES[kind], "schema_version": SCHEMA_VERSION, "header": header,
               "arrays": {k: array_digests[k] for k in sorted(array_digests) if k not in METADATA_ARRAYS}}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def fingerprint_header(kind: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """Attributes that define the graph (and so enter the fingerprint); provenance does not."""
    keys = ["num_nodes", "directed", "bipartite"] + (
        ["num_snapshots"] if kind == SNAPSHOTS else ["num_events", "split"])
    return {k: attrs.get(k) for k in keys}


# --------------------------------------------------------------------------- writing

class _ColumnWriter:
    """Appends rows to one Zarr array, writing only whole chunks until closed; hashes as it goes."""

    def __init__(self, group: zarr.Group, name: str, dtype: np.dtype, row_shape: tuple[int, ...] = ()):
        self.name, self.dtype, self.row_shape = name, np.dtype(dtype), tuple(row_shape)
        row_elems = int(np.prod(row_shape)) if row_shape else 1
        self.chunk_rows = max(1, CHUNK_ELEMENTS // row_elems)
        self.array = group.create_array(name, shape=(0, *row_shape), dtype=self.dtype,
                                        chunks=(self.chunk_rows, *row_shape), compressors=[COMPRESSOR],
                                        fill_value=0)
        self.hasher = hashlib.sha256()
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.rows = 0
        self.chunk_directory = _local_chunk_directory(self.array)
        self.encoder = _chunk_encoder(self.dtype) if self.chunk_directory and not row_shape else None

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
        for offset in range(0, len(block), self.chunk_rows):
            chunk = block[offset:offset + self.chunk_rows]
            if not chunk.view(np.uint8).any():
                continue
            key = self.array.metadata.encode_chunk_key(((start + offset) // self.chunk_rows,))
            target = self.chunk_directory / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.encoder.encode(np.ascontiguousarray(chunk)))

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


def _chunk_encoder(dtype: np.dtype) -> Blosc | None:
    """numcodecs' Blosc configured as zarr configures COMPRESSOR for this dtype (typesize = item size)."""
    if dtype.byteorder == ">" or dtype.kind not in "iuf":
        return None
    shuffles = {BloscShuffle.noshuffle: Blosc.NOSHUFFLE, BloscShuffle.shuffle: Blosc.SHUFFLE,
                BloscShuffle.bitshuffle: Blosc.BITSHUFFLE}
    return Blosc.from_config({"cname": COMPRESSOR.cname.value, "clevel": COMPRESSOR.clevel,
                              "shuffle": shuffles[COMPRESSOR.shuffle], "blocksize": COMPRESSOR.blocksize,
                              "typesize": dtype.itemsize})


# --------------------------------------------------------------------------- replacing safely

FILE_DIGEST_CHARS = 32  # 128 bits of sha256 per file: enough to tell two versions of a chunk apart
_AT_FDCWD, _RENAME_NOREPLACE, _RENAME_EXCHANGE = -100, 1, 2


def file_digest(data: Any) -> str:
    """The digest recorded for one store file (sha256 of its bytes, first FILE_DIGEST_CHARS hex digits)."""
    return hashlib.sha256(data).hexdigest()[:FILE_DIGEST_CHARS]


def store_files(root: Path) -> dict[str, Path]:
    """Every entry of a store directory that is not a folder (files, and links, FIFOs or devices planted
    in it) but its root ``zarr.json``, by key (path relative to the root)."""
    return {f.relative_to(root).as_posix(): f for f in sorted(root.rglob("*")) if not stat.S_ISDIR(f.lstat().st_mode)
            and f.relative_to(root).as_posix() != "zarr.json"}


def not_a_store(path: Path) -> str | None:
    """Why ``path`` may not be replaced by a store (None when it is a dgbench store and nothing else).

    Only a dgbench store is ever replaced: anything else at the path (a file, a link, a folder without
    a dgbench zarr.json, or a store folder holding other files) stays, and the writer refuses."""
    if path.is_symlink():
        return "a symbolic link (replace only real store folders)"
    if not path.is_dir():
        return "a file, not a store folder"
    try:
        attrs = json.loads((path / "zarr.json").read_text()).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return "a folder that is not a dgbench store (no readable zarr.json)"
    if not isinstance(attrs, dict) or attrs.get("schema") not in SCHEMA_NAMES.values():
        return "a folder that is not a dgbench store (its zarr.json has no dgbench schema)"
    declared = attrs.get("arrays") if isinstance(attrs.get("arrays"), dict) else {}
    foreign = sorted(entry.name for entry in path.iterdir() if entry.name != "zarr.json" and entry.name not in declared)
    if foreign:
        return f"a store folder that also holds {len(foreign)} other entries ({', '.join(foreign[:3])})"
    return None


def _renameat2(source: Path, target: Path, flags: int) -> bool:
    """Linux renameat2; False where the C library or the file system does not offer it."""
    function = getattr(_LIBC, "renameat2", None) if _LIBC is not None else None
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(source), None, str(target))


def _load_libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        return None


_LIBC = _load_libc()


def rename_no_replace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` in one step that fails (FileExistsError) when ``target`` exists.

    Without renameat2, a plain rename still fails on an existing non-empty folder (every store is one),
    and the existence check only narrows the window for anything else."""
    if _renameat2(source, target, _RENAME_NOREPLACE):
        return
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "exists", str(target))
    try:
        os.rename(source, target)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise FileExistsError(errno.EEXIST, "exists", str(target)) from exc
        raise


def _exchange(source: Path, target: Path) -> bool:
    """Swap two paths atomically (False where unsupported): the target never stops holding a store."""
    return _renameat2(source, target, _RENAME_EXCHANGE)


def _replace_in_two_renames(new: Path, final: Path) -> None:
    """The fallback without renameat2: move the old store aside, then the new one in. A writer killed
    between the two leaves the old store as .<name>.old-pid<pid>-*; the next writer puts it back."""
    old = scratch_dir(final.parent, f".{final.name}.old", create=False)
    os.rename(final, old)
    os.rename(new, final)
    shutil.rmtree(old, ignore_errors=True)


def recover_interrupted_replacement(final: Path) -> Path | None:
    """Put back the previous store a writer killed mid-replacement left aside, when nothing is at the
    path; delete left-aside copies when the path holds a store (the kill came after the new store went
    in). Returns the copy put back, if any."""
    leftovers = stale_scratch(final.parent, f".{final.name}.old")
    restored = None
    if leftovers and not os.path.lexists(final):
        candidates = [p for p in leftovers if not_a_store(p) is None]
        if candidates:
            try:
                rename_no_replace(candidates[-1], final)  # the newest: the store the path held last
                restored = candidates[-1]
                sys.stderr.write(f"note: {final}: put back the previous store that an interrupted replacement "
                                 f"had moved to {restored.name}\n")
            except FileExistsError:
                pass  # another writer put it back first
    if os.path.lexists(final):
        for leftover in leftovers:
            if leftover != restored:
                shutil.rmtree(leftover, ignore_errors=True)
    remove_stale(final.parent, f".{final.name}.tmp")  # a killed writer's unfinished store
    return restored


def check_replaceable(path: Path, overwrite: bool) -> None:
    """Refuse to write where something exists, unless ``overwrite`` and it is a dgbench store."""
    if not os.path.lexists(path):
        return
    reason = not_a_store(path)
    if not overwrite:
        if reason is None:
            raise StoreError(f"{path}: a store already exists (pass --overwrite to replace it)")
        raise StoreError(f"{path}: already exists and is {reason}; choose another --out")
    if reason is not None:
        raise StoreError(f"{path}: is {reason}; --overwrite replaces only a dgbench store")


class _StoreWriter:
    """Shared machinery: temporary directory, columns, attributes, atomic rename."""

    kind: str

    def __init__(self, path: str | Path, *, num_nodes: int, directed: bool, provenance: dict[str, Any],
                 overwrite: bool = False, bipartite: dict[str, int] | None = None):
        self.path = Path(path)
        if num_nodes <= 0:
            raise StoreError(f"{self.path}: a store needs at least one vertex (num_nodes={num_nodes})")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        recover_interrupted_replacement(self.path)
        check_replaceable(self.path, overwrite)
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
        self.attrs["file_digests"] = {key: file_digest(f.read_bytes()) for key, f in files.items()}
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
        try:
            rename_no_replace(self.tmp, self.path)
            return
        except FileExistsError:
            if not self.overwrite:
                raise StoreError(f"{self.path}: another writer created a store here while this one was writing; "
                                 f"it is kept (pass --overwrite to replace it)") from None
        check_replaceable(self.path, overwrite=True)
        if not _exchange(self.tmp, self.path):
            _replace_in_two_renames(self.tmp, self.path)
            return
        replaced = not_a_store(self.tmp)  # self.tmp now holds what was at the path
        if replaced is not None:  # it changed since the check: put it back untouched
            _exchange(self.tmp, self.path)
            raise StoreError(f"{self.path}: became {replaced} while the store was written; it is kept")
        shutil.rmtree(self.tmp, ignore_errors=True)

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


# --------------------------------------------------------------------------- reading

@dataclass
class Snapshot:
    """The edges of one snapshot, sorted by (dst, src); optional columns are None when absent."""

    index: int
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray | None = None
    time: np.ndarray | None = None
    label: np.ndarray | None = None

    @property
    def num_edges(self) -> int:
        return len(self.src)


METADATA_LIMIT = 64 << 20  # bytes: a zarr.json larger than this is refused, never read whole
CHUNK_SLACK = 4096  # bytes beyond a chunk's raw size: Blosc's header and block table


def read_store_file(root: Path, key: str, limit: int) -> bytes:
    """The bytes of store file ``key`` under ``root``, read only when it is a regular file inside the store
    (no link out of it, no FIFO or device) and at most ``limit`` bytes long; otherwise a StoreError naming
    the file. A missing file raises FileNotFoundError."""
    path, where = root / key, f"{root}: file '{key}'"
    if not os.path.realpath(path).startswith(os.path.realpath(root) + os.sep):
        raise StoreError(f"{where} is not a regular file inside the store (a link out of it); run `dgbench validate`")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(f"{where} is not a regular file (a symbolic link); run `dgbench validate`") from None
        raise
    with os.fdopen(fd, "rb") as source:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreError(f"{where} is not a regular file (a FIFO, device or socket); run `dgbench validate`")
        if size > limit:
            raise StoreError(f"{where} is {size:,} bytes, larger than the {limit:,} its array's chunks can hold; "
                             f"run `dgbench validate`")
        data = source.read(limit + 1)
    if len(data) > limit:
        raise StoreError(f"{where} grew larger than the {limit:,} bytes its array's chunks can hold while read")
    return data


def chunk_byte_limit(metadata: bytes) -> int | None:
    """The most bytes one chunk file of the array whose zarr.json is ``metadata`` can hold (None: unknown)."""
    try:
        meta = json.loads(metadata)
        shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
        itemsize = np.dtype(meta["data_type"]).itemsize
        if not all(type(d) is int and d > 0 for d in shape):
            return None
        return int(np.prod(shape, dtype=object)) * itemsize + CHUNK_SLACK
    except (ValueError, KeyError, TypeError):
        return None


class _SafeLocalStore(LocalStore):
    """A read-only local store that reads only regular files inside itself, each bounded by what its
    array's chunks can hold (``read_store_file``): a FIFO, a device or a link planted in a store fails
    with one line instead of hanging or reading without end."""

    def __init__(self, root: Path | str, *, read_only: bool = True):
        super().__init__(root, read_only=True)
        self.limits: dict[str, int] = {}

    def with_read_only(self, read_only: bool = False) -> "_SafeLocalStore":
        return type(self)(self.root)

    def _limit(self, key: str) -> int:
        if key.endswith("zarr.json"):
            return METADATA_LIMIT
        array = key.split("/c/")[0]
        if array not in self.limits:
            try:
                self.limits[array] = chunk_byte_limit(read_store_file(self.root, f"{array}/zarr.json",
                                                                      METADATA_LIMIT)) or 0
            except FileNotFoundError:
                self.limits[array] = 0
        return self.limits[array]

    def _read(self, key: str) -> bytes | None:
        try:
            return read_store_file(self.root, key, self._limit(key))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        if byte_range is not None:
            raise StoreError(f"{self.root}: '{key}': partial file reads are not used by dgbench stores")
        if not self._is_open:
            await self._open()
        data = await asyncio.to_thread(self._read, key)
        return None if data is None else (prototype or default_buffer_prototype()).buffer.from_bytes(data)

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]


def safe_local_store(path: str | Path) -> LocalStore:
    """A read-only zarr store over ``path`` that reads only regular files, bounded (``read_store_file``)."""
    return _SafeLocalStore(path)


class _VerifiedLocalStore(_SafeLocalStore):
    """A read-only local store that checks every file it reads against ``file_digests``.

    A chunk the digests do not list was never written (all fill values, zarr's write_empty_chunks=False)
    and reads as such whatever the folder now holds; a listed file that is missing or whose bytes differ
    (flipped, truncated, or from another version of a store replaced while it is read) is a StoreError.
    Cost: one sha256 over the compressed bytes read (benchmarks/test_store_bench.py).
    """

    def __init__(self, root: Path | str, *, read_only: bool = True, digests: dict[str, str] | None = None):
        super().__init__(root)
        self.digests = digests or {}

    def with_read_only(self, read_only: bool = False) -> "_VerifiedLocalStore":
        return type(self)(self.root, digests=self.digests)

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        if key == "zarr.json":  # the root: its attributes come from read_attrs, read once
            return await super().get(key, prototype, byte_range)
        expected = self.digests.get(key)
        if expected is None:
            return None
        if byte_range is not None:
            raise StoreError(f"{self.root}: '{key}': partial file reads cannot be verified")
        if not self._is_open:
            await self._open()
        # read and hash in a worker thread, as zarr reads: chunks are checked in parallel (sha256 frees the GIL)
        data = await asyncio.to_thread(self._read_checked, key, expected)
        return (prototype or default_buffer_prototype()).buffer.from_bytes(data)

    def _read_checked(self, key: str, expected: str) -> bytes:
        where = f"{self.root}: array '{key.split('/')[0]}': file '{key}'"
        try:
            data = read_store_file(self.root, key, self._limit(key))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise StoreError(f"{where} is missing (deleted, or the store was replaced while it was read); "
                             f"run `dgbench validate`") from None
        if file_digest(data) != expected:
            raise StoreError(f"{where} differs from the one written (damaged, or the store was replaced while "
                             f"it was read); run `dgbench validate`")
        return data



@dataclass
class _OpenStore:
    path: Path
    group: zarr.Group
    attrs: dict[str, Any] = field(default_factory=dict)
    verify: bool = True
    _arrays: dict[str, zarr.Array] = field(default_factory=dict, repr=False)
    _whole_checked: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        """Subclasses load their small index arrays here."""

    @property
    def kind(self) -> str:
        return self.attrs["kind"]

    @property
    def num_nodes(self) -> int:
        return int(self.attrs["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.attrs["num_edges"])

    @property
    def directed(self) -> bool:
        return bool(self.attrs["directed"])

    @property
    def fingerprint(self) -> str:
        return self.attrs["fingerprint"]

    @property
    def provenance(self) -> dict[str, Any]:
        return self.attrs.get("provenance", {})

    def has(self, name: str) -> bool:
        return name in self.attrs.get("arrays", {})

    def array(self, name: str) -> zarr.Array:
        """The named array, opened once (its metadata is read on first use, then cached)."""
        if name not in self._arrays:
            if not self.has(name):
                raise StoreError(f"{self.path}: store has no array '{name}'")
            try:
                array = self.group[name]
            except StoreError:
                raise
            except (KeyError, FileNotFoundError) as exc:
                raise StoreError(f"{self.path}: array '{name}' is declared but missing from the store directory "
                                 f"(run `dgbench validate`)") from exc
            declared = self.attrs["arrays"][name]
            if self.verify and (list(array.shape) != list(declared["shape"])
                                or array.dtype.str.replace(">", "<") != declared["dtype"]):
                raise StoreError(f"{self.path}: array '{name}' is {array.dtype.str} {list(array.shape)} but the store "
                                 f"declares {declared['dtype']} {declared['shape']} (run `dgbench validate`)")
            self._arrays[name] = array
        return self._arrays[name]

    def read(self, name: str, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """Read rows [start, stop) of one array (only the chunks that hold them), verified (see the module)."""
        array = self.array(name)
        if self.verify and "file_digests" not in self.attrs:
            self._check_whole_array(name, array)
        try:
            values = array[start:stop]
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - a truncated/garbled chunk: say which array, not a codec trace
            rows = "all rows" if start is None and stop is None else f"rows {start}..{stop}"
            raise StoreError(f"{self.path}: array '{name}' {rows} unreadable "
                             f"({type(exc).__name__}: {exc}; run `dgbench validate`)") from exc
        if self.verify and name in ("src", "dst") and len(values):
            self._check_ids(name, values, start or 0)
        return values

    def _check_ids(self, name: str, ids: np.ndarray, first_row: int) -> None:
        n = self.num_nodes
        unsigned = ids.view(ids.dtype.str.replace("i", "u")) if ids.dtype.kind == "i" else ids
        if unsigned.max() >= n:  # one pass: a negative id viewed unsigned is above any N
            row = int(np.flatnonzero((ids < 0) | (ids >= n))[0])
            raise StoreError(f"{self.path}: array '{name}': vertex id {int(ids[row])} at row {first_row + row} is "
                             f"outside 0..{n - 1} (the store declares num_nodes={n}); run `dgbench validate`")

    def _check_whole_array(self, name: str, array: zarr.Array) -> None:
        """Stores written before file digests existed: hash the whole array once, on its first read."""
        if name in self._whole_checked:
            return
        hasher = hashlib.sha256()
        step = max(1, (1 << 22) // max(1, int(np.prod(array.shape[1:]))))
        try:
            for first in range(0, array.shape[0], step):
                array_digest_update(hasher, array[first:first + step])
        except Exception as exc:  # noqa: BLE001 - reported as unreadable, like read()
            raise StoreError(f"{self.path}: array '{name}' unreadable ({type(exc).__name__}: {exc}; "
                             f"run `dgbench validate`)") from exc
        if hasher.hexdigest() != self.attrs["arrays"][name]["sha256"]:
            raise StoreError(f"{self.path}: array '{name}': content differs from the hash recorded when it was "
                             f"written; run `dgbench validate`")
        self._whole_checked.add(name)

    def node_ids(self) -> np.ndarray | None:
        return self.read("node_ids") if self.has("node_ids") else None


class SnapshotStore(_OpenStore):
    """A discrete-time store: ``store.snapshot(t)`` reads one snapshot without touching the rest."""

    def __post_init__(self) -> None:
        self.offsets = self.read("offsets")
        if self.verify:
            problem = offsets_problem(self.offsets, self.num_snapshots, self.num_edges)
            if problem:
                raise StoreError(f"{self.path}: {problem}; run `dgbench validate`")

    @property
    def num_snapshots(self) -> int:
        return int(self.attrs["num_snapshots"])

    def edges_per_snapshot(self) -> np.ndarray:
        return np.diff(self.offsets)

    def snapshot(self, t: int) -> Snapshot:
        if not 0 <= t < self.num_snapshots:
            raise IndexError(f"snapshot {t} out of range 0..{self.num_snapshots - 1}")
        a, b = int(self.offsets[t]), int(self.offsets[t + 1])
        cols = {name: self.read(name, a, b) for name in ("weight", "time", "label") if self.has(name)}
        return Snapshot(t, self.read("src", a, b), self.read("dst", a, b), **cols)

    def snapshots(self, start: int = 0, stop: int | None = None) -> Iterator[Snapshot]:
        for t in range(start, self.num_snapshots if stop is None else stop):
            yield self.snapshot(t)

    def frame(self, t: int) -> np.ndarray | None:
        """Vertex features of snapshot t, shape (N, F), or None when the store has none."""
        return self.read("node_features", t, t + 1)[0] if self.has("node_features") else None


class EdgeStreamStore(_OpenStore):
    """A continuous-time store of time-sorted events with a stored chronological split."""

    @property
    def num_events(self) -> int:
        return int(self.attrs["num_events"])

    @property
    def split(self) -> dict[str, Any]:
        return self.attrs["split"]

    def split_ranges(self) -> dict[str, tuple[int, int]]:
        s = self.split
        return {"train": (0, s["train_end"]), "val": (s["train_end"], s["val_end"]),
                "test": (s["val_end"], self.num_events)}

    def events(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        """Columns of events [start, stop): src, dst, t and, when present, edge_features and label."""
        names = [n for n in EDGE_COLUMNS[STREAM] if self.has(n)]
        return {n: self.read(n, start, stop) for n in names}


def read_attrs(path: str | Path) -> dict[str, Any]:
    """The root attributes of a store, or a StoreError saying why it is not one."""
    path = Path(path)
    meta = path / "zarr.json"
    if not path.exists():
        raise StoreError(f"{path}: no such store (the path does not exist)")
    if not path.is_dir():
        raise StoreError(f"{path}: not a dgbench store (a file; a store is a folder)")
    if not meta.is_file():
        raise StoreError(f"{path}: not a dgbench store (no zarr.json)")
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise StoreError(f"{meta}: unreadable store metadata ({_short(str(exc), 200)})") from exc
    if not isinstance(attrs, dict):
        raise StoreError(f"{path}: not a dgbench store (its attributes are not an object)")
    if attrs.get("schema") not in SCHEMA_NAMES.values():
        raise StoreError(f"{path}: not a dgbench store (schema attribute {_short(attrs.get('schema'))})")
    if attrs.get("schema_version") != SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema version {_short(attrs.get('schema_version'))} is not supported "
                         f"(this dgbench reads version {SCHEMA_VERSION})")
    if "fingerprint" not in attrs:
        raise StoreError(f"{path}: incomplete store (no fingerprint: the writer did not finish)")
    if SCHEMA_NAMES.get(attrs.get("kind")) != attrs["schema"]:
        raise StoreError(f"{path}: attribute 'kind' is {_short(attrs.get('kind'))}, which does not match the "
                         f"schema {attrs['schema']!r}")
    return attrs


# --------------------------------------------------------------------------- checking what code uses

HEX64 = re.compile(r"[0-9a-f]{64}")
ARRAY_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a plain folder name: no path can be built from it
FILE_KEY = re.compile(r"[a-z][a-z0-9_]{0,63}(/[A-Za-z0-9_.]{1,64}){1,8}")
NAME_ATTRIBUTES = ("dataset", "generator")  # provenance names that become dataset names in records
MAX_NAME_CHARS = 200
MAX_INTEGER = 2**63 - 1


def _short(value: Any, limit: int = 40) -> str:
    """A value for a one-line message: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _integer(attrs: dict[str, Any], key: str, low: int, problems: list[str]) -> int | None:
    value = attrs.get(key)
    if type(value) is not int or not low <= value <= MAX_INTEGER:
        problems.append(f"attribute '{key}' is {_short(value)}, expected an integer in {low}..2^63-1")
        return None
    return value


def _name_problem(key: str, value: Any) -> str | None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS or value in (".", "..") \
            or any(c in value for c in "/\\") or not value.isprintable():
        return (f"attribute 'provenance.{key}' is {_short(value)}, expected a printable name of at most "
                f"{MAX_NAME_CHARS} characters without '/' or '\\'")
    return None


def attribute_problems(attrs: dict[str, Any]) -> list[str]:
    """Problems with the root attributes code relies on (cheap: no array is read), e.g. a size that is
    not a positive integer, an unsafe array or dataset name, or a fingerprint the attributes do not give."""
    problems: list[str] = []
    kind = attrs["kind"]
    _integer(attrs, "num_nodes", 1, problems)
    edges = _integer(attrs, "num_edges", 0, problems)
    if type(attrs.get("directed")) is not bool:
        problems.append(f"attribute 'directed' is {_short(attrs.get('directed'))}, expected true or false")
    bipartite = attrs.get("bipartite")
    if bipartite is not None and not (isinstance(bipartite, dict)
                                      and all(type(v) is int and v >= 0 for v in bipartite.values())):
        problems.append(f"attribute 'bipartite' is {_short(bipartite)}, expected null or counts of vertices")
    problems += _provenance_problems(attrs.get("provenance", {}))
    problems += _declared_array_problems(kind, attrs.get("arrays"), edges)
    if kind == SNAPSHOTS:
        snapshots = _integer(attrs, "num_snapshots", 1, problems)
        offsets = (attrs.get("arrays") or {}).get("offsets")
        if snapshots is not None and isinstance(offsets, dict) and offsets.get("shape") != [snapshots + 1]:
            problems.append(f"array 'offsets': declared shape {_short(offsets.get('shape'))}, expected "
                            f"[T+1] = [{snapshots + 1}]")
    else:
        events = _integer(attrs, "num_events", 0, problems)
        if events is not None and edges is not None and events != edges:
            problems.append(f"attribute 'num_events' is {events} but 'num_edges' is {edges}")
        problems += _split_problems(attrs.get("split"), events)
    problems += _file_digest_problems(attrs.get("file_digests"))
    problems += _vertex_count_problems(attrs, edges)
    problems += [f"attribute '{where}' is {value}, expected a finite number" for where, value in _non_finite(attrs)]
    fingerprint = attrs.get("fingerprint")
    if not isinstance(fingerprint, str) or not HEX64.fullmatch(fingerprint):
        problems.append(f"attribute 'fingerprint' is {_short(fingerprint)}, expected 64 lowercase hex digits")
    return problems


NODE_ARRAYS = ("node_features", "node_label", "node_ids")
FREE_VERTICES = 1 << 20  # vertices a store may declare beyond its edges' endpoints and node arrays' rows


def _vertex_count_problems(attrs: dict[str, Any], edges: int | None) -> list[str]:
    """num_nodes may not exceed what the arrays can hold: two endpoints per edge, the node arrays' rows,
    or FREE_VERTICES (isolated vertices), whichever is most; code allocates per-vertex arrays from it."""
    nodes, arrays = attrs.get("num_nodes"), attrs.get("arrays")
    if type(nodes) is not int or edges is None or not isinstance(arrays, dict):
        return []
    rows = [d for name in NODE_ARRAYS if isinstance(arrays.get(name), dict)
            for d in arrays[name].get("shape") or [] if type(d) is int]
    bound = max([2 * edges, FREE_VERTICES, *rows])
    if nodes > bound:
        return [f"attribute 'num_nodes' is {nodes:,}, more vertices than the store's arrays can hold "
                f"(at most {bound:,}: two per edge, the node arrays' rows, or {FREE_VERTICES:,})"]
    return []


def _non_finite(value: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """Every NaN or infinite number in an attribute tree, with its dotted path."""
    if isinstance(value, float) and not np.isfinite(value):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite(item, f"{where}[{index}]")


def memory_problem(attrs: dict[str, Any]) -> str | None:
    """A store whose per-vertex arrays (8 bytes a vertex) alone exceed this machine's memory cannot run here."""
    need, have = int(attrs["num_nodes"]) * 8, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        return (f"attribute 'num_nodes' is {attrs['num_nodes']:,}: one 8-byte value per vertex is "
                f"{need / 2**30:,.1f} GiB, more than this machine's {have / 2**30:,.1f} GiB of memory")
    return None


def declared_fingerprint_problem(attrs: dict[str, Any]) -> str | None:
    """The fingerprint recomputed from the attributes (the header and each array's recorded hash) must be
    the stored one: an edited size or a fingerprint copied from another store fails here, unread."""
    kind = attrs["kind"]
    recomputed = combine_fingerprint(kind, fingerprint_header(kind, attrs), attrs["arrays"])
    if recomputed != attrs["fingerprint"]:
        return (f"fingerprint: stored {attrs['fingerprint'][:12]}… but the store's attributes give "
                f"{recomputed[:12]}… (edited after it was written)")
    return None


def _provenance_problems(provenance: Any) -> list[str]:
    if not isinstance(provenance, dict):
        return [f"attribute 'provenance' is {_short(provenance)}, expected an object"]
    problems = [p for key in NAME_ATTRIBUTES if key in provenance and (p := _name_problem(key, provenance[key]))]
    transforms = provenance.get("transforms", [])
    if not isinstance(transforms, list) or not all(isinstance(t, (str, dict)) for t in transforms):
        problems.append(f"attribute 'provenance.transforms' is {_short(transforms)}, expected a list")
    return problems


def _declared_array_problems(kind: str, arrays: Any, edges: int | None) -> list[str]:
    if not isinstance(arrays, dict):
        return [f"attribute 'arrays' is {_short(arrays)}, expected an object"]
    problems = [f"array '{name}': required but not declared" for name in REQUIRED_ARRAYS[kind] if name not in arrays]
    for name, entry in arrays.items():
        if not ARRAY_NAME.fullmatch(name):
            problems.append(f"array name {_short(name)} is not a plain lowercase name")
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) \
                or not HEX64.fullmatch(entry["sha256"]) or not isinstance(entry.get("dtype"), str) \
                or not isinstance(entry.get("shape"), list) or not entry["shape"] \
                or not all(type(d) is int and 0 <= d <= MAX_INTEGER for d in entry["shape"]):
            problems.append(f"array '{name}': declared as {_short(entry)}, expected dtype, shape and sha256")
            continue
        try:
            np.dtype(entry["dtype"])
        except TypeError:
            problems.append(f"array '{name}': dtype {_short(entry['dtype'])} is not a numpy dtype")
        if name in EDGE_COLUMNS[kind] and edges is not None and entry["shape"][0] != edges:
            problems.append(f"array '{name}': declared with {entry['shape'][0]} rows, the store declares {edges} edges")
    return problems


def _split_problems(split: Any, events: int | None) -> list[str]:
    if not isinstance(split, dict) or type(split.get("train_end")) is not int or type(split.get("val_end")) is not int:
        return [f"attribute 'split' is {_short(split)}, expected train_end and val_end event indices"]
    if events is not None and not 0 <= split["train_end"] <= split["val_end"] <= events:
        return [f"attribute 'split': train_end {split['train_end']}, val_end {split['val_end']} do not fit "
                f"{events} events"]
    return []


def _file_digest_problems(digests: Any) -> list[str]:
    if digests is None:
        return []  # written before file digests existed: each array is hashed whole on its first read
    if not isinstance(digests, dict):
        return [f"attribute 'file_digests' is {_short(digests)}, expected an object"]
    for key, digest in digests.items():
        if not FILE_KEY.fullmatch(key) or ".." in key or not isinstance(digest, str) \
                or not re.fullmatch(f"[0-9a-f]{{{FILE_DIGEST_CHARS}}}", digest):
            return [f"attribute 'file_digests': entry {_short(key)}: {_short(digest)} is not a file key and digest"]
    return []


def offsets_problem(offsets: np.ndarray, num_snapshots: int, num_edges: int) -> str | None:
    """Why ``offsets`` cannot delimit ``num_snapshots`` snapshots of ``num_edges`` edges (None when it can)."""
    if offsets.ndim != 1 or len(offsets) != num_snapshots + 1:
        return f"array 'offsets': length {len(offsets)}, expected T+1 = {num_snapshots + 1}"
    if offsets[0] != 0:
        return f"array 'offsets': starts at {offsets[0]}, expected 0"
    drops = np.flatnonzero(np.diff(offsets) < 0)
    if len(drops):
        i = int(drops[0])
        return f"array 'offsets': decreasing at snapshot {i} ({offsets[i]} -> {offsets[i + 1]})"
    if offsets[-1] != num_edges:
        return f"array 'offsets': ends at {offsets[-1]}, the store declares {num_edges} edges"
    return None


def open_store(path: str | Path, kind: str | None = None, *, verify: bool = True,
               fingerprint: str | None = None) -> SnapshotStore | EdgeStreamStore:
    """Open a store read-only; ``kind`` ("snapshots" or "stream") checks it is the expected one, and
    ``fingerprint`` that it is still the store a job started on (a rank opening the path after the
    launcher did: the store may have been replaced in between).

    The attributes are checked and every read verified (module docstring). ``verify=False`` opens
    without any of that: for `dgbench validate`, which reports every problem itself, and for measuring
    what verification costs."""
    path = Path(path)
    attrs = read_attrs(path)
    if kind is not None and attrs["kind"] != kind:
        raise StoreError(f"{path}: is a {attrs['kind']} store, a {kind} store is needed here")
    if fingerprint is not None and attrs["fingerprint"] != fingerprint:
        raise StoreError(f"{path}: fingerprint {str(attrs['fingerprint'])[:12]}…, but the run started on "
                         f"{fingerprint[:12]}… (the store was replaced meanwhile)")
    if verify:
        problems = attribute_problems(attrs) or [p for p in [declared_fingerprint_problem(attrs),
                                                             memory_problem(attrs)] if p]
        if problems:
            raise StoreError(f"{path}: {problems[0]}; run `dgbench validate`")
    verified = verify and "file_digests" in attrs
    local = _VerifiedLocalStore(path, digests=attrs["file_digests"]) if verified else _SafeLocalStore(path)
    group = zarr.open_group(store=local, mode="r", zarr_format=3)
    cls = SnapshotStore if attrs["kind"] == SNAPSHOTS else EdgeStreamStore
    return cls(path=path, group=group, attrs=attrs, verify=verify)
