"""Per-rank plans for schemes that place *instances* v_{i,t} on ranks (DGC's PGC, §4; PSS, whose
instance map is contiguous snapshot ranges): what each rank computes and what crosses ranks.

Layout of rank p (:class:`InstancePlan`): a grid of ``steps × len(rows)`` cells, ``rows`` the
vertices p holds at least one instance of (ascending), cell (t, r) at flat index t·R + r. p computes
its *own* cells (its instances); the other cells hold nothing, or, for temporal attention, earlier
instances received from other ranks.

* **Spatial halo** (one exchange per structure-encoder aggregation): p sends each rank q the rows of
  its instances that q's instances aggregate (distinct (instance, q) pairs, grouped by q ascending,
  instance id ascending within) and receives, grouped by sender ascending, the rows its own
  instances read elsewhere. ``operator`` is Ã restricted to p's own cells: rows = the T·R cells
  (other cells' rows are empty), columns = the T·R cells then the received rows in arrival order.
  Rows sent over all ranks = :func:`~dgbench.trainers.discrete.dgc.chunks.cut_rows`' spatial count.
* **Recurrent carries** (GRU/LSTM): each vertex's sequence cut into *runs* of consecutive instances
  on one rank; run k of a vertex can only start once run k-1 (elsewhere) has ended, so runs of index
  k form round k. Before round k ≥ 1 every rank sends the carry at the end of each of its round-(k-1)
  runs to the rank of the next run (grouped by destination, vertex ascending). Carries sent over all
  ranks = ``cut_rows``' temporal count for a recurrent profile. PSS is the special case of one run
  per rank and vertex: the state handed rank to rank.
* **Attention history** (causal temporal attention reads every earlier instance): before the time
  encoder, p receives every earlier instance (of a vertex it holds) that lives elsewhere, into that
  instance's own cell; rows sent = ``cut_rows``' temporal count for an attention profile.
* **Pairs**: a link-prediction pair (u, v) of step t is scored with the embeddings of the latest
  instances of u and v at or before t (:func:`latest_instances`; -1: none, zero embedding), on the
  rank of u's (rank 0 if none).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.models.sparse import CsrArrays
from dgbench.trainers.discrete.dgc.chunks import SuperGraph


@dataclass(frozen=True)
class Exchange:
    """One all-to-all: rows (flat cells) this rank sends, grouped by destination rank, and the
    instances arriving, grouped by source rank (the order ``all_to_all_single`` fills)."""

    send_cells: np.ndarray
    send_splits: list[int]
    recv_instances: np.ndarray
    recv_splits: list[int]

    @property
    def rows_sent(self) -> int:
        return int(self.send_cells.size)


@dataclass(frozen=True)
class Round:
    """This rank's runs of one round: each a segment of one vertex's sequence (one per vertex)."""

    rows: np.ndarray  # grid row of each segment's vertex (segments in ascending vertex order)
    cells: np.ndarray  # flat cells of every segment's instances, segment after segment, time order
    lengths: np.ndarray  # instances per segment
    received: np.ndarray  # bool per segment: starts from a carry received before the round
    recv_order: np.ndarray  # segment of each arriving carry (arrival order)
    recv_splits: list[int]
    continues: np.ndarray  # bool per segment: its final carry goes on to another rank
    send_order: np.ndarray  # segments whose final carry is sent, in send order
    send_splits: list[int]


@dataclass(frozen=True)
class InstancePlan:
    """Everything rank ``rank`` needs to run its instances (see the module docstring)."""

    rank: int
    num_parts: int
    steps: int
    rows: np.ndarray
    own: np.ndarray  # bool [steps, R]: cells of this rank's instances
    own_instances: np.ndarray  # instance id of each own cell, in flat cell order
    spatial: Exchange
    operator: CsrArrays
    rounds: tuple[Round, ...]
    history: Exchange  # attention: earlier instances arriving into their own cells
    history_cells: np.ndarray  # flat cell of each arriving history row (arrival order)

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    def cells_of(self, steps: np.ndarray, vertices: np.ndarray) -> np.ndarray:
        """Flat cells of (step, vertex) pairs whose vertex is a row here."""
        where = np.searchsorted(self.rows, vertices)
        if len(vertices) and (where.max(initial=0) >= len(self.rows) or (self.rows[where] != vertices).any()):
            raise DgbenchError(f"rank {self.rank}: a vertex asked for is not one of its rows")
        return np.asarray(steps, np.int64) * len(self.rows) + where


def latest_instances(graph: SuperGraph) -> np.ndarray:
    """[T, N]: the latest instance of vertex v at or before step t (-1: none yet). Instance ids grow
    with t (Eq. 1), so a running maximum over t is the latest."""
    table = np.full((graph.num_snapshots, graph.num_vertices), -1, dtype=np.int64)
    table[graph.step, graph.vertex] = np.arange(graph.num_instances)
    return np.maximum.accumulate(table, axis=0)


@dataclass(frozen=True)
class _Runs:
    order: np.ndarray  # instances sorted by (vertex, step)
    start: np.ndarray  # first position (in ``order``) of each run
    length: np.ndarray
    vertex: np.ndarray
    part: np.ndarray
    index: np.ndarray  # run index within its vertex's sequence
    first_of_vertex: np.ndarray  # index of the vertex's first run, per run

    @property
    def has_next(self) -> np.ndarray:
        return np.r_[self.vertex[1:] == self.vertex[:-1], False] if len(self.vertex) else self.vertex.astype(bool)


def _runs(graph: SuperGraph, part: np.ndarray) -> _Runs:
    order = np.lexsort((graph.step, graph.vertex))
    vertex, where = graph.vertex[order], part[order]
    if not len(order):
        empty = np.empty(0, np.int64)
        return _Runs(order, empty, empty, empty, empty, empty, empty)
    new_vertex = np.r_[True, vertex[1:] != vertex[:-1]]
    start = np.flatnonzero(new_vertex | np.r_[True, where[1:] != where[:-1]])
    length = np.diff(np.r_[start, len(order)])
    first_run = new_vertex[start]
    first_of_vertex = np.flatnonzero(first_run)[np.cumsum(first_run) - 1]
    return _Runs(order, start, length, vertex[start], where[start], np.arange(len(start)) - first_of_vertex,
                 first_of_vertex)


def build_instance_plans(graph: SuperGraph, part: np.ndarray, num_parts: int, adjacency: list[CsrArrays],
                         ranks: list[int] | None = None) -> list[InstancePlan]:
    """The plans of ``ranks`` (default: every rank) for instance placement ``part`` (instance -> rank).
    ``adjacency[t]`` is snapshot t's normalised Ã (rows = destination, columns = source), as
    :mod:`dgbench.trainers.discrete.data` builds it; its entries must join instances (presence of every vertex
    it reads)."""
    part = np.asarray(part, dtype=np.int64)
    if part.shape != (graph.num_instances,):
        raise DgbenchError(f"part must give one rank per instance ({graph.num_instances}), got shape {part.shape}")
    if len(adjacency) != graph.num_snapshots:
        raise DgbenchError(f"{len(adjacency)} adjacency matrices for {graph.num_snapshots} snapshots")
    runs = _runs(graph, part)
    num_rounds = int(runs.index.max()) + 1 if len(runs.index) else 1
    rows_of = [np.unique(graph.vertex[part == p]) for p in range(num_parts)]
    spatial = _spatial_pairs(graph, part, num_parts)
    history = _history_pairs(graph, runs, num_parts)
    plans = []
    for p in range(num_parts) if ranks is None else ranks:
        rows = rows_of[p]
        cell = _Cells(graph, rows)
        exchange = _exchange(spatial, part, p, num_parts, cell)
        hist = _exchange(history, part, p, num_parts, cell)
        own = np.zeros((graph.num_snapshots, len(rows)), dtype=bool)
        mine = np.flatnonzero(part == p)
        own.reshape(-1)[cell(mine)] = True
        own_instances = np.full(own.size, -1, np.int64)
        own_instances[cell(mine)] = mine
        plans.append(InstancePlan(p, num_parts, graph.num_snapshots, rows, own, own_instances[own.reshape(-1)],
                                  exchange, _local_operator(graph, part, p, rows, cell, exchange, adjacency),
                                  tuple(_round(runs, part, p, k, num_parts, cell) for k in range(num_rounds)),
                                  hist, cell(hist.recv_instances)))
    return plans


class _Cells:
    """Flat grid cell t·R + r of instances on a rank whose rows are ``rows``."""

    def __init__(self, graph: SuperGraph, rows: np.ndarray):
        self.graph, self.rows = graph, rows

    def __call__(self, instances: np.ndarray) -> np.ndarray:
        instances = np.asarray(instances, np.int64)
        return self.graph.step[instances] * len(self.rows) + np.searchsorted(self.rows, self.graph.vertex[instances])


def _spatial_pairs(graph: SuperGraph, part: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (instance, reading rank) pairs of the spatial halo."""
    reader = part[graph.spatial_dst]
    crossing = part[graph.spatial_src] != reader
    keys = np.unique(graph.spatial_src[crossing] * np.int64(num_parts) + reader[crossing])
    return keys // num_parts, keys % num_parts


def _history_pairs(graph: SuperGraph, runs: _Runs, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (earlier instance, reading rank) pairs of causal attention: rank p reads every instance
    of v before p's last run of v that it does not hold."""
    if not len(runs.vertex):
        empty = np.empty(0, np.int64)
        return empty, empty
    key = runs.vertex * np.int64(num_parts) + runs.part
    _, from_end = np.unique(key[::-1], return_index=True)
    last = np.sort(len(key) - 1 - from_end)  # last run of every (vertex, rank)
    count = last - runs.first_of_vertex[last]
    reader_run = np.repeat(last, count)
    earlier = np.repeat(runs.first_of_vertex[last], count) + np.arange(count.sum()) \
        - np.repeat(np.cumsum(count) - count, count)
    keep = runs.part[earlier] != runs.part[reader_run]
    earlier, reader = earlier[keep], runs.part[reader_run][keep]
    sizes = runs.length[earlier]
    first = np.repeat(runs.start[earlier], sizes) + np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return runs.order[first], np.repeat(reader, sizes)


def window_exchange(graph: SuperGraph, part: np.ndarray, plan: InstancePlan, reach: int) -> tuple[Exchange, np.ndarray]:
    """For a window module reading the ``reach`` previous instances of a vertex (TM-GCN's M-transform,
    reach w-1): the distinct (earlier instance, reading rank) rows ``plan``'s rank sends and receives,
    and the cells the received rows go to."""
    part = np.asarray(part, np.int64)
    order = np.lexsort((graph.step, graph.vertex))
    vertex = graph.vertex[order]
    earlier, reader = [], []
    for shift in range(1, reach + 1):
        same = vertex[shift:] == vertex[:-shift]
        before, after = order[:-shift][same], order[shift:][same]
        crossing = part[before] != part[after]
        earlier.append(before[crossing])
        reader.append(part[after[crossing]])
    keys = np.unique(np.concatenate(earlier) * np.int64(plan.num_parts) + np.concatenate(reader)) if earlier \
        else np.empty(0, np.int64)
    cell = _Cells(graph, plan.rows)
    exchange = _exchange((keys // plan.num_parts, keys % plan.num_parts), part, plan.rank, plan.num_parts, cell)
    return exchange, cell(exchange.recv_instances)


def _exchange(pairs: tuple[np.ndarray, np.ndarray], part: np.ndarray, rank: int, num_parts: int,
              cell: _Cells) -> Exchange:
    instance, reader = pairs
    sender = part[instance]
    out = sender == rank
    send = np.lexsort((instance[out], reader[out]))
    arriving = reader == rank
    recv = np.lexsort((instance[arriving], sender[arriving]))
    return Exchange(cell(instance[out][send]), np.bincount(reader[out], minlength=num_parts).tolist(),
                    instance[arriving][recv], np.bincount(sender[arriving], minlength=num_parts).tolist())


def _local_operator(graph: SuperGraph, part: np.ndarray, rank: int, rows: np.ndarray, cell: _Cells, halo: Exchange,
                    adjacency: list[CsrArrays]) -> CsrArrays:
    """Ã over this rank's own cells; columns: the T·R cells, then the halo rows in arrival order."""
    num_cells = graph.num_snapshots * len(rows)
    arrival = np.argsort(halo.recv_instances, kind="stable")
    sorted_halo = halo.recv_instances[arrival]
    counts = np.zeros(num_cells, np.int64)
    entries_by_row: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for t in range(graph.num_snapshots):
        a = adjacency[t]
        here = graph.vertex[graph.offsets[t]:graph.offsets[t + 1]][part[graph.offsets[t]:graph.offsets[t + 1]] == rank]
        lengths = np.diff(a.rowptr)[here].astype(np.int64)
        picks = np.repeat(np.asarray(a.rowptr)[here] - np.r_[0, np.cumsum(lengths)[:-1]], lengths) \
            + np.arange(lengths.sum())
        sources = np.asarray(a.col)[picks].astype(np.int64)
        source_instances = graph.instances(t, sources)
        column = cell(source_instances)
        remote = part[source_instances] != rank
        column[remote] = num_cells + arrival[np.searchsorted(sorted_halo, source_instances[remote])]
        target = t * len(rows) + np.searchsorted(rows, here)
        counts[target] = lengths
        entries_by_row.append((np.repeat(target, lengths), column, np.asarray(a.val)[picks]))
    targets = np.concatenate([e[0] for e in entries_by_row]) if entries_by_row else np.empty(0, np.int64)
    order = np.argsort(targets, kind="stable")  # rows ascending; within a row Ã's own column order
    columns = np.concatenate([e[1] for e in entries_by_row])[order] if entries_by_row else targets
    values = np.concatenate([e[2] for e in entries_by_row])[order].astype(np.float32) if entries_by_row \
        else np.empty(0, np.float32)
    return CsrArrays(np.r_[0, np.cumsum(counts)].astype(np.int64), columns.astype(np.int64), values,
                     (num_cells, num_cells + halo.recv_instances.size))


def _round(runs: _Runs, part: np.ndarray, rank: int, k: int, num_parts: int, cell: _Cells) -> Round:
    chosen = np.flatnonzero((runs.part == rank) & (runs.index == k))
    lengths = runs.length[chosen]
    positions = np.repeat(runs.start[chosen], lengths) + np.arange(lengths.sum()) \
        - np.repeat(np.cumsum(lengths) - lengths, lengths)
    instances = runs.order[positions]
    rows_cells = cell(instances[np.r_[0, np.cumsum(lengths)[:-1]]]) if len(chosen) else np.empty(0, np.int64)
    received = runs.index[chosen] > 0
    source = runs.part[chosen - 1][received] if len(chosen) else np.empty(0, np.int64)
    recv_order = np.flatnonzero(received)[np.argsort(source, kind="stable")]
    continues = runs.has_next[chosen]
    destination = runs.part[np.minimum(chosen + 1, len(runs.part) - 1)][continues] if len(chosen) \
        else np.empty(0, np.int64)
    send_order = np.flatnonzero(continues)[np.argsort(destination, kind="stable")]
    return Round(rows=rows_cells % max(1, len(cell.rows)), cells=cell(instances), lengths=lengths,
                 received=received, recv_order=recv_order,
                 recv_splits=np.bincount(source, minlength=num_parts).tolist(), continues=continues,
                 send_order=send_order, send_splits=np.bincount(destination, minlength=num_parts).tolist())

