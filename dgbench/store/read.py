"""Opening a store read-only: only regular files inside it, each read bounded by its declared size and checked
against its recorded checksum or digest (docs/store-format.md, "Integrity")."""
from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import LocalStore

from dgbench.errors import StoreError
from dgbench.store.chunks import direct_layout, read_rows
from dgbench.store.format import (EDGE_COLUMNS, LEGACY_CHECKSUM_ALGORITHM, SCHEMA_NAMES, SCHEMA_VERSION, SNAPSHOTS,
                                  STREAM, array_digest_update, checksum_algorithm, checksum_function, file_digest)
from dgbench.store.checks import (_short, attribute_problems, declared_fingerprint_problem, memory_problem,
                                  offsets_problem)


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
    with _open_store_file(root, key, limit) as (fd, size):
        data = _read_to_end(fd, size, limit)
    if len(data) > limit:
        raise StoreError(f"{root}: file '{key}' grew larger than the {limit:,} bytes its array's chunks can hold "
                         f"while read")
    return data


GROWTH_PIECE = 1 << 16  # bytes asked for at a time beyond the size a file had when opened


def _read_to_end(fd: int, size: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``fd`` up to its end: one read of its size when opened (``size``) and one
    that finds the end, unless it grew meanwhile."""
    pieces, got = [], 0
    want = size + 1
    while got <= limit:
        piece = os.read(fd, min(want, limit + 1 - got))
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
        want = GROWTH_PIECE
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def read_store_file_into(root: Path, key: str, out: memoryview) -> None:
    """Store file ``key`` read straight into ``out`` (no intermediate copy, one system call for the whole file
    unless the kernel returns less), under the rules of ``read_store_file``; the file must hold exactly
    ``len(out)`` bytes (a StoreError naming it otherwise)."""
    with _open_store_file(root, key, sys.maxsize) as (fd, size):  # never reads beyond len(out) + 1
        filled = 0
        if size == len(out):
            while filled < len(out):
                got = os.readv(fd, [out[filled:]])
                if not got:
                    break
                filled += got
        if filled != len(out) or os.read(fd, 1):
            raise WrongSizeError(f"{root}: array '{key.split('/')[0]}': file '{key}' is {max(size, filled):,} "
                                 f"bytes, a chunk holds {len(out):,} (damaged, or replaced while read); "
                                 f"run `dgbench validate`")


class WrongSizeError(StoreError):
    """A raw chunk file that does not hold exactly one chunk's bytes."""


@contextmanager
def _open_store_file(root: Path, key: str, limit: int) -> Iterator[tuple[int, int]]:
    """The open file descriptor of ``key`` and its size, once it is known to be a regular file inside the
    store of at most ``limit`` bytes (read with os.read/os.readv: no buffered file object per chunk)."""
    path, where = os.path.join(root, key), f"{root}: file '{key}'"
    if not _folders_inside(str(root), key):
        raise StoreError(f"{where} is not a regular file inside the store (a link out of it); run `dgbench validate`")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(f"{where} is not a regular file (a symbolic link); run `dgbench validate`") from None
        raise
    try:
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):  # what opening it as a file object said: read as absent
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(status.st_mode):
            raise StoreError(f"{where} is not a regular file (a FIFO, device or socket); run `dgbench validate`")
        if status.st_size > limit:
            raise StoreError(f"{where} is {status.st_size:,} bytes, larger than the {limit:,} its array's chunks can "
                             f"hold; run `dgbench validate`")
        yield fd, status.st_size
    finally:
        os.close(fd)


def _folders_inside(root: str, key: str) -> bool:
    """Whether every folder on the way from ``root`` to file ``key`` is a real folder of the store (no link,
    no '..'); the file itself is opened with O_NOFOLLOW. Two lstat calls for a chunk key such as 'src/c/0',
    where resolving both full paths cost one per component of each."""
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return False
    folder = root
    for part in parts[:-1]:
        folder = os.path.join(folder, part)
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                return False
        except FileNotFoundError:
            return True  # the open fails next and says the file is missing
    return True


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

    def fetch_chunk(self, key: str) -> bytes | None:
        """A chunk file's bytes as zarr would get them (None: absent, all fill values), without asyncio."""
        return self._read(key)

    def fetch_chunk_into(self, key: str, out: memoryview) -> bool:
        """Chunk file ``key`` read straight into ``out`` (it must hold exactly that many bytes); False: absent."""
        try:
            read_store_file_into(self.root, key, out)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return False
        return True

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
    """A read-only local store that checks every file it reads against what was recorded when it was written:
    ``file_checksums`` (XXH3-128, or CRC-32 in stores that record it: ``checksum_algorithm``) where the
    store has them, else ``file_digests`` (sha256, stores written before checksums existed).

    A chunk the record does not list was never written (all fill values, zarr's write_empty_chunks=False)
    and reads as such whatever the folder now holds; a listed file that is missing or whose bytes differ
    (flipped, truncated, or from another version of a store replaced while it is read) is a StoreError
    naming it (threat model: docs/store-format.md, "Codec and checksum").
    """

    def __init__(self, root: Path | str, *, read_only: bool = True, digests: dict[str, str] | None = None,
                 checksums: dict[str, str] | None = None, algorithm: str = LEGACY_CHECKSUM_ALGORITHM):
        super().__init__(root)
        self.digests = digests or {}
        self.checksums, self.algorithm = checksums, algorithm
        self.recorded = self.digests if checksums is None else checksums
        self.check: Callable[[Any], str] = file_digest if checksums is None else checksum_function(algorithm)

    def with_read_only(self, read_only: bool = False) -> "_VerifiedLocalStore":
        return type(self)(self.root, digests=self.digests, checksums=self.checksums, algorithm=self.algorithm)

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        if key == "zarr.json":  # the root: its attributes come from read_attrs, read once
            return await super().get(key, prototype, byte_range)
        expected = self.recorded.get(key)
        if expected is None:
            return None
        if byte_range is not None:
            raise StoreError(f"{self.root}: '{key}': partial file reads cannot be verified")
        if not self._is_open:
            await self._open()
        # read and check in a worker thread, as zarr reads: chunks are checked in parallel (the check frees the GIL)
        data = await asyncio.to_thread(self._read_checked, key, expected)
        return (prototype or default_buffer_prototype()).buffer.from_bytes(data)

    def fetch_chunk(self, key: str) -> bytes | None:
        """A chunk file's bytes, checked against its record (None: never written, all fill values)."""
        expected = self.recorded.get(key)
        return None if expected is None else self._read_checked(key, expected)

    def fetch_chunk_into(self, key: str, out: memoryview) -> bool:
        """Chunk file ``key`` read into ``out``, then checked against its record in one pass over ``out``;
        False: never written."""
        expected = self.recorded.get(key)
        if expected is None:
            return False
        with self._missing_is_an_error(key):
            try:
                read_store_file_into(self.root, key, out)
            except WrongSizeError:
                raise self._differs(key) from None  # the size alone shows it is not the file written
        self._compare(key, out, expected)
        return True

    def _read_checked(self, key: str, expected: str) -> bytes:
        with self._missing_is_an_error(key):
            data = read_store_file(self.root, key, self._limit(key))
        self._compare(key, data, expected)
        return data

    def _compare(self, key: str, data: Any, expected: str) -> None:
        if not expected or self.check(data) != expected:
            raise self._differs(key)

    def _differs(self, key: str) -> StoreError:
        return StoreError(f"{self.root}: array '{key.split('/')[0]}': file '{key}' differs from the one written "
                          f"(damaged, or the store was replaced while it was read); run `dgbench validate`")

    @contextmanager
    def _missing_is_an_error(self, key: str) -> Iterator[None]:
        try:
            yield
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise StoreError(f"{self.root}: array '{key.split('/')[0]}': file '{key}' is missing (deleted, or the "
                             f"store was replaced while it was read); run `dgbench validate`") from None


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
        check = self._check_ids if self.verify and name in ("src", "dst") else None
        try:
            values = self._read_values(array, start, stop, check and (lambda ids, row: check(name, ids, row)))
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - a truncated/garbled chunk: say which array, not a codec trace
            rows = "all rows" if start is None and stop is None else f"rows {start}..{stop}"
            raise StoreError(f"{self.path}: array '{name}' {rows} unreadable "
                             f"({type(exc).__name__}: {exc}; run `dgbench validate`)") from exc
        return values

    def _read_values(self, array: zarr.Array, start: int | None, stop: int | None,
                     check: Callable[[np.ndarray, int], None] | None) -> np.ndarray:
        """Rows [start, stop) from the chunk files directly (dgbench.store.chunks) when the array's layout
        allows, else through zarr; ``check(rows, first_row)`` on what was read."""
        fetch = getattr(self.group.store, "fetch_chunk", None)
        first, last, _ = slice(start, stop).indices(array.shape[0]) if array.shape else (0, 0, 1)
        if fetch is None or direct_layout(array) is None:
            values = array[start:stop]
            if check is not None:
                check(values, first)
            return values
        return read_rows(array, first, max(first, last), fetch, check, getattr(self.group.store, "fetch_chunk_into",
                                                                                None))

    def _check_ids(self, name: str, ids: np.ndarray, first_row: int) -> None:
        if not len(ids):
            return
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

    def to_pyg(self) -> list[Any]:
        """One PyG ``Data`` per snapshot (:func:`dgbench.store.pyg.to_pyg_snapshots`; needs torch-geometric)."""
        from dgbench.store.pyg import to_pyg_snapshots
        return to_pyg_snapshots(self)

    def to_pgt(self) -> Any:
        """PGT's ``DynamicGraphTemporalSignal`` of the snapshots (:func:`dgbench.store.pyg.to_pgt_signal`)."""
        from dgbench.store.pyg import to_pgt_signal
        return to_pgt_signal(self)


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

    def to_temporal_data(self, start: int = 0, stop: int | None = None) -> Any:
        """Events [start, stop) as PyG ``TemporalData`` (:func:`dgbench.store.pyg.to_temporal_data`;
        needs torch-geometric)."""
        from dgbench.store.pyg import to_temporal_data
        return to_temporal_data(self, start, stop)


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
    local = _VerifiedLocalStore(path, digests=attrs["file_digests"], checksums=attrs.get("file_checksums"),
                                algorithm=checksum_algorithm(attrs)) if verified else _SafeLocalStore(path)
    group = zarr.open_group(store=local, mode="r", zarr_format=3)
    cls = SnapshotStore if attrs["kind"] == SNAPSHOTS else EdgeStreamStore
    return cls(path=path, group=group, attrs=attrs, verify=verify)
