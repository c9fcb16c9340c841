"""The event stream in memory and the per-batch plan every scheme trains on.

A plan is everything about a batch that needs no collective: this rank's events (chosen by the
scheme's event assignment), the negative destinations (drawn from (seed, split, batch) for the whole
batch, so they do not depend on the rank count), the sampled temporal neighbours, the ids whose rows
are needed and their route to the owners. Plans are built by :class:`Prefetcher` on a background
thread while the previous batch trains (Sven's prefetch queue).

Two protocols (``--protocol``, docs/continuous-training.md, section "Protocols"): ``tgl`` queries every
root at its own event time (one root per event endpoint and negative); ``batch`` queries each distinct
root vertex of the rank's share once, at the batch's first event time (PyG / TGN-original).
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.store import EdgeStreamStore
from dgbench.trainers.continuous.ring import RecentRing
from dgbench.trainers.continuous.sampler import SampledNeighbors, TemporalSampler
from dgbench.trainers.continuous.state import FetchRoute, distinct_queries
from dgbench.trainers.continuous.streamed import (ReadCounter, distinct_destinations, streamed_columns,
                                                  streamed_gap_statistics)

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
TGL, BATCH = "tgl", "batch"
PROTOCOLS = (TGL, BATCH)
IN_MEMORY, STREAMED = "memory", "streamed"  # where the stream's columns are (EventStream.source)


@dataclass
class EventStream:
    """All events of a store; times shifted to start at 0 (so -1 can mark 'no mail'). The columns are
    arrays in memory, or (``source == STREAMED``) :class:`~dgbench.trainers.continuous.streamed.ChunkedColumn` s
    read chunk by chunk from the store as batches are planned (``reads`` counts the bytes)."""

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    edge_features: np.ndarray
    num_nodes: int
    ranges: dict[str, tuple[int, int]]
    negative_pool: np.ndarray  # destinations negatives are drawn from (the items when bipartite)
    source: str = IN_MEMORY
    reads: ReadCounter | None = None

    @classmethod
    def from_store(cls, store: EdgeStreamStore, max_events: int | None = None) -> "EventStream":
        """The first ``max_events`` events (all by default), split in the store's proportions."""
        stop = store.num_events if max_events is None else min(max_events, store.num_events)
        columns = store.events(0, stop)
        t = columns["t"].astype(np.float64)
        t = t - (t[0] if len(t) else 0.0)
        features = columns.get("edge_features")
        if features is None:
            features = np.zeros((stop, 0), dtype=np.float32)
        dst = columns["dst"].astype(np.int64)
        return cls(columns["src"].astype(np.int64), dst, t, features.astype(np.float32), store.num_nodes,
                   prefix_ranges(store, stop), np.unique(dst))

    @classmethod
    def streamed(cls, store: EdgeStreamStore, max_events: int | None = None,
                 rows_per_read: int | None = None) -> "EventStream":
        """:meth:`from_store`'s stream with its columns read on demand (one pass over ``dst`` finds the
        negative pool); equal arrays, bounded memory. ``rows_per_read``: see ``ChunkedColumn``."""
        stop = store.num_events if max_events is None else min(max_events, store.num_events)
        reads = ReadCounter()
        src, dst, t, features = streamed_columns(store, stop, reads, rows_per_read)
        edge_features = features if features is not None else np.zeros((stop, 0), dtype=np.float32)
        return cls(src, dst, t, edge_features, store.num_nodes, prefix_ranges(store, stop),  # type: ignore[arg-type]
                   distinct_destinations(dst, store.num_nodes), STREAMED, reads)

    @property
    def edge_dim(self) -> int:
        return int(self.edge_features.shape[1])

    @property
    def num_events(self) -> int:
        return len(self.src)

    @property
    def is_streamed(self) -> bool:
        return self.source == STREAMED


def prefix_ranges(store: EdgeStreamStore, stop: int) -> dict[str, tuple[int, int]]:
    """The store's split of events [0, stop): a prefix keeps the store's split proportions."""
    ranges = store.split_ranges()
    if stop < store.num_events:
        scale = stop / store.num_events
        cut = [round(ranges["val"][0] * scale), round(ranges["test"][0] * scale)]
        ranges = {"train": (0, cut[0]), "val": (cut[0], cut[1]), "test": (cut[1], stop)}
    return ranges


@dataclass
class StreamProblem:
    """What a continuous-time scheme's partition step reads: the stream and the run's protocol (enough
    to pre-sample the training batches exactly as training will: Sven §3.1.2's pre-sampling)."""

    stream: EventStream
    batch_size: int
    seed: int
    neighbors: int = 0
    sampler: str = "recent"
    sampler_decay: float = 0.0  # the sis strategy's time-decay rate (0: uniform weights)
    fetch_neighbors: bool = False  # the model's embedding reads its sampled neighbours
    deliver_to_neighbors: bool = False  # the model mails its endpoints' sampled neighbours (APAN)
    memory_dim: int = 0
    bytes_per_value: int = 4
    protocol: str = TGL  # --protocol: tgl (a root per event at its time) or batch (a root per vertex per batch)


@dataclass
class BatchPlan:
    """One rank's share of a batch; roots are [src, dst, negatives] of this rank's events."""

    split: str
    index: int
    size: int  # events in the whole batch (all ranks)
    positions: np.ndarray  # this rank's events, as positions within the batch
    events: np.ndarray  # their global event ids
    src: np.ndarray
    dst: np.ndarray
    negatives: np.ndarray
    neighbors: SampledNeighbors | None
    needed_ids: np.ndarray  # roots, then the real sampled neighbours when fetched (row-major)
    query_times: np.ndarray  # the time each needed row is updated to (its root's event time)
    route: FetchRoute | None
    event_of_needed: np.ndarray  # index (into ``events``) of the event each needed position belongs to
    deliveries: np.ndarray | None = None  # neighbours mailed by the endpoints (row-major over [src, dst] roots)
    delivery_priority: np.ndarray | None = None  # the sending endpoint's priority 2 position + side
    # an evaluation-set batch (BatchPlanner.candidates): each event's K negative pairs, and whether they
    # keep the event's source (then the roots are [src, dst, K·dst'] instead of [src, dst, K·src', K·dst'])
    candidates: int = 0
    fixed_source: bool = True
    # each root's position among the distinct roots (the first needed positions) and the time each is
    # queried at: under --protocol batch the distinct vertices at the batch's first event time; in a tgl
    # evaluation batch the distinct (vertex, event time) pairs; None otherwise (a root per event endpoint)
    root_index: np.ndarray | None = None
    root_times: np.ndarray | None = None

    @property
    def roots(self) -> np.ndarray:
        return np.concatenate([self.src, self.dst, self.negatives])

    @property
    def query_roots(self) -> int:
        """How many needed positions are roots (the rest are fetched neighbours)."""
        return len(self.roots) if self.root_times is None else len(self.root_times)


@dataclass
class BatchPlanner:
    """Builds :class:`BatchPlan` s for one rank; ``assign(batch_src, rank)`` picks this rank's events."""

    stream: EventStream
    sampler: TemporalSampler | RecentRing | None
    neighbors: int
    strategy: str
    seed: int
    assign: Callable[[np.ndarray], np.ndarray]  # batch sources -> boolean mask of this rank's events
    route: Callable[[np.ndarray], FetchRoute | None]
    fetch_neighbors: bool = True  # sampled neighbours join the needed ids (their views are embedded)
    deliver_to_neighbors: bool = False  # the endpoints' sampled neighbours receive their mails
    # split -> (negative sources, negative destinations), (events of the split, K): an evaluation set's
    # negatives, scored instead of one random destination per event (MISSING slots: -1)
    candidates: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    protocol: str = TGL
    max_batches: int | None = None  # --max-batches: each pass plans at most this many batches
    # evaluation batches (``candidates``) under tgl: one root per distinct (vertex, query time) pair where
    # that keeps every score (:meth:`_roots_shareable`); False: one root per candidate endpoint
    share_roots: bool = True

    def batch_bounds(self, split: str, batch_size: int) -> list[tuple[int, int]]:
        a, b = self.stream.ranges[split]
        if self.max_batches is not None:
            b = min(b, a + self.max_batches * batch_size)
        return [(s, min(s + batch_size, b)) for s in range(a, b, batch_size)]

    def plan(self, split: str, index: int, start: int, stop: int) -> BatchPlan:
        s = self.stream
        size = stop - start
        rng = np.random.default_rng([self.seed, SPLIT_CODES[split], index])
        positions = np.flatnonzero(self.assign(s.src[start:stop]))
        events = start + positions
        src, dst = s.src[events], s.dst[events]
        b = len(events)
        candidates, fixed_source = 0, True
        if split in self.candidates:
            blocks, fixed_source = self._candidate_roots(split, events, src, dst)
            candidates = (len(blocks) - 2) // (1 if fixed_source else 2)
            negatives = np.concatenate(blocks[2:]) if len(blocks) > 2 else np.empty(0, np.int64)
        else:
            negatives = s.negative_pool[rng.integers(0, len(s.negative_pool), size=size)][positions]
            blocks = [src, dst, negatives]
        count = len(blocks)
        roots = np.concatenate([src, dst, negatives])
        if self.protocol == BATCH:
            return self._batch_plan(split, index, start, size, positions, events, src, dst, negatives, roots,
                                    candidates, fixed_source)
        root_t = np.tile(s.t[events], count)
        if split in self.candidates and self._roots_shareable():
            return self._distinct_root_plan(split, index, start, stop, positions, events, src, dst, negatives,
                                            roots, root_t, candidates, fixed_source)
        root_event = np.tile(np.arange(b), count)
        neighbors = None
        if self.sampler is not None and self.neighbors > 0:
            root_positions = np.concatenate([block * size + positions for block in range(count)])
            uniforms = rng.random((count * size, self.neighbors))[root_positions]  # rank-independent draws
            neighbors = self.sampler.sample_window(start, stop, roots, root_t, self.neighbors, self.strategy, uniforms)
        needed, query_times, event_of, deliveries, delivery_priority = self._rows_and_mails(
            roots, root_t, root_event, neighbors, slice(0, 2 * b), positions)
        return BatchPlan(split, index, size, positions, events, src, dst, negatives, neighbors, needed,
                         query_times, self.route(needed), event_of, deliveries, delivery_priority, candidates,
                         fixed_source)

    def _rows_and_mails(self, roots: np.ndarray, root_times: np.ndarray, root_event: np.ndarray,
                        neighbors: SampledNeighbors | None, endpoint: slice | np.ndarray, positions: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(needed vertices, their query times, their events, mail deliveries, their priorities) of a batch
        whose sampled ``roots`` were queried at ``root_times`` for events ``root_event``: the roots, then,
        when the model fetches them, their sampled neighbours at the root's time; when the model delivers
        to neighbours, each event endpoint (roots ``endpoint``: source then destination) mails its root's
        sampled neighbours, row-major over the slots (the order the model builds the mails in)."""
        needed, query_times, event_of = roots, root_times, root_event
        deliveries = delivery_priority = None
        if neighbors is None:
            return needed, query_times, event_of, deliveries, delivery_priority
        mask = neighbors.mask
        if self.fetch_neighbors:
            needed = np.concatenate([roots, neighbors.nodes[mask]])
            query_times = np.concatenate([root_times, np.broadcast_to(root_times[:, None], mask.shape)[mask]])
            event_of = np.concatenate([root_event, np.broadcast_to(root_event[:, None], mask.shape)[mask]])
        if self.deliver_to_neighbors:
            endpoint_priority = np.concatenate([2 * positions, 2 * positions + 1])
            deliveries = neighbors.nodes[endpoint][mask[endpoint]]
            delivery_priority = np.broadcast_to(endpoint_priority[:, None], mask[endpoint].shape)[mask[endpoint]]
        return needed, query_times, event_of, deliveries, delivery_priority

    def _batch_plan(self, split: str, index: int, start: int, size: int, positions: np.ndarray, events: np.ndarray,
                    src: np.ndarray, dst: np.ndarray, negatives: np.ndarray, roots: np.ndarray, candidates: int,
                    fixed_source: bool) -> BatchPlan:
        """``--protocol batch`` (PyG's TGN example): the distinct vertices among this rank's roots, each
        queried once at the batch's first event time ``start`` (so its sampled neighbours are events of
        earlier batches: strictly before that time); neighbour draws are keyed by (seed, split, batch,
        vertex), so they do not depend on how the events are split across ranks."""
        s, b = self.stream, len(events)
        unique, root_index = np.unique(roots, return_inverse=True)
        root_times = np.full(len(unique), s.t[start] if size else 0.0)
        root_event = np.full(len(unique), np.iinfo(np.int64).max)
        np.minimum.at(root_event, root_index, np.tile(np.arange(b), len(roots) // max(b, 1)))
        neighbors = None
        if self.sampler is not None and self.neighbors > 0:
            uniforms = vertex_uniforms((self.seed, SPLIT_CODES[split], index), unique, self.neighbors)
            neighbors = self.sampler.sample_window(start, start + size, unique, root_times, self.neighbors,
                                                   self.strategy, uniforms)
        # each endpoint of each event mails its vertex's sampled neighbours; every query is at the one time
        needed, query_times, event_of, deliveries, delivery_priority = self._rows_and_mails(
            unique, root_times, root_event, neighbors, root_index[:2 * b], positions)
        return BatchPlan(split, index, size, positions, events, src, dst, negatives, neighbors, needed,
                         query_times, self.route(needed), event_of, deliveries, delivery_priority, candidates,
                         fixed_source, root_index, root_times)

    def _roots_shareable(self) -> bool:
        """Whether a root's embedding is a function of its (vertex, query time) alone: its view is, and so is
        its neighbour sample under ``recent`` (the k latest events before the time) or without neighbours;
        ``uniform`` and ``sis`` draw each root's own neighbours (its uniforms), so equal pairs may differ."""
        return self.share_roots and (self.sampler is None or self.neighbors <= 0 or self.strategy == "recent")

    def _distinct_root_plan(self, split: str, index: int, start: int, stop: int, positions: np.ndarray,
                            events: np.ndarray, src: np.ndarray, dst: np.ndarray, negatives: np.ndarray,
                            roots: np.ndarray, root_t: np.ndarray, candidates: int, fixed_source: bool) -> BatchPlan:
        """An evaluation batch under ``tgl`` with each distinct (vertex, query time) root sampled, read and
        embedded once for all the batch's 1 + K candidates (a historical negative's endpoints may be the
        positive's, or another negative's of the same event); ``root_index`` maps each root of [src, dst,
        negatives] to its pair, as under ``--protocol batch`` (same fields, so the loop gathers alike).
        Scores are those of one root per candidate: the roots' embeddings are functions of their pair
        (:meth:`_roots_shareable`). docs/performance.md, "Continuous-time cost per unit of work"."""
        b = len(events)
        first, root_index = distinct_queries(roots, root_t)
        unique, root_times = roots[first], root_t[first]
        root_event = np.tile(np.arange(b), len(roots) // max(b, 1))[first]  # an event of each pair's first root
        neighbors = None
        if self.sampler is not None and self.neighbors > 0:  # ``recent``: no uniforms drawn
            neighbors = self.sampler.sample_window(start, stop, unique, root_times, self.neighbors, self.strategy)
        # each endpoint mails its pair's sampled neighbours
        needed, query_times, event_of, deliveries, delivery_priority = self._rows_and_mails(
            unique, root_times, root_event, neighbors, root_index[:2 * b], positions)
        return BatchPlan(split, index, stop - start, positions, events, src, dst, negatives, neighbors, needed,
                         query_times, self.route(needed), event_of, deliveries, delivery_priority, candidates,
                         fixed_source, root_index, root_times)

    def _candidate_roots(self, split: str, events: np.ndarray, src: np.ndarray, dst: np.ndarray
                         ) -> tuple[list[np.ndarray], bool]:
        """Root blocks of an evaluation batch: [src, dst, dst'_1..dst'_K] when every negative keeps its
        event's source (the random strategy), else [src, dst, src'_1..src'_K, dst'_1..dst'_K]; an empty
        slot scores the event's own pair there (its score is dropped: the set has no negative there)."""
        neg_src, neg_dst = self.candidates[split]
        rows = events - self.stream.ranges[split][0]
        neg_src, neg_dst = neg_src[rows], neg_dst[rows]
        present = neg_dst >= 0
        neg_src = np.where(present, neg_src, src[:, None])
        neg_dst = np.where(present, neg_dst, dst[:, None])
        fixed = bool((neg_src == src[:, None]).all())
        return [src, dst, *([] if fixed else list(neg_src.T)), *list(neg_dst.T)], fixed


def vertex_uniforms(key: tuple[int, ...], vertices: np.ndarray, k: int) -> np.ndarray:
    """(len(vertices), k) uniforms in [0, 1), a function of (``key``, vertex, slot) alone (SplitMix64 of
    the combined integers): the same draws for a vertex whichever rank queries it."""
    mixed = np.zeros((), dtype=np.uint64)
    for part in key:
        mixed = _splitmix(mixed ^ np.uint64(part & 0xFFFFFFFFFFFFFFFF))
    grid = np.asarray(vertices, dtype=np.uint64)[:, None] * np.uint64(k) + np.arange(k, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        bits = _splitmix(grid ^ mixed)
    return (bits >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _splitmix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise (uint64, wrapping)."""
    with np.errstate(over="ignore"):
        x: np.ndarray = np.asarray(values, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return np.asarray(x ^ (x >> np.uint64(31)))


class Prefetcher:
    """Yields plans in order, building up to ``depth`` ahead on a background thread (Sven's prefetch queue)."""

    def __init__(self, planner: BatchPlanner, split: str, batch_size: int, depth: int = 2):
        self.planner, self.split, self.batch_size, self.depth = planner, split, batch_size, depth

    def __iter__(self) -> Iterator[BatchPlan]:
        bounds = self.planner.batch_bounds(self.split, self.batch_size)
        if self.depth <= 0:
            for i, (a, b) in enumerate(bounds):
                yield self.planner.plan(self.split, i, a, b)
            return
        slots: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def produce() -> None:
            try:
                for i, (a, b) in enumerate(bounds):
                    if stop.is_set():
                        return
                    slots.put(("plan", self.planner.plan(self.split, i, a, b)))
                slots.put(("end", None))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the training thread
                slots.put(("error", exc))

        worker = threading.Thread(target=produce, daemon=True)
        worker.start()
        try:
            while True:
                kind, value = slots.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            stop.set()
            while worker.is_alive():  # unblock a producer waiting on a full queue
                try:
                    slots.get_nowait()
                except queue.Empty:
                    worker.join(timeout=0.05)


STREAMED_SAMPLER_REFUSAL = ("a streamed stream (larger than --stream-budget) samples with the bounded per-vertex "
                            "rings of --sampler recent only")


def neighbor_sampler(stream: EventStream, strategy: str, k: int, decay: float = 0.0,
                     keep_features: bool = True) -> TemporalSampler | RecentRing:
    """The T-CSR over the whole stream in memory; on a streamed stream the bounded ``recent`` rings
    (docs/continuous-training.md, "Streams larger than memory": uniform and sis need the whole history)."""
    if not stream.is_streamed:
        return TemporalSampler(stream.src, stream.dst, stream.t, stream.num_nodes, decay=decay)
    if strategy != "recent":
        raise DgbenchError(f"--sampler {strategy}: {STREAMED_SAMPLER_REFUSAL}; use --sampler recent or raise "
                           f"--stream-budget")
    return RecentRing(stream, k, keep_features=keep_features)


def gap_statistics(stream: EventStream) -> tuple[float, float]:
    """Mean and standard deviation of the per-vertex time between events (one pass when streamed)."""
    if stream.is_streamed:
        return streamed_gap_statistics(stream.src, stream.dst, stream.t, stream.num_nodes)  # type: ignore[arg-type]
    return TemporalSampler(stream.src, stream.dst, stream.t, stream.num_nodes).gap_statistics()
