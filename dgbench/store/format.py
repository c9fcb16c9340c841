"""The store format's constants, vertex id types and content fingerprints (docs/store-format.md)."""
from __future__ import annotations

import hashlib
import json
import stat
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


FILE_CHECKSUM_CHARS = 16  # the 64-bit wsum64 checksum in hex
WSUM64_BLOCK = 4096  # words per block: the block's weights (32 KiB) stay in the L1 cache
WSUM64_PIECE_UNIT = 8 * WSUM64_BLOCK  # bytes: pieces fed to Wsum64 hold whole blocks
WSUM64_LENGTH_FACTOR = 0x9E3779B97F4A7C15
_WSUM64_WEIGHTS = np.zeros(0, dtype=np.uint64)


def _wsum64_weights(count: int) -> np.ndarray:
    """K_0..K_{count-1}: K_i = splitmix64(i) | 1 (odd, so a change confined to one word always changes the sum)."""
    global _WSUM64_WEIGHTS
    if len(_WSUM64_WEIGHTS) < count:
        with np.errstate(over="ignore"):
            z = np.arange(max(count, 2 * WSUM64_BLOCK), dtype=np.uint64) * np.uint64(WSUM64_LENGTH_FACTOR) \
                + np.uint64(WSUM64_LENGTH_FACTOR)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            _WSUM64_WEIGHTS = (z ^ (z >> np.uint64(31))) | np.uint64(1)
    return _WSUM64_WEIGHTS[:count]


def file_checksum(data: Any) -> str:
    """The check recorded for one store file and verified on every read (docs/store-format.md, "Codec and
    checksum"), wsum64: the n bytes read as little-endian 64-bit words (the last one zero-padded), word
    p = j*B + i (B = WSUM64_BLOCK) weighted by K_i * K_{B+j}, K_m = splitmix64(m) | 1; the checksum is
    (n * 0x9E3779B97F4A7C15 + sum_p w_p * K_i * K_{B+j}) mod 2^64 as 16 hex digits. Every weight is odd, so
    any change confined to one word changes it; one multiply-add per 8 bytes (numpy's integer dot, block
    by block), several times cheaper than sha256 or crc32 here."""
    checksum = Wsum64()
    checksum.update(data)
    return checksum.hexdigest()


class Wsum64:
    """``file_checksum`` fed piece by piece (e.g. each piece while it is still in cache after reading it):
    every piece but the last must hold whole blocks (a multiple of WSUM64_PIECE_UNIT bytes)."""

    def __init__(self) -> None:
        self.total, self.blocks, self.length, self.ended = np.uint64(0), 0, 0, False

    def update(self, data: Any) -> None:
        raw = np.frombuffer(data, dtype=np.uint8)
        if self.ended:
            raise ValueError("wsum64: a piece after one that did not hold whole blocks")
        self.ended = len(raw) % WSUM64_PIECE_UNIT != 0
        whole = len(raw) // 8
        words = raw[:whole * 8].view("<u8")
        if len(raw) % 8:
            tail = np.zeros(8, dtype=np.uint8)
            tail[:len(raw) % 8] = raw[whole * 8:]
            words = np.concatenate([words, tail.view("<u8")])
        blocks, rest = divmod(len(words), WSUM64_BLOCK)
        weights = _wsum64_weights(WSUM64_BLOCK + self.blocks + blocks + 1)
        inner, outer = weights[:WSUM64_BLOCK], weights[WSUM64_BLOCK + self.blocks:]
        with np.errstate(over="ignore"):
            if blocks:
                sums = words[:blocks * WSUM64_BLOCK].reshape(blocks, WSUM64_BLOCK) @ inner
                self.total += np.dot(sums, outer[:blocks])
            if rest:
                self.total += np.dot(words[blocks * WSUM64_BLOCK:], inner[:rest]) * outer[blocks]
        self.blocks += blocks + (1 if rest else 0)
        self.length += len(raw)

    def hexdigest(self) -> str:
        with np.errstate(over="ignore"):
            total = self.total + np.uint64(self.length) * np.uint64(WSUM64_LENGTH_FACTOR)
        return f"{int(total):016x}"


def store_files(root: Path) -> dict[str, Path]:
    """Every entry of a store directory that is not a folder (files, and links, FIFOs or devices planted
    in it) but its root ``zarr.json``, by key (path relative to the root)."""
    return {f.relative_to(root).as_posix(): f for f in sorted(root.rglob("*")) if not stat.S_ISDIR(f.lstat().st_mode)
            and f.relative_to(root).as_posix() != "zarr.json"}
