"""The store format's constants, vertex id types and content fingerprints (docs/store-format.md)."""
from __future__ import annotations

import hashlib
import json
import stat
import zlib
from pathlib import Path
from typing import Any

import numpy as np



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


FILE_CHECKSUM_CHARS = 8  # CRC-32 in hex


def file_checksum(data: Any) -> str:
    """The check recorded for one store file and verified on every read (docs/store-format.md, "Codec and
    checksum"): zlib's CRC-32 of its bytes, 8 hex digits."""
    return f"{zlib.crc32(data):08x}"


class FileChecksum:
    """``file_checksum`` fed piece by piece (each piece while it is still in cache after reading it)."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: Any) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def store_files(root: Path) -> dict[str, Path]:
    """Every entry of a store directory that is not a folder (files, and links, FIFOs or devices planted
    in it) but its root ``zarr.json``, by key (path relative to the root)."""
    return {f.relative_to(root).as_posix(): f for f in sorted(root.rglob("*")) if not stat.S_ISDIR(f.lstat().st_mode)
            and f.relative_to(root).as_posix() != "zarr.json"}
