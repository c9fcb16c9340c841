"""Reading rows of a store array straight from its chunk files (docs/store-format.md, "Reading").

Zarr's own read path costs about a millisecond of Python and asyncio per chunk, more than decoding the
chunk does. Arrays laid out as dgbench writes them (chunked along the first axis only, little-endian
bytes, one Blosc codec or none; integer or float values) are read here instead: each chunk file is read
(bounded and verified by the store, as zarr's reads are), its Blosc frame checked and decoded into its
place in the result (an uncompressed chunk is read straight into it), in the calling thread unless
READ_THREADS says otherwise (reading, checking and Blosc release the GIL, so a pool overlaps them).
Any other layout goes through zarr.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import zarr
from numcodecs import Blosc
from zarr.codecs import BloscCodec, BytesCodec
from zarr.core.chunk_grids import RegularChunkGrid

BLOSC_HEADER = 16
# Chunks are read in the calling thread: on a loaded host a pool of 2 cost 0.19-0.22 CPU-s per full read of a
# 20M-event store against 0.155-0.165 in one thread (two threads faulting and copying into one array contend),
# and the goal is per CPU-second (docs/store-format.md, "One thread"). More threads shorten the wall clock on
# an idle many-core machine.
READ_THREADS = 1
_POOL: ThreadPoolExecutor | None = None

# What fetching one chunk file gives: its bytes, or None for a chunk never written (all fill values).
FetchChunk = Callable[[str], "bytes | None"]
# Reading one chunk file straight into a buffer of exactly its size: False for a chunk never written.
FetchChunkInto = Callable[[str, memoryview], bool]


class ChunkLayoutError(Exception):
    """A chunk file whose Blosc frame does not hold the chunk it should (reported by the caller)."""


def direct_layout(array: zarr.Array) -> tuple[int, Blosc | None] | None:
    """(rows per chunk, Blosc decoder or None for uncompressed chunks) when ``array`` can be read chunk by
    chunk here; None: read it through zarr."""
    meta = array.metadata
    codecs = tuple(getattr(meta, "codecs", ()))
    grid = getattr(meta, "chunk_grid", None)
    if not isinstance(grid, RegularChunkGrid) or len(codecs) not in (1, 2):
        return None
    raw, compressor = codecs[0], codecs[1] if len(codecs) == 2 else None
    dtype = np.dtype(array.dtype)
    if (not isinstance(raw, BytesCodec) or not (compressor is None or isinstance(compressor, BloscCodec))
            or not (raw.endian is None or raw.endian.value == "little" or dtype.itemsize == 1)
            or dtype.kind not in "iuf" or dtype.byteorder == ">" or not array.shape
            or tuple(grid.chunk_shape[1:]) != tuple(array.shape[1:])):
        return None
    return int(grid.chunk_shape[0]), None if compressor is None else Blosc(cname=compressor.cname.value)


def read_rows(array: zarr.Array, start: int, stop: int, fetch: FetchChunk,
              check: Callable[[np.ndarray, int], None] | None = None,
              fetch_into: FetchChunkInto | None = None) -> np.ndarray:
    """Rows [start, stop) of ``array`` (0 <= start <= stop <= len), each chunk fetched by key with ``fetch``
    (an uncompressed chunk read whole: with ``fetch_into``, straight into its place in the result);
    ``check(rows, first_row)`` runs on each chunk's rows as soon as they are decoded (in its thread, while
    they are in cache)."""
    layout = direct_layout(array)
    assert layout is not None, "read_rows needs direct_layout(array)"
    rows, decoder = layout
    row_shape = tuple(array.shape[1:])
    out = np.empty((stop - start, *row_shape), dtype=array.dtype)
    fill = array.metadata.fill_value
    chunk_bytes = rows * int(np.prod(row_shape, dtype=np.int64)) * out.itemsize
    prefix = f"{array.path}/" if array.path else ""
    indices = range(start // rows, (stop - 1) // rows + 1) if stop > start else range(0)

    def one(index: int) -> None:
        _decode_chunk(index)
        if check is not None:
            low = max(start, index * rows)
            check(out[low - start:min(stop, (index + 1) * rows) - start], low)

    def _decode_chunk(index: int) -> None:
        key = f"{prefix}{array.metadata.encode_chunk_key((index,) + (0,) * len(row_shape))}"
        low, high = max(start, index * rows), min(stop, (index + 1) * rows)
        target = out[low - start:high - start]
        if decoder is None and fetch_into is not None and high - low == rows:
            if not fetch_into(key, target.data.cast("B")):
                target[...] = fill
            return
        data = fetch(key)
        if data is None:
            target[...] = fill
            return
        if decoder is None:
            if len(data) != chunk_bytes:
                raise ChunkLayoutError(f"{len(data)} bytes, a chunk holds {chunk_bytes}")
            decoded = np.frombuffer(data, dtype=out.dtype).reshape(rows, *row_shape)
        elif high - low == rows:  # a whole chunk: decoded straight into its place
            _check_frame(data, chunk_bytes)
            decoder.decode(data, out=target)
            return
        else:
            _check_frame(data, chunk_bytes)
            decoded = np.frombuffer(decoder.decode(data), dtype=out.dtype).reshape(rows, *row_shape)
        target[...] = decoded[low - index * rows:high - index * rows]

    if len(indices) <= 1 or READ_THREADS == 1:
        for index in indices:
            one(index)
    else:
        list(_pool().map(one, indices))
    return out


def _check_frame(data: bytes, chunk_bytes: int) -> None:
    """The Blosc header must record this file's length and a whole chunk: Blosc trusts its header, so a
    truncated or foreign frame could otherwise decode garbage, or overrun the chunk's place."""
    if len(data) < BLOSC_HEADER:
        raise ChunkLayoutError(f"{len(data)} bytes, shorter than a Blosc header")
    nbytes, cbytes = struct.unpack_from("<I", data, 4)[0], struct.unpack_from("<I", data, 12)[0]
    if cbytes != len(data):
        raise ChunkLayoutError(f"{len(data)} bytes, its header records {cbytes}")
    if nbytes != chunk_bytes:
        raise ChunkLayoutError(f"decodes to {nbytes} bytes, a chunk holds {chunk_bytes}")


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="dgbench-chunks")
    return _POOL


def _forget_pool() -> None:
    """A forked child (a rank started by fork) has none of the parent's threads: it starts its own pool."""
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)

