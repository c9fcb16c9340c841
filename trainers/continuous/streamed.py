"""A stream read from its store chunk by chunk instead of loaded whole (docs/continuous-training.md,
section "Streams larger than memory").

:class:`ChunkedColumn` stands in for one column array of :class:`~dgbench.trainers.continuous.data.EventStream`:
indexing it (a slice, an integer, an array of event ids) reads only the store chunks that hold those
rows, keeps the last few decoded chunks (a bounded LRU cache) and counts the bytes it decoded. The
planner indexes the events of the batches it plans on the prefetch thread, so the chunks are read
ahead of training. The whole-stream facts training needs (the negative pool, the per-vertex gap
statistics) are computed in one bounded pass here.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from dgbench.store import EdgeStreamStore
from dgbench.tasks.link import distinct_vertices

CACHED_CHUNKS = 4  # decoded chunks kept per column: the batch trained, the ones planned ahead
PASS_EVENTS = 1 << 18  # events per block of a whole-stream pass


@dataclass
class ReadCounter:
    """Bytes decoded from the store and chunk reads, over every column of one stream (thread-safe)."""

    bytes_read: int = 0
    chunk_reads: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_read += nbytes
            self.chunk_reads += 1


class ChunkedColumn:
    """Rows [0, length) of one store array, read chunk by chunk on demand, converted by ``convert``."""

    def __init__(self, store: EdgeStreamStore, name: str, length: int, dtype: np.dtype,
                 convert: Callable[[np.ndarray], np.ndarray], counter: ReadCounter,
                 cached_chunks: int = CACHED_CHUNKS, rows_per_read: int | None = None):
        """``rows_per_read``: rows per cached block (default: the store's chunk rows, so each block is
        one chunk file read once)."""
        array = store.array(name)
        self.store, self.name, self.length, self.dtype = store, name, length, np.dtype(dtype)
        self.row_shape = tuple(array.shape[1:])
        self.chunk_rows = rows_per_read or int(array.chunks[0])
        self.convert, self.counter, self.capacity = convert, counter, max(1, cached_chunks)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.length, *self.row_shape)

    @property
    def ndim(self) -> int:
        return 1 + len(self.row_shape)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: slice | int | np.ndarray) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.length)
            if step != 1:
                return self[np.arange(start, stop, step)]
            return self.rows(start, max(start, stop))
        index = np.asarray(key)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        flat = index.reshape(-1).astype(np.int64)
        flat = np.where(flat < 0, flat + self.length, flat)
        if len(flat) and (flat.min() < 0 or flat.max() >= self.length):
            raise IndexError(f"event index out of range 0..{self.length - 1}")
        out = np.empty((len(flat), *self.row_shape), dtype=self.dtype)
        chunk_of = flat // self.chunk_rows
        for chunk in np.unique(chunk_of):
            hit = chunk_of == chunk
            out[hit] = self._chunk(int(chunk))[flat[hit] - int(chunk) * self.chunk_rows]
        shaped = out.reshape((*index.shape, *self.row_shape))
        return shaped[()] if index.ndim == 0 else shaped  # an integer gives a row (a scalar), as numpy does

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) (0 <= start <= stop <= len), one chunk at a time."""
        if stop - start <= 0:
            return np.empty((0, *self.row_shape), dtype=self.dtype)
        first, last = start // self.chunk_rows, (stop - 1) // self.chunk_rows
        if first == last:
            base = first * self.chunk_rows
            return self._chunk(first)[start - base:stop - base]
        parts = [self._chunk(c) for c in range(first, last + 1)]
        whole = np.concatenate(parts)
        base = first * self.chunk_rows
        return whole[start - base:stop - base]

    def blocks(self, start: int, stop: int, size: int = PASS_EVENTS) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, rows) blocks of at most ``size`` rows covering [start, stop)."""
        for low in range(start, stop, size):
            yield low, self.rows(low, min(stop, low + size))

    def _chunk(self, chunk: int) -> np.ndarray:
        with self._lock:
            cached = self._cache.get(chunk)
            if cached is not None:
                self._cache.move_to_end(chunk)
                return cached
        low = chunk * self.chunk_rows
        high = min(self.length, low + self.chunk_rows)
        raw = self.store.read(self.name, low, high)
        self.counter.add(raw.nbytes)
        values = np.ascontiguousarray(self.convert(raw), dtype=self.dtype)
        with self._lock:
            self._cache[chunk] = values
            self._cache.move_to_end(chunk)
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return values


def streamed_columns(store: EdgeStreamStore, stop: int, counter: ReadCounter, rows_per_read: int | None = None
                     ) -> tuple[ChunkedColumn, ChunkedColumn, ChunkedColumn, ChunkedColumn | None]:
    """src, dst (int64), t (float64, shifted to start at 0) and edge features (float32, None when the
    store has none) of events [0, stop), each read on demand."""
    t0 = float(store.read("t", 0, 1)[0]) if stop else 0.0

    def as_ids(raw: np.ndarray) -> np.ndarray:
        return raw.astype(np.int64)

    def as_time(raw: np.ndarray) -> np.ndarray:
        return raw.astype(np.float64) - t0  # the same float64 subtraction as the in-memory stream

    def as_features(raw: np.ndarray) -> np.ndarray:
        return raw.astype(np.float32)

    def column(name: str, dtype: type, convert: Callable[[np.ndarray], np.ndarray]) -> ChunkedColumn:
        return ChunkedColumn(store, name, stop, np.dtype(dtype), convert, counter, rows_per_read=rows_per_read)

    features = column("edge_features", np.float32, as_features) if store.has("edge_features") else None
    return column("src", np.int64, as_ids), column("dst", np.int64, as_ids), column("t", np.float64, as_time), features


def distinct_destinations(dst: ChunkedColumn, num_nodes: int) -> np.ndarray:
    """``np.unique(dst)`` in one pass of bounded memory (the evaluation sets' pool, over this column's reads)."""
    return distinct_vertices((block for _, block in dst.blocks(0, len(dst))), num_nodes)


def streamed_gap_statistics(src: ChunkedColumn, dst: ChunkedColumn, t: ChunkedColumn, num_nodes: int,
                            block_events: int = PASS_EVENTS) -> tuple[float, float]:
    """:meth:`TemporalSampler.gap_statistics` in one pass: the mean and standard deviation of the time
    between consecutive events of one vertex (both endpoints), each block's mean and squared deviations
    merged by Chan et al.'s pairwise update (equal to numpy's two-pass figures up to rounding)."""
    last = np.full(num_nodes, np.nan)
    count, mean, m2 = 0, 0.0, 0.0
    for low, s in src.blocks(0, len(src), block_events):
        d, times = dst.rows(low, low + len(s)), t.rows(low, low + len(s))
        owner = np.stack([s, d], axis=1).ravel()  # both endpoints of each event, in time order
        stamp = np.repeat(times, 2)
        order = np.argsort(owner, kind="stable")  # by vertex, each vertex's entries still in time order
        owner, stamp = owner[order], stamp[order]
        first = np.ones(len(owner), dtype=bool)
        first[1:] = owner[1:] != owner[:-1]
        previous = np.empty(len(owner))
        previous[1:] = stamp[:-1]
        previous[first] = last[owner[first]]
        gaps = (stamp - previous)[~np.isnan(previous)]
        is_last = np.r_[first[1:], True]
        last[owner[is_last]] = stamp[is_last]
        if len(gaps):
            block_mean = float(gaps.mean())
            block_m2 = float(((gaps - block_mean) ** 2).sum())
            total = count + len(gaps)
            delta = block_mean - mean
            mean += delta * len(gaps) / total
            m2 += block_m2 + delta * delta * count * len(gaps) / total
            count = total
    if count == 0:
        return 0.0, 1.0
    std = float(np.sqrt(m2 / count))
    return mean, std if std > 0 else 1.0
