"""Sven's algorithmic core (Xia et al., TPDS, and its HPDC'23 version) in the paper's forms.

Alg. 2's redundancy-free data organisation, Eq. 1's redundancy ratios, Eq. 2 / Eq. 5's balance on
the trainer-vertex graph, Eq. 7-9's volumes (App. C) beside the per-rank form, Eq. 12's micro-batch
count (App. D), and the partitioners (range, HPDC's interval, Re-FlexBiCut = Alg. 3 with App. B's
binary search, and our earlier greedy heuristic under its own name).
See docs/continuous-training.md (sections "Schemes" and "Record").
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.trainers.continuous.traffic import BatchTraffic, CommVolume

SCHEMES = ("depcache", "depcomm", "sven")


# --------------------------------------------------------------------------- Alg. 2

def deduplicate(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique ids (sorted) and the inverse index with ``ids``' shape: ``unique[inverse] == ids`` (Alg. 2)."""
    ids = np.asarray(ids)
    unique_ids, inverse = np.unique(ids.ravel(), return_inverse=True)
    return unique_ids, inverse.reshape(ids.shape)


def restore(unique_values: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """Per-position values from per-unique-id rows: row ``inverse[i]`` for every position i."""
    return unique_values[inverse]


def batch_dependencies(batch_vertices: np.ndarray, sampled_vertices: np.ndarray) -> np.ndarray:
    """The concatenation Alg. 2 deduplicates: batch vertices (src, dst, negatives) then sampled neighbours."""
    return np.concatenate([np.asarray(batch_vertices).ravel(), np.asarray(sampled_vertices).ravel()])


def dispatch_plan(unique_ids: np.ndarray, owner: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Order putting ``unique_ids`` grouped by owner rank, and the per-owner counts (all-to-all splits)."""
    owners = owner[unique_ids]
    order = np.argsort(owners, kind="stable")
    return order, np.bincount(owners, minlength=num_parts)


# --------------------------------------------------------------------------- Eq. 1

# --------------------------------------------------------------------------- Eq. 7-9

def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise DgbenchError(f"unknown communication scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")


def paper_volume(scheme: str, n1: int, n2: int, eta1: float, eta2: float, memory_dim: int, edge_dim: int,
                 num_trainers: int, unit_bytes: int = 4) -> CommVolume:
    """Eq. 7 (depcache), Eq. 8 (depcomm), Eq. 9 (sven) exactly as printed, for one mini-batch of N1
    sampled and N2 original nodes with redundancy ratios eta1, eta2 (Eq. 1), M trainers and C0 bytes
    per value; d_msg = 2 d_mem + d_edge (App. C)."""
    _check_scheme(scheme)
    m, c0 = num_trainers, unit_bytes
    d_msg = 2 * memory_dim + edge_dim
    row = d_msg + memory_dim
    aggregation = n2 * (1 - eta2) * row * c0
    if scheme == "depcache":  # Eq. 7: one all-gather
        return CommVolume(0.0, aggregation * 2 * (m - 1) ** 2 / m)
    all_to_all = 2 * (m - 1) / m
    dispatch = n1 * memory_dim * c0 if scheme == "depcomm" else n1 * (1 - eta1) * row * c0  # Eq. 8 / Eq. 9
    return CommVolume(dispatch * all_to_all, aggregation * all_to_all)


def rank_volume(scheme: str, traffic: BatchTraffic) -> CommVolume:
    """Bytes one rank sends for one batch (per-rank form of Eq. 7-9, the implementation's mechanics):

    * depcache: its distinct updates, last-wins first, all-gathered to the M-1 other replicas;
    * depcomm: a d_mem-wide updated-memory row per remote dispatch position (no deduplication, Eq. 8),
      its distinct remote updates written back (Eq. 8's (1 - eta2));
    * sven: one whole N&M row per distinct remote vertex (Alg. 2), distinct remote updates written back.
    """
    _check_scheme(scheme)
    t, c0 = traffic, traffic.bytes_per_value
    if scheme == "depcache":
        return CommVolume(0.0, float(t.updates_unique * (t.world_size - 1) * t.update_width * c0))
    aggregation = float(t.aggregation_unique * t.update_width * c0)
    if scheme == "depcomm":
        return CommVolume(float(t.dispatch_positions * t.view_width * c0), aggregation)
    return CommVolume(float(t.dispatch_unique * t.row_width * c0), aggregation)


# --------------------------------------------------------------------------- Eq. 12

def redundancy_by_batch_size(ids: np.ndarray, event_of: np.ndarray, sizes: list[int]) -> list[float]:
    """Eq. 1's eta of a dispatch list when its events are cut into micro-batches of ``sizes[i]`` events
    (each micro-batch deduplicated on its own): the eta(bs) curve Eq. 12 is fitted to.
    ``event_of[p]``: the event (0-based within the batch) position p belongs to."""
    ids, event_of = np.asarray(ids, dtype=np.int64), np.asarray(event_of, dtype=np.int64)
    out = []
    for size in sizes:
        if len(ids) == 0:
            out.append(0.0)
            continue
        group = event_of // max(int(size), 1)
        distinct = len(np.unique(group * (int(ids.max()) + 1) + ids))
        out.append(1.0 - distinct / len(ids))
    return out


def fit_redundancy_curve(batch_sizes: list[int], etas: list[float]) -> tuple[float, float]:
    """(A, B) of eta = A + B / bs (Eq. 12's App. D model), least squares over the profiled points."""
    x = 1.0 / np.asarray(batch_sizes, dtype=np.float64)
    y = np.asarray(etas, dtype=np.float64)
    if len(x) < 2 or np.ptp(x) == 0:
        return float(y.mean()) if len(y) else 0.0, 0.0
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def granularity(a: float, b: float, batch_size: int, link_speed: float, max_micro_batches: int = 16) -> int:
    """Eq. 12: n = floor((A bs + B) / S), clamped to 1..max_micro_batches.

    Dimensions (the paper leaves them open): A bs + B = bs eta(bs) is the batch's redundant share in
    events, so S is read as a speed in the same unit — the events whose deduplicated rows the link
    moves in the fixed cost of one collective (measured bandwidth x per-collective latency / bytes per
    event). n then grows with the transfer time, as App. D argues."""
    if link_speed <= 0 or not np.isfinite(link_speed):
        return max_micro_batches if link_speed == 0 else 1
    n = int(np.floor((a * batch_size + b) / link_speed))
    return int(min(max(n, 1), max_micro_batches))


# --------------------------------------------------------------------------- Eq. 2 and Eq. 5

@dataclass
class TrainerVertexGraph:
    """The trainer-vertex graph of a pre-sampling pass (§3.1.2, Fig. 8c): ``weight[j, v]`` = w(t_j, v),
    the N&M rows trainer j moves for vertex v in one epoch (dispatch + write-back, each at most once per
    batch after Alg. 2)."""

    weight: np.ndarray  # (M, N) int64

    @property
    def num_trainers(self) -> int:
        return self.weight.shape[0]

    @property
    def num_nodes(self) -> int:
        return self.weight.shape[1]

    @classmethod
    def from_keys(cls, keys: list[np.ndarray], num_trainers: int, num_nodes: int) -> "TrainerVertexGraph":
        """From per-(batch, trainer) deduplicated key arrays ``trainer * num_nodes + vertex``."""
        flat = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        counts = np.bincount(flat, minlength=num_trainers * num_nodes)
        return cls(counts.reshape(num_trainers, num_nodes).astype(np.int64))


def even_share(batch_events: int, rank: int, world_size: int) -> np.ndarray:
    """Positions of the events ``rank`` computes in a batch: contiguous, sizes differ by at most one."""
    return np.flatnonzero((np.arange(batch_events) * world_size) // max(batch_events, 1) == rank)


def trainer_vertex_graph(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_trainers: int,
                         batch_size: int) -> TrainerVertexGraph:
    """The trainer-vertex graph of a stream without negatives or sampled neighbours: each batch's events
    split evenly (:func:`even_share`), each trainer dispatching and writing back its events' endpoints
    once per batch. (Runs build the full graph from the training plans: trainers/continuous/sven/partition.py.)"""
    src, dst = _check_stream(src, dst, num_nodes, num_trainers)
    batch = _batch_index(len(src), batch_size)
    within = np.arange(len(src)) - batch * batch_size
    sizes = np.minimum(batch_size, len(src) - batch * batch_size)
    trainer = (within * num_trainers) // np.maximum(sizes, 1)
    keys = []
    for endpoint in (src, dst):
        keys.append((batch * num_trainers + trainer) * num_nodes + endpoint)
    per_batch = np.unique(np.concatenate(keys))  # one row per (batch, trainer, vertex): Alg. 2
    trainer_vertex = per_batch % (num_trainers * num_nodes)
    # one dispatch and one write-back per (batch, trainer, vertex)
    return TrainerVertexGraph(2 * np.bincount(trainer_vertex, minlength=num_trainers * num_nodes)
                              .reshape(num_trainers, num_nodes).astype(np.int64))


@dataclass
class BalanceReport:
    """Communication per trainer under one vertex partition, on the trainer-vertex graph.

    ``matrix[i, j]``: rows trainer i moves for vertices owned by trainer j (i != j; the diagonal is
    local and free). zeta_j (Eq. 5) = sum_i!=j matrix[i, j] + sum_k!=j matrix[j, k]: what others move
    with j plus what j moves with others."""

    matrix: np.ndarray
    local: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def per_rank(self) -> np.ndarray:
        return self.matrix.sum(axis=0) + self.matrix.sum(axis=1)

    @property
    def balance_cost(self) -> int:
        """Eq. 5: zeta(W) = max_j zeta(W_j)."""
        return int(self.per_rank.max()) if self.per_rank.size else 0

    @property
    def residual(self) -> np.ndarray:
        """Eq. 2: R = J_{MxM} C_max - C over the off-diagonal (trainer-to-trainer) entries."""
        c = self.matrix.astype(np.float64)
        off = ~np.eye(len(c), dtype=bool)
        residual = np.zeros_like(c)
        residual[off] = c[off].max(initial=0.0) - c[off]
        return residual

    @property
    def imbalance(self) -> float:
        mean = self.per_rank.mean() if self.per_rank.size else 0.0
        return float(self.per_rank.max() / mean) if mean > 0 else 1.0

    def summary(self) -> dict[str, float]:
        return {"balance_cost": self.balance_cost, "total": int(self.matrix.sum()),
                "max_residual": float(self.residual.max(initial=0.0)), "imbalance": self.imbalance}

    def as_record(self) -> dict:
        return {**self.summary(), "per_rank": self.per_rank.tolist(), "matrix": self.matrix.tolist(),
                "residual_matrix": self.residual.tolist()}


def balance_report(graph: TrainerVertexGraph, owner: np.ndarray) -> BalanceReport:
    """C of Eq. 2 and zeta of Eq. 5 for the partition ``owner`` of the graph's vertices."""
    owner = np.asarray(owner, dtype=np.int64)
    m = graph.num_trainers
    if len(owner) != graph.num_nodes:
        raise DgbenchError(f"owner has {len(owner)} vertices, the trainer-vertex graph {graph.num_nodes}")
    by_owner = np.zeros((m, m), dtype=np.int64)
    for j in range(m):
        by_owner[:, j] = graph.weight[:, owner == j].sum(axis=1)
    local = np.diag(by_owner).copy()
    np.fill_diagonal(by_owner, 0)
    return BalanceReport(by_owner, local)


def balance_cost(graph: TrainerVertexGraph, owner: np.ndarray) -> int:
    """Eq. 5's zeta(W) of ``owner``."""
    return balance_report(graph, owner).balance_cost


def _check_stream(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    if src.shape != dst.shape or src.ndim != 1:
        raise DgbenchError(f"src and dst must be 1-D arrays of one length (got {src.shape} and {dst.shape})")
    if num_parts < 1:
        raise DgbenchError(f"num_parts must be at least 1 (got {num_parts})")
    if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise DgbenchError(f"vertex ids must lie in 0..{num_nodes - 1}")
    return src, dst


def _batch_index(num_events: int, batch_size: int) -> np.ndarray:
    if batch_size < 1:
        raise DgbenchError(f"batch_size must be at least 1 (got {batch_size})")
    return np.arange(num_events, dtype=np.int64) // batch_size


# --------------------------------------------------------------------------- baselines

def range_partition(num_nodes: int, num_parts: int) -> np.ndarray:
    """Baseline: P contiguous vertex-id ranges of (nearly) equal size."""
    if num_parts < 1:
        raise DgbenchError(f"num_parts must be at least 1 (got {num_parts})")
    return (np.arange(num_nodes, dtype=np.int64) * num_parts) // max(num_nodes, 1)


def interval_partition(num_nodes: int, num_parts: int, interval: int) -> np.ndarray:
    """HPDC §3.1.2 interval partition: vertex ids cut at a constant interval granularity, intervals dealt
    to the trainers in turn (owner = (v // interval) mod P), so hot and cold id regions interleave."""
    if num_parts < 1 or interval < 1:
        raise DgbenchError(f"num_parts and interval must be at least 1 (got {num_parts}, {interval})")
    return (np.arange(num_nodes, dtype=np.int64) // interval) % num_parts


# --------------------------------------------------------------------------- Alg. 3 Re-FlexBiCut

def _assign_under_bound(weight: np.ndarray, delta: np.ndarray, active: np.ndarray, bound: float,
                        max_rounds: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Alg. 3 for one guess B of the load bound (App. B): owners (-1 = unassigned) and zeta, or None when
    a whole round assigns nothing while vertices remain (no Re-FlexBiCut within B).

    Each trainer t_i in turn is the source of a source&sink graph whose sink are the other trainers.
    On the bipartite trainer-vertex graph, moving v to t_i's side changes the capacity of the cut
    around W_i by delta_i(v) = sum_{j != i} w(t_j, v) - w(t_i, v) (unassigned vertices count as cut
    for every trainer), so the cut around t_i of capacity <= B holding the most unlabelled vertices
    takes them in ascending delta_i while the capacity stays within B (line 6-7; exact for this
    graph). Line 9-12: the vertices of W_j on t_i's side of the unbounded cut (delta_i < 0) are
    reassigned to W_i when the balance cost does not grow (zeta' <= zeta). A guess is feasible when every
    vertex is labelled and every cut stays within B."""
    m, _ = weight.shape
    owner = np.where(active, -1, -2)  # -2: no edges, placed after the search
    zeta = weight.sum(axis=1).astype(np.float64)  # every trainer starts fetching all it needs
    for _ in range(max_rounds):
        progress = False
        for i in range(m):
            unassigned = np.flatnonzero(owner == -1)
            if len(unassigned):
                d = delta[i, unassigned]
                order = np.argsort(d, kind="stable")
                capacity = zeta[i] + np.cumsum(d[order])
                fits = np.flatnonzero(capacity <= bound)
                # no cut within B yet: still take the vertices t_i needs more than all others (delta < 0)
                take = int(fits[-1]) + 1 if len(fits) else int((d < 0).sum())
                if take:
                    owner[unassigned[order[:take]]] = i
                    zeta[i] = capacity[take - 1]
                    progress = True
            wanted = delta[i] < 0
            for j in range(m):
                if j == i:
                    continue
                moving = wanted & (owner == j)
                if not moving.any():
                    continue
                after = zeta.copy()
                after[i] += delta[i, moving].sum()
                after[j] -= delta[j, moving].sum()
                if after.max() <= zeta.max():
                    owner[moving] = i
                    zeta = after
                    progress = True
        if not (owner == -1).any():
            return (owner, zeta) if zeta.max() <= bound else None  # every cut within B (App. B)
        if not progress:
            return None
    return None


def re_flexbicut(graph: TrainerVertexGraph, max_rounds: int | None = None) -> np.ndarray:
    """Alg. 3 Re-FlexBiCut: owner trainer of every vertex minimising Eq. 5's balance cost (approximately).

    App. B: binary search on the load bound B between a lower bound (every remote access moved once,
    shared evenly: 2 sum_v (sum_j w - max_j w) / M) and the cost of a feasible partition (each vertex on
    the trainer needing it most); for each guess, :func:`_assign_under_bound` runs the source&sink
    bi-cuts and reassignments until every vertex is labelled. The smallest feasible B's partition is
    returned (the fallback partition if no guess assigns everything). Vertices no trainer touches in the
    pre-sampled epoch do not enter the cuts; they are dealt to the trainers in turn by id (memory rows
    only, no traffic)."""
    weight = graph.weight.astype(np.float64)
    m, n = weight.shape
    if m == 1:
        return np.zeros(n, dtype=np.int64)
    total = weight.sum(axis=0)
    active = total > 0
    delta = total[None, :] - 2 * weight  # sum_{j != i} w_j - w_i
    rounds = max_rounds or (4 * int(np.ceil(np.log2(max(n, 2)))) + 2 * m)
    fallback = np.argmax(weight, axis=0).astype(np.int64)
    best = fallback
    high = int(balance_report(graph, fallback).balance_cost)  # feasible
    low = int(2 * (total - weight.max(axis=0, initial=0)).sum() // m) - 1  # below every feasible bound
    while high - low > max(1, int(1e-4 * high)):
        bound = (low + high) // 2
        result = _assign_under_bound(weight, delta, active, float(bound), rounds)
        if result is None:
            low = bound
            continue
        owner, zeta = result
        best, high = owner.copy(), min(int(zeta.max()), bound)
    idle = np.flatnonzero(~active)
    best = best.copy()
    best[idle] = np.arange(len(idle)) % m
    return best.astype(np.int64)


# --------------------------------------------------------------------------- minmax-greedy (not Alg. 3)

@dataclass
class _PairGraph:
    """Symmetric CSR of vertex pairs weighted by the number of batches in which they interact."""

    indptr: np.ndarray
    neighbors: np.ndarray
    weights: np.ndarray
    degree: np.ndarray  # total pair weight per vertex


def _pair_graph_blocks(blocks: Iterable[tuple[np.ndarray, np.ndarray]], num_nodes: int, num_parts: int,
                       batch_size: int) -> tuple[_PairGraph, np.ndarray, int]:
    """The pair graph, the events per source vertex (float64) and the event count of the blocks' events."""
    pairs, weight = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    sources = np.zeros(num_nodes, dtype=np.int64)
    num_events = 0
    for src, dst in blocks:
        if num_events % max(batch_size, 1):
            raise DgbenchError(f"a block of events starts at event {num_events}, inside a batch of {batch_size}")
        src, dst = _check_stream(src, dst, num_nodes, num_parts)
        block_pairs, block_weight = _batch_pairs(src, dst, num_nodes, batch_size)
        pairs, weight = _merge_counts(pairs, weight, block_pairs, block_weight)
        sources += np.bincount(src, minlength=num_nodes)
        num_events += len(src)
    return _pair_csr(pairs, weight, num_nodes), sources.astype(np.float64), num_events


def _batch_pairs(src: np.ndarray, dst: np.ndarray, num_nodes: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pairs low·N + high of these events and the number of batches each occurs in (Alg. 2)."""
    low, high = np.minimum(src, dst), np.maximum(src, dst)
    keep = low != high
    batch = _batch_index(len(src), batch_size)[keep]
    low, high = low[keep], high[keep]
    per_batch = np.unique((batch * num_nodes + low) * num_nodes + high)  # one per (batch, pair)
    return np.unique(per_batch % (num_nodes * num_nodes), return_counts=True)


def _merge_counts(keys: np.ndarray, counts: np.ndarray, more_keys: np.ndarray, more_counts: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted (key, count) lists as one, counts of a shared key summed."""
    if not len(keys):
        return more_keys, more_counts.astype(np.int64)
    every = np.concatenate([keys, more_keys])
    order = np.argsort(every, kind="stable")
    every, summed = every[order], np.concatenate([counts, more_counts]).astype(np.int64)[order]
    first = np.flatnonzero(np.r_[True, every[1:] != every[:-1]])
    return every[first], np.add.reduceat(summed, first)


def _pair_csr(pairs: np.ndarray, weight: np.ndarray, num_nodes: int) -> _PairGraph:
    a, b = pairs // num_nodes, pairs % num_nodes
    rows, cols, w = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([weight, weight])
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
    return _PairGraph(indptr, cols[order], w[order].astype(np.float64),
                      np.bincount(rows, weights=w, minlength=num_nodes))


class _MinMaxState:
    """Loads under the pair surrogate: a cut pair of weight w adds 2w to both owners' loads."""

    def __init__(self, graph: _PairGraph, compute_weight: np.ndarray, num_parts: int, compute_cap: float,
                 vertex_cap: float):
        self.graph, self.compute_weight, self.num_parts = graph, compute_weight, num_parts
        self.compute_cap, self.vertex_cap = compute_cap, vertex_cap
        num_nodes = len(compute_weight)
        self.owner = np.full(num_nodes, -1, dtype=np.int64)
        self.load = np.zeros(num_parts)
        self.compute = np.zeros(num_parts)
        self.count = np.zeros(num_parts)

    def neighbors(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.graph.indptr[v], self.graph.indptr[v + 1]
        return self.graph.neighbors[a:b], self.graph.weights[a:b]

    def connection(self, v: int) -> np.ndarray:
        """Pair weight from v to the placed vertices of each part."""
        nbrs, w = self.neighbors(v)
        parts = self.owner[nbrs]
        placed = parts >= 0
        return np.bincount(parts[placed], weights=w[placed], minlength=self.num_parts)

    def feasible(self, v: int) -> np.ndarray:
        """Parts that can take v without breaking the compute or vertex cap."""
        return ((self.compute + self.compute_weight[v] <= self.compute_cap)
                & (self.count + 1 <= self.vertex_cap))

    def place(self, v: int, part: int, connection: np.ndarray) -> None:
        self.load += 2 * connection
        self.load[part] += 2 * (connection.sum() - 2 * connection[part])
        self.owner[v] = part
        self.compute[part] += self.compute_weight[v]
        self.count[part] += 1

    def unplace(self, v: int, connection: np.ndarray) -> None:
        part = self.owner[v]
        self.load -= 2 * connection
        self.load[part] -= 2 * (connection.sum() - 2 * connection[part])
        self.owner[v] = -1
        self.compute[part] -= self.compute_weight[v]
        self.count[part] -= 1


def _greedy_initial(state: _MinMaxState, order: np.ndarray) -> None:
    """Greedy placement, heaviest vertices first: each vertex goes where the resulting max load is lowest
    (ties: less added cut, then fewer vertices), within the caps."""
    for v in order:
        connection = state.connection(v)
        base = state.load + 2 * connection
        own = state.load + 2 * (connection.sum() - connection)
        top = np.sort(base)[::-1]
        others_max = np.where(base == top[0], top[1], top[0])
        feasible = state.feasible(v)
        if not feasible.any():  # caps too tight for this vertex: the least-computing part with room
            room = state.count + 1 <= state.vertex_cap
            compute = np.where(room, state.compute, np.inf) if room.any() else state.compute
            feasible = compute == compute.min()
        score = np.where(feasible, np.maximum(own, others_max), np.inf)
        choice = int(np.lexsort((state.count, connection.sum() - connection, score))[0])
        state.place(v, choice, connection)


def _connection_matrix(state: _MinMaxState) -> np.ndarray:
    """Pair weight from every vertex to each part, (N, P)."""
    graph = state.graph
    rows = np.repeat(np.arange(len(state.owner)), np.diff(graph.indptr))
    cells = rows * state.num_parts + state.owner[graph.neighbors]
    return np.bincount(cells, weights=graph.weights,
                       minlength=len(state.owner) * state.num_parts).reshape(-1, state.num_parts)


def _max_load_excluding(load: np.ndarray, source: int) -> np.ndarray:
    """For every target c: the largest load among the parts other than ``source`` and c."""
    top = np.argsort(-load, kind="stable")[:3]
    others = top[top != source]
    rest = np.full(len(load), load[others[0]])
    rest[others[0]] = load[others[1]] if len(others) > 1 else -np.inf
    return rest


def _best_move(state: _MinMaxState, v: int, conn: np.ndarray, rest: np.ndarray) -> int | None:
    """Target part whose move of v lowers (max load, total load) lexicographically the most, or None."""
    source = int(state.owner[v])
    total = conn.sum()
    new_source = state.load[source] + 2 * (2 * conn[source] - total)
    new_target = state.load + 2 * (total - 2 * conn)
    new_max = np.maximum(np.maximum(new_source, new_target), rest)
    delta_total = 4 * (conn[source] - conn)
    feasible = state.feasible(v)
    feasible[source] = False
    current_max = state.load.max()
    improves = feasible & ((new_max < current_max - 1e-9)
                           | ((new_max <= current_max + 1e-9) & (delta_total < -1e-9)))
    if not improves.any():
        return None
    candidates = np.flatnonzero(improves)
    return int(candidates[np.lexsort((delta_total[candidates], new_max[candidates]))[0]])


def _single_vertex_moves(state: _MinMaxState, max_passes: int) -> int:
    """Passes over the vertices that could help, largest cut reduction first, moving each vertex whose move
    lowers (max load, total load); stops when a pass moves nothing."""
    connection = _connection_matrix(state)
    moves = 0
    for _ in range(max_passes):
        own = connection[np.arange(len(state.owner)), state.owner]
        gain = connection.max(axis=1) - own
        on_bottleneck = state.owner == int(np.argmax(state.load))
        candidates = np.flatnonzero((gain > 0) | (on_bottleneck & (connection.sum(axis=1) > own)))
        rest_by_source: dict[int, np.ndarray] = {}
        moved = 0
        for v in candidates[np.argsort(-gain[candidates], kind="stable")]:
            source = int(state.owner[v])
            if source not in rest_by_source:
                rest_by_source[source] = _max_load_excluding(state.load, source)
            target = _best_move(state, int(v), connection[v], rest_by_source[source])
            if target is None:
                continue
            state.unplace(int(v), connection[v])
            state.place(int(v), target, connection[v])
            nbrs, w = state.neighbors(int(v))
            connection[nbrs, source] -= w  # pairs are unique, so plain fancy indexing is exact
            connection[nbrs, target] += w
            rest_by_source.clear()
            moved += 1
        moves += moved
        if moved == 0:
            break
    return moves


def minmax_greedy(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int, *, batch_size: int = 200,
                  compute_imbalance: float | None = None, vertex_imbalance: float = 1.0,
                  max_passes: int = 20) -> np.ndarray:
    """``minmax-greedy`` (our heuristic, *not* Alg. 3; it was mislabelled "reflexbicut" before): on a
    vertex-vertex co-occurrence surrogate of Eq. 5 (a pair interacting in w batches adds 2w to both
    owners' loads when cut), place vertices heaviest first where the resulting maximum load is lowest,
    then move single vertices while that lowers (max load, total load).

    ``compute_imbalance`` caps the events whose source a rank owns at (1 + c) E / P; it modelled the
    old source-owner compute placement and is off by default now that events are split evenly. Every
    rank owns at most (1 + vertex_imbalance) N / P vertices."""
    src, dst = _check_stream(src, dst, num_nodes, num_parts)
    return minmax_greedy_blocks([(src, dst)], num_nodes, num_parts, batch_size=batch_size,
                                compute_imbalance=compute_imbalance, vertex_imbalance=vertex_imbalance,
                                max_passes=max_passes)


def minmax_greedy_blocks(blocks: Iterable[tuple[np.ndarray, np.ndarray]], num_nodes: int, num_parts: int, *,
                         batch_size: int = 200, compute_imbalance: float | None = None,
                         vertex_imbalance: float = 1.0, max_passes: int = 20) -> np.ndarray:
    """:func:`minmax_greedy` over the training events given as consecutive (src, dst) blocks, each but the
    last a whole number of batches long: the pair graph and the per-vertex event counts are summed block
    by block (integers, so the owners equal the one-block result), holding one block and the distinct
    pairs (docs/continuous-training.md, "Streams larger than memory")."""
    if num_parts < 1:
        raise DgbenchError(f"num_parts must be at least 1 (got {num_parts})")
    if num_parts == 1:
        return np.zeros(num_nodes, dtype=np.int64)
    graph, compute_weight, num_events = _pair_graph_blocks(blocks, num_nodes, num_parts, batch_size)
    compute_cap = np.inf if compute_imbalance is None else max(
        (1 + compute_imbalance) * num_events / num_parts, compute_weight.max(initial=0))
    vertex_cap = np.ceil((1 + vertex_imbalance) * num_nodes / num_parts)
    state = _MinMaxState(graph, compute_weight, num_parts, compute_cap, vertex_cap)
    order = np.lexsort((np.arange(num_nodes), -compute_weight, -graph.degree))
    _greedy_initial(state, order)
    _single_vertex_moves(state, max_passes)
    return state.owner
