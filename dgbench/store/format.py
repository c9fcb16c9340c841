"""The store format's constants, vertex id types and content fingerprints (docs/store-format.md)."""
from __future__ import annotations

import hashlib
import json
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xxhash



SCHEMA_VERSION = 1


SNAPSHOTS, STREAM = "snapshots", "stream"


SCHEMA_NAMES = {SNAPSHOTS: "dgbench.snapshots", STREAM: "dgbench.stream"}


# Arrays that describe, not define, the graph: left out of the content fingerprint so that the
# same events parsed from two formats (with different original ids) fingerprint the same.
METADATA_ARRAYS = frozenset({"node_ids"})


EDGE_COLUMNS = {SNAPSHOTS: ("src", "dst", "weight", "time", "label"),
                STREAM: ("src", "dst", "t", "edge_features", "label")}


REQUIRED_ARRAYS = {SNAPSHOTS: ("src", "dst", "offsets"), STREAM: ("src", "dst", "t")}


def id_dtype(num_nodes: int) -> np.dtype:
    """int32 vertex ids while N < 2^31, else int64."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


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


FILE_DIGEST_CHARS = 32  # 128 bits of sha256 per file: enough to tell two versions of a chunk apart


def file_digest(data: Any) -> str:
    """The digest recorded for one store file (sha256 of its bytes, first FILE_DIGEST_CHARS hex digits)."""
    return hashlib.sha256(data).hexdigest()[:FILE_DIGEST_CHARS]


# What a reader checks on every read (docs/store-format.md, "Codec and checksum"): the algorithm is recorded
# per store in its ``file_checksum_algorithm`` attribute; stores written before that attribute existed
# recorded zlib's CRC-32, and stores written before checksums existed are checked with ``file_digests``.
CHECKSUM_ALGORITHM = "xxh3-128"
LEGACY_CHECKSUM_ALGORITHM = "crc32"
_CHECKSUMS: dict[str, Callable[[Any], str]] = {
    "xxh3-128": xxhash.xxh3_128_hexdigest,  # 32 hex digits
    "crc32": lambda data: f"{zlib.crc32(data):08x}",  # 8 hex digits
}
CHECKSUM_CHARS = {"xxh3-128": 32, "crc32": 8}


def checksum_algorithm(attrs: dict[str, Any]) -> str:
    """The per-read check a store's ``file_checksums`` were recorded with (CRC-32 when it names none)."""
    return attrs.get("file_checksum_algorithm", LEGACY_CHECKSUM_ALGORITHM)


def checksum_function(algorithm: str) -> Callable[[Any], str]:
    """The hex checksum of a bytes-like object under ``algorithm`` (a key of CHECKSUM_CHARS)."""
    return _CHECKSUMS[algorithm]


def file_checksum(data: Any, algorithm: str = CHECKSUM_ALGORITHM) -> str:
    """The check recorded for one store file and verified on every read: XXH3-128 of its bytes for stores
    written now, CRC-32 for stores that record it."""
    return _CHECKSUMS[algorithm](data)


def store_files(root: Path) -> dict[str, Path]:
    """Every entry of a store directory that is not a folder (files, and links, FIFOs or devices planted
    in it) but its root ``zarr.json``, by key (path relative to the root)."""
    return {f.relative_to(root).as_posix(): f for f in sorted(root.rglob("*")) if not stat.S_ISDIR(f.lstat().st_mode)
            and f.relative_to(root).as_posix() != "zarr.json"}
