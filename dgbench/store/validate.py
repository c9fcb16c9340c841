"""`dgbench validate`: checks a store against its schema and content, naming array and problem.

Every array is read block by block (never whole), so validation runs in bounded memory.
"""
from __future__ import annotations

import hashlib
import stat
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec

from dgbench.errors import StoreError
from dgbench.store.checks import attribute_problems, offsets_problem
from dgbench.store.format import (REQUIRED_ARRAYS, SNAPSHOTS, STREAM, array_digest_update, checksum_algorithm,
                                  combine_fingerprint, file_checksum, file_digest, fingerprint_header, store_files)
from dgbench.store.read import METADATA_LIMIT, chunk_byte_limit, open_store, read_store_file, safe_local_store

BLOCK_ROWS = 1 << 22


def _blocks(array, rows: int):
    for start in range(0, rows, BLOCK_ROWS):
        yield start, array[start:min(rows, start + BLOCK_ROWS)]


def _scan_array(store, name: str, problems: list[str], check) -> dict[str, Any] | None:
    """Read one array block by block, hash it and run ``check(start, block)`` on each block."""
    try:
        array = store.group[name]
    except (KeyError, FileNotFoundError):
        problems.append(f"array '{name}': missing from the store directory")
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to open is reported, not raised
        problems.append(f"array '{name}': metadata unreadable ({type(exc).__name__}: {exc})")
        return None
    damaged = _damaged_chunk_file(Path(store.path) / name, array)
    if damaged is not None:
        problems.append(f"array '{name}': {damaged}")
        return None
    hasher = hashlib.sha256()
    rows = array.shape[0]
    start = 0
    try:
        for start, block in _blocks(array, rows):
            array_digest_update(hasher, block)
            if check is not None:
                check(start, block)
    except _Stop:
        return None
    except Exception as exc:  # noqa: BLE001 - a truncated or garbled chunk surfaces here
        problems.append(f"array '{name}': {_locate_bad_chunk(array, start, rows)} unreadable "
                        f"({type(exc).__name__}: {exc})")
        return None
    return {"dtype": array.dtype.str.replace(">", "<"), "shape": list(array.shape), "sha256": hasher.hexdigest()}


BLOSC_HEADER = 16


def _damaged_chunk_file(array_dir: Path, array) -> str | None:
    """The first chunk file whose length differs from the one its Blosc header records (or, uncompressed,
    from one chunk's bytes), described.

    Checked on the files because Blosc trusts the header: a truncated frame may decode garbage
    instead of failing, so decoding alone does not reliably catch truncation.
    """
    chunk_files = [f for f in (array_dir / "c").rglob("*") if not stat.S_ISDIR(f.lstat().st_mode)]
    for file in chunk_files:  # first: a FIFO would hang a read, a link to /dev/zero never end one
        if not stat.S_ISREG(file.lstat().st_mode):
            return f"chunk {file.relative_to(array_dir).as_posix()} is not a regular file (a link, FIFO or device)"
    codecs = array.metadata.codecs
    blosc = bool(codecs) and isinstance(codecs[-1], BloscCodec)
    if not blosc and len(codecs) != 1:
        return None
    chunk_bytes = int(np.prod(array.chunks)) * array.dtype.itemsize
    for file in sorted(chunk_files, key=lambda f: [int(p) for p in f.relative_to(array_dir / "c").parts]):
        size = file.stat().st_size
        if blosc:
            with open(file, "rb") as handle:
                header = handle.read(BLOSC_HEADER)
            recorded = struct.unpack_from("<I", header, 12)[0] if size >= BLOSC_HEADER else None
            says = f"header records {recorded if recorded is not None else '?'}"
        else:
            recorded, says = chunk_bytes, f"a chunk holds {chunk_bytes}"
        if recorded != size:
            index = int(file.relative_to(array_dir / "c").parts[0])
            lo, step = index * array.chunks[0], array.chunks[0]
            rows = f"rows {lo}..{min(array.shape[0], lo + step) - 1}"
            what = "truncated" if recorded is None or size < recorded else \
                ("longer than its header says" if blosc else "longer than a chunk")
            return f"chunk {file.relative_to(array_dir).as_posix()} ({rows}) {what} ({size} bytes, {says})"
    return None


def _locate_bad_chunk(array, start: int, rows: int) -> str:
    """Name the first chunk of the failed block that cannot be decoded (chunk file and rows)."""
    step = array.chunks[0]
    for lo in range(start - start % step, min(rows, start + BLOCK_ROWS), step):
        try:
            array[lo:min(rows, lo + step)]
        except Exception:  # noqa: BLE001 - this is the chunk we are looking for
            return f"chunk c/{lo // step} (rows {lo}..{min(rows, lo + step) - 1})"
    return f"block at row {start}"


class _Stop(Exception):
    pass


def _unopenable(path: Path, exc: StoreError) -> list[str]:
    """Why a store does not open. Opening reads some arrays (offsets): when one of those is damaged,
    name its chunk as a scan would, instead of the open's generic message."""
    message = str(exc).removeprefix(f"{path}: ")  # the CLI puts the store's path in front
    try:
        group = zarr.open_group(store=safe_local_store(path), mode="r", zarr_format=3)
        names = sorted(name for name, _ in group.arrays())
    except Exception:  # noqa: BLE001 - not even a zarr group: the open's message says why
        return [message]
    opened = SimpleNamespace(path=path, group=group)
    problems: list[str] = []
    for name in names:
        _scan_array(opened, name, problems, check=None)
    return problems or [message]


def validate_store(path: str | Path) -> list[str]:
    """All problems found in the store at ``path`` (empty when valid)."""
    try:
        store = open_store(path, verify=False)  # unverified: every problem is found and reported below
    except StoreError as exc:
        return _unopenable(Path(path), exc)
    attrs = store.attrs
    kind = store.kind
    problems = attribute_problems(attrs)
    if problems:  # the checks below read sizes and names from these attributes
        return problems
    declared: dict[str, dict] = attrs.get("arrays", {})
    for name in REQUIRED_ARRAYS[kind]:
        if name not in declared:
            problems.append(f"array '{name}': required but not declared in the store attributes")
    n = store.num_nodes
    num_edges = int(attrs.get("num_edges", -1))
    offsets = None
    if kind == SNAPSHOTS and "offsets" in declared:
        digest = _scan_array(store, "offsets", problems, None)
        if digest is not None:
            offsets = store.group["offsets"][:]
            problems += _check_offsets(offsets, int(attrs["num_snapshots"]), num_edges)
            if problems:
                offsets = None

    def check_ids(name):
        def check(start, block):
            if len(block) and (block.min() < 0 or block.max() >= n):
                bad = int(np.flatnonzero((block < 0) | (block >= n))[0]) + start
                problems.append(f"array '{name}': vertex id {int(store.group[name][bad])} at row {bad} "
                                f"is outside 0..{n - 1}")
                raise _Stop
        return check

    checks = {"src": check_ids("src"), "dst": check_ids("dst")}
    if kind == STREAM:
        checks["t"] = _check_sorted_times(problems)
    elif offsets is not None and "time" in declared:
        checks["time"] = _check_snapshot_times(problems, offsets)
    digests: dict[str, dict] = {}
    for name, expected in declared.items():
        if name == "offsets":
            digest = _scan_array(store, name, [], None)
        else:
            digest = _scan_array(store, name, problems, checks.get(name))
        if digest is None:
            continue
        digests[name] = digest
        if name in ("src", "dst", "t", "weight", "time", "label") and digest["shape"][0] != num_edges:
            problems.append(f"array '{name}': {digest['shape'][0]} rows, the store declares {num_edges} edges")
        elif digest["sha256"] != expected.get("sha256"):
            problems.append(f"array '{name}': content hash differs from the one recorded when written")
    if kind == SNAPSHOTS and offsets is not None and not problems:
        problems += _check_snapshot_order(store, offsets)
        problems += _time_window_problems(store, offsets)
    if not problems and len(digests) == len(declared):
        recomputed = combine_fingerprint(kind, fingerprint_header(kind, attrs), digests)
        if recomputed != store.fingerprint:
            problems.append(f"fingerprint: stored {store.fingerprint[:12]}… but the content gives {recomputed[:12]}…")
    return problems + file_problems(Path(path), attrs)


def file_problems(path: Path, attrs: dict[str, Any]) -> list[str]:
    """Files that differ from, are missing from, or were added to the store as written (``file_digests``;
    stores written before it existed have none to compare)."""
    recorded: dict[str, str] | None = attrs.get("file_digests")
    checksums: dict[str, str] | None = attrs.get("file_checksums")  # what reads check, when recorded
    if recorded is None:
        return []
    present = store_files(path)
    problems = [f"file '{key}': recorded when written but missing" for key in recorded if key not in present]
    for key, file in present.items():
        if key not in recorded:
            problems.append(f"file '{key}': not part of the store as written")
            continue
        try:
            data = read_store_file(path, key, _file_limit(path, key))
        except StoreError as exc:
            problems.append(str(exc).removeprefix(f"{path}: ").removesuffix("; run `dgbench validate`"))
            continue
        if file_digest(data) != recorded[key]:
            problems.append(f"file '{key}': differs from the digest recorded when written")
        elif checksums is not None and file_checksum(data, checksum_algorithm(attrs)) != checksums.get(key):
            problems.append(f"file '{key}': differs from the checksum recorded when written")
    return problems


def _file_limit(path: Path, key: str) -> int:
    """The most bytes store file ``key`` may hold: a zarr.json's limit, or its array's chunk size."""
    if key.endswith("zarr.json"):
        return METADATA_LIMIT
    try:
        return chunk_byte_limit(read_store_file(path, f"{key.split('/c/')[0]}/zarr.json", METADATA_LIMIT)) or 0
    except (OSError, StoreError):
        return 0


def _check_offsets(offsets: np.ndarray, num_snapshots: int, num_edges: int) -> list[str]:
    problem = offsets_problem(offsets, num_snapshots, num_edges)
    return [problem] if problem else []


def _check_sorted_times(problems: list[str]):
    last = [None]

    def check(start, block):
        if np.issubdtype(block.dtype, np.floating) and np.isnan(block).any():
            problems.append(f"array 't': NaN time at row {start + int(np.flatnonzero(np.isnan(block))[0])}")
            raise _Stop
        prev = np.concatenate([[last[0]], block]) if last[0] is not None else block
        bad = np.flatnonzero(prev[1:] < prev[:-1])
        if len(bad):
            row = start + int(bad[0]) + (0 if last[0] is not None else 1)
            problems.append(f"array 't': times not sorted at row {row}")
            raise _Stop
        if len(block):
            last[0] = block[-1]
    return check


def _check_snapshot_times(problems: list[str], offsets: np.ndarray):
    """Snapshots are cut in time order: every time in snapshot t precedes every time in t+1."""
    state = {"prev_max": None, "snap": 0, "cur_min": None, "cur_max": None}

    def check(start, block):
        rows = np.arange(start, start + len(block))
        snap_of_row = np.searchsorted(offsets, rows, side="right") - 1
        for snap in np.unique(snap_of_row):
            values = block[snap_of_row == snap]
            if state["snap"] != snap:
                if state["cur_max"] is not None:
                    state["prev_max"] = state["cur_max"]
                state.update(snap=snap, cur_min=None, cur_max=None)
            lo, hi = values.min(), values.max()
            state["cur_min"] = lo if state["cur_min"] is None else min(lo, state["cur_min"])
            state["cur_max"] = hi if state["cur_max"] is None else max(hi, state["cur_max"])
            if state["prev_max"] is not None and state["cur_min"] < state["prev_max"]:
                problems.append(f"array 'time': snapshot {snap} holds a time before the end of snapshot {snap - 1}")
                raise _Stop
    return check


def _time_window_problems(store, offsets: np.ndarray) -> list[str]:
    """A time-window cut's origin and window must put the first and last timed edges in their snapshots
    (computed in floats: an origin far before the events must not wrap around an int64)."""
    cut = store.attrs.get("cut") or {}
    if cut.get("method") != "time-window" or not store.has("time") or store.num_edges == 0:
        return []
    unit = "window_seconds" if "window_seconds" in cut else "window_steps"  # steps: AMLSim's simulation steps
    origin, window = cut.get("origin"), cut.get(unit)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in (origin, window)) \
            or window <= 0:
        return [f"attribute 'cut': origin {origin!r} and {unit} {window!r} are not a finite origin and a "
                f"positive window"]
    for row in (0, store.num_edges - 1):
        snapshot = int(np.searchsorted(offsets, row, side="right")) - 1
        time = store.group["time"][row].item()
        if isinstance(time, int) and float(origin).is_integer() and float(window).is_integer():
            index = (time - int(origin)) // int(window)  # exact, as the cut was made for integer times
        else:
            index = (float(time) - float(origin)) / float(window)
        if not snapshot <= index < snapshot + 1:
            return [f"attribute 'cut': origin {origin} with windows of {window} ({unit}) puts the edge at row {row} in "
                    f"window {index:.4g}, but it is stored in snapshot {snapshot}"]
    return []


def _check_snapshot_order(store, offsets: np.ndarray) -> list[str]:
    """Within each snapshot edges must be sorted by (dst, src)."""
    for t in range(len(offsets) - 1):
        a, b = int(offsets[t]), int(offsets[t + 1])
        if b - a < 2:
            continue
        dst, src = store.group["dst"][a:b], store.group["src"][a:b]
        in_order = (dst[1:] > dst[:-1]) | ((dst[1:] == dst[:-1]) & (src[1:] >= src[:-1]))  # no dst*N+src overflow
        if not in_order.all():
            return [f"arrays 'src'/'dst': snapshot {t} is not sorted by (dst, src)"]
    return []
