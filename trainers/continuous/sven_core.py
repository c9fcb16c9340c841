"""Sven's algorithmic core for memory-based TGNN training: redundancy-free data organisation,
communication-balanced vertex partitioning, communication-volume model and pipeline granularity.

Reference: Y. Xia et al., "Redundancy-free high-performance dynamic GNN training with hierarchical
pipeline parallelism" (HPDC'23) and "Redundancy-Free and Load-Balanced TGNN Training With Hierarchical
Pipeline Parallelism" (TPDS 35(11), 2024). Only the abstracts of these papers were reachable when this
module was written (searched again 2026-11-23: abstracts, the WHU ICS lab summary, and the authors'
prototype repository YaqiXia/Sven, which holds test scripts, not the system), so every equation below
is the most faithful reading of what the abstracts and the equation/algorithm names describe; each is
defined precisely here so measured numbers can be checked. What the prototype confirms: Alg. 2's
dedup of batch + sampled ids with an inverse index and per-owner counts (its test_sampler.py), and the
staleness-1 rule of Eq. 13 (test_ddp_staleness.py). Eq. 1, 5, 7-9, 12, Alg. 3 and Appendix C remain
unverified reconstructions.

Training model (shared by all functions). Events are trained in chronological batches. An event
(u, v, t) is computed on the rank that owns its source u (vertex-level partitioning). A batch of B
events needs, per event, the memory of ``src``, ``dst`` and ``negatives_per_event`` negative
destinations (the *batch vertices*, (2 + negatives) * B positions) and of ``k`` sampled temporal
neighbours of each batch vertex (the *sampled vertices*). Memory rows live on their owner rank.

* Dispatch: a rank fetches the memory rows it needs from their owners.
* Aggregation: after the step the rank writes the updated memory and the new mailbox message of the
  vertices it updated (by default the batch vertices) back to their owners.

Alg. 2 (redundancy-free organisation): concatenate every vertex id a batch needs, keep each id once
(:func:`deduplicate`), transfer only the unique rows (grouped by owner, :func:`dispatch_plan`) and
rebuild the per-position tensor with the inverse index (:func:`restore`).

Eq. 1 (redundancy ratios, per rank, over *remote* positions only, since local rows cost nothing):
    eta1 = 1 - |unique remote ids in batch + sampled vertices| / |remote positions in batch + sampled|
    eta2 = 1 - |unique remote ids in updated vertices| / |remote positions in updated vertices|
(0 when there is no remote position). eta1 is the share of dispatched rows that were redundant,
eta2 the share of aggregated rows.

Eq. 5 (balance cost): the communication of rank r, C_r = rows r sends + rows r receives over the
whole stream (after per-batch deduplication); the balance cost is max_r C_r. :func:`communication_matrix`
also reports the *residual* C_r - mean(C) (how far each rank sits above or below an even split; our
reading of the paper's residual) and the imbalance max(C) / mean(C).

Eq. 7-9 (communication volume per rank per iteration, bytes; rho = remote fraction of positions,
D = (2 + negatives) * B * (1 + k) dispatch positions, U = updated_per_event * B aggregated positions,
row_d = memory_dim, row_a = memory_dim + message_dim):
    Eq. 7 DepCache  (memory replicated on every rank, updates broadcast to the P-1 other replicas):
        dispatch 0,                   aggregation (P - 1) * U * row_a
    Eq. 8 DepComm   (partitioned memory, every position fetched and written back, redundancy kept):
        dispatch rho * D * row_d,     aggregation rho_a * U * row_a
    Eq. 9 Sven      (DepComm after Alg. 2 deduplication):
        dispatch (1 - eta1) * rho * D * row_d,   aggregation (1 - eta2) * rho_a * U * row_a

Eq. 12 (micro-batch pipelining granularity): see :func:`pipeline_granularity`.

Eq. 13 (asynchronous gradient all-reduce, staleness 1) is applied by the trainer, not here: the
all-reduce of iteration t's gradient is launched asynchronously and its result is applied at step
t + 1, i.e. theta_{t+1} = theta_t - lr * allreduce(g_{t-1}). Iteration 0 takes no optimiser step, and
the last pending gradient is applied at the end of the epoch. The authors' prototype hook differs in
three details: it steps with a zero gradient at iteration 0 (same parameters under SGD; Adam's step
counter moves), all-reduces in fp16, and never flushes the last gradient.

Alg. 3 (Re-FlexBiCut): see :func:`re_flexbicut`. We read "BiCut" as BiGraph's bipartite-oriented
partitioning (Chen et al., "Bipartite-oriented distributed graph partitioning for big learning", 2014:
hub side first, edges follow one side), made min-max ("flexible") and followed by a reassignment ("Re-")
refinement; baselines: :func:`range_partition` and :func:`interval_partition`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dgbench.errors import DgbenchError

SCHEMES = ("depcache", "depcomm", "sven")


# --------------------------------------------------------------------------- Alg. 2 and Eq. 1

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


def _dispatched_and_updated(batch_vertices: np.ndarray, sampled_vertices: np.ndarray,
                            updated_vertices: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    dispatched = batch_dependencies(batch_vertices, sampled_vertices)
    updated = np.asarray(batch_vertices if updated_vertices is None else updated_vertices).ravel()
    return dispatched, updated


def _redundancy(ids: np.ndarray, owner: np.ndarray, rank: int) -> float:
    """Share of the remote positions in ``ids`` that repeat an id already requested."""
    remote = ids[owner[ids] != rank]
    return 0.0 if len(remote) == 0 else 1.0 - len(np.unique(remote)) / len(remote)


def redundancy_ratios(batch_vertices: np.ndarray, sampled_vertices: np.ndarray, owner: np.ndarray, rank: int,
                      updated_vertices: np.ndarray | None = None) -> tuple[float, float]:
    """(eta1, eta2) of Eq. 1 for one rank's batch (see the module docstring for the definitions).

    ``updated_vertices`` are the ids whose memory is written back (default: ``batch_vertices``).
    Padding ids (negative) in ``sampled_vertices`` must be removed by the caller.
    """
    owner = np.asarray(owner)
    dispatched, updated = _dispatched_and_updated(batch_vertices, sampled_vertices, updated_vertices)
    return _redundancy(dispatched, owner, rank), _redundancy(updated, owner, rank)


def remote_fractions(batch_vertices: np.ndarray, sampled_vertices: np.ndarray, owner: np.ndarray, rank: int,
                     updated_vertices: np.ndarray | None = None) -> tuple[float, float]:
    """(rho, rho_a): share of dispatch positions and of aggregation positions owned by another rank."""
    owner = np.asarray(owner)
    dispatched, updated = _dispatched_and_updated(batch_vertices, sampled_vertices, updated_vertices)
    rho, rho_a = (float(np.mean(owner[ids] != rank)) if len(ids) else 0.0 for ids in (dispatched, updated))
    return rho, rho_a


# --------------------------------------------------------------------------- Eq. 7-9

@dataclass(frozen=True)
class CommVolume:
    """Bytes one rank moves in one iteration: dispatch (fetching rows) and aggregation (writing back)."""

    dispatch_bytes: float
    aggregation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.dispatch_bytes + self.aggregation_bytes


def comm_volume(scheme: str, eta1: float, eta2: float, batch_size: int, num_parts: int, memory_dim: int,
                message_dim: int, *, num_neighbors: float = 10, negatives_per_event: int = 1,
                updated_per_event: int = 2, remote_fraction: float | None = None,
                aggregation_remote_fraction: float | None = None, bytes_per_value: int = 4) -> CommVolume:
    """Eq. 7 (depcache), Eq. 8 (depcomm), Eq. 9 (sven): per-rank, per-iteration bytes (module docstring).

    ``remote_fraction`` defaults to (P-1)/P (ids spread evenly over ranks); pass the measured one
    (:func:`remote_fractions`) to compare against counted bytes. eta1/eta2 only affect ``sven``.
    """
    if scheme not in SCHEMES:
        raise DgbenchError(f"unknown communication scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    rho = (num_parts - 1) / num_parts if remote_fraction is None else remote_fraction
    rho_a = rho if aggregation_remote_fraction is None else aggregation_remote_fraction
    dispatch_positions = (2 + negatives_per_event) * batch_size * (1 + num_neighbors)
    updated_positions = updated_per_event * batch_size
    dispatch_row = memory_dim * bytes_per_value
    aggregation_row = (memory_dim + message_dim) * bytes_per_value
    if scheme == "depcache":  # Eq. 7
        return CommVolume(0.0, float((num_parts - 1) * updated_positions * aggregation_row))
    keep_dispatch, keep_aggregation = (1.0, 1.0) if scheme == "depcomm" else (1.0 - eta1, 1.0 - eta2)  # Eq. 8/9
    return CommVolume(keep_dispatch * rho * dispatch_positions * dispatch_row,
                      keep_aggregation * rho_a * updated_positions * aggregation_row)


# --------------------------------------------------------------------------- Eq. 12

def pipeline_granularity(redundancy: float | Callable[[int], float], batch_size: int, comm_time: float,
                         compute_time: float, *, overhead: float = 0.0, max_micro_batches: int = 16) -> int:
    """Number n of micro-batches minimising the two-stage (communicate, compute) pipeline time (Eq. 12).

    Splitting a batch into n micro-batches overlaps micro-batch i+1's communication with micro-batch i's
    computation, but deduplication (Alg. 2) then only works inside each micro-batch, so the volume grows.
    ``comm_time`` is the deduplicated full batch's communication time, ``compute_time`` its computation time,
    ``overhead`` the fixed cost per micro-batch. ``redundancy`` is either eta at micro-batch size m
    (a callable m -> eta(m), e.g. measured with :func:`redundancy_ratios`) or eta of the full batch, then
    modelled as shrinking linearly to 0 at one event per micro-batch. With C(n) the communication time
    at granularity n, the pipeline time is
        T(n) = (C(n) + K) / n + (n - 1) / n * max(C(n), K) + n * overhead,    K = compute_time,
    and the returned n is argmin T(n) over 1..max_micro_batches (ties: the smallest n).
    """
    def eta_at(micro_batch: int) -> float:
        if callable(redundancy):
            return float(redundancy(micro_batch))
        return redundancy * (micro_batch - 1) / max(batch_size - 1, 1)

    full_kept = 1.0 - eta_at(batch_size)
    best_n, best_time = 1, np.inf
    for n in range(1, max(1, min(max_micro_batches, batch_size)) + 1):
        micro_batch = -(-batch_size // n)
        comm = comm_time * (1.0 - eta_at(micro_batch)) / full_kept if full_kept > 0 else comm_time
        total = (comm + compute_time) / n + (n - 1) / n * max(comm, compute_time) + n * overhead
        if total < best_time - 1e-12:
            best_n, best_time = n, total
    return best_n


# --------------------------------------------------------------------------- Eq. 5

@dataclass
class BalanceReport:
    """Communication of every rank when a stream is trained under one vertex partition.

    ``matrix[r, q]``: memory rows rank r fetches from owner q (deduplicated per batch); each is also
    written back (aggregation), so rank r sends and receives ``matrix[r].sum() + matrix[:, r].sum()``.
    """

    matrix: np.ndarray
    send: np.ndarray
    receive: np.ndarray
    compute: np.ndarray

    @property
    def per_rank(self) -> np.ndarray:
        return self.send + self.receive

    @property
    def balance_cost(self) -> int:
        """Eq. 5: the largest per-rank communication."""
        return int(self.per_rank.max())

    @property
    def residual(self) -> np.ndarray:
        """Per-rank communication minus the even share (mean)."""
        return self.per_rank - self.per_rank.mean()

    @property
    def imbalance(self) -> float:
        mean = self.per_rank.mean()
        return float(self.per_rank.max() / mean) if mean > 0 else 1.0

    def summary(self) -> dict[str, float]:
        return {"balance_cost": self.balance_cost, "total": int(self.matrix.sum() * 2),
                "max_residual": float(self.residual.max()), "imbalance": self.imbalance}


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


def communication_matrix(src: np.ndarray, dst: np.ndarray, owner: np.ndarray, num_parts: int,
                         batch_size: int) -> BalanceReport:
    """Per-rank rows moved when the stream is trained in chronological batches under ``owner`` (Eq. 5).

    Event e runs on ``owner[src[e]]`` and needs the memory of ``src[e]`` (local) and ``dst[e]``; a rank
    fetches each remote row once per batch (Alg. 2) and writes it back once. Negatives and sampled
    neighbours are not modelled (they depend on the sampler, not on the partition).
    """
    owner = np.asarray(owner, dtype=np.int64)
    src, dst = _check_stream(src, dst, len(owner), num_parts)
    num_nodes = len(owner)
    batch = _batch_index(len(src), batch_size)
    worker = owner[src]
    if (int(batch[-1]) + 1 if len(batch) else 1) * num_parts * num_nodes >= 2**62:
        raise DgbenchError("stream too large for the 64-bit (batch, rank, vertex) key")
    keys = np.unique((batch * num_parts + worker) * num_nodes + dst)
    rank, vertex = (keys // num_nodes) % num_parts, keys % num_nodes
    remote = owner[vertex] != rank
    matrix = np.bincount(rank[remote] * num_parts + owner[vertex[remote]],
                         minlength=num_parts * num_parts).reshape(num_parts, num_parts)
    moved = matrix.sum(axis=1) + matrix.sum(axis=0)  # dispatch one way, aggregation back
    return BalanceReport(matrix=matrix, send=moved.copy(), receive=moved.copy(),
                         compute=np.bincount(worker, minlength=num_parts))


def balance_cost(src: np.ndarray, dst: np.ndarray, owner: np.ndarray, num_parts: int, batch_size: int) -> int:
    """Eq. 5: max over ranks of rows sent + received (see :func:`communication_matrix`)."""
    return communication_matrix(src, dst, owner, num_parts, batch_size).balance_cost


# --------------------------------------------------------------------------- partitioners

def range_partition(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int) -> np.ndarray:
    """Baseline: P contiguous vertex-id ranges of (nearly) equal size."""
    _check_stream(src, dst, num_nodes, num_parts)
    return (np.arange(num_nodes, dtype=np.int64) * num_parts) // num_nodes


def interval_partition(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int) -> np.ndarray:
    """Baseline: chronological intervals. Vertices are ordered by their first event (never-seen vertices
    last, by id) and that order is cut into P contiguous intervals of (nearly) equal vertex count."""
    src, dst = _check_stream(src, dst, num_nodes, num_parts)
    first_event = np.full(num_nodes, len(src), dtype=np.int64)
    event = np.arange(len(src), dtype=np.int64)
    np.minimum.at(first_event, np.concatenate([src, dst]), np.concatenate([event, event]))
    order = np.lexsort((np.arange(num_nodes), first_event))
    owner = np.empty(num_nodes, dtype=np.int64)
    owner[order] = (np.arange(num_nodes, dtype=np.int64) * num_parts) // num_nodes
    return owner


@dataclass
class _PairGraph:
    """Symmetric CSR of vertex pairs weighted by the number of batches in which they interact."""

    indptr: np.ndarray
    neighbors: np.ndarray
    weights: np.ndarray
    degree: np.ndarray  # total pair weight per vertex


def _pair_graph(src: np.ndarray, dst: np.ndarray, num_nodes: int, batch_size: int) -> _PairGraph:
    low, high = np.minimum(src, dst), np.maximum(src, dst)
    keep = low != high
    batch = _batch_index(len(src), batch_size)[keep]
    low, high = low[keep], high[keep]
    per_batch = np.unique((batch * num_nodes + low) * num_nodes + high)  # one per (batch, pair): Alg. 2
    pairs, weight = np.unique(per_batch % (num_nodes * num_nodes), return_counts=True)
    a, b = pairs // num_nodes, pairs % num_nodes
    rows, cols, w = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([weight, weight])
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
    return _PairGraph(indptr, cols[order], w[order].astype(np.float64),
                      np.bincount(rows, weights=w, minlength=num_nodes))


class _MinMaxState:
    """Loads under the pair surrogate of Eq. 5: a cut pair of weight w adds 2w to both owners' loads."""

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


def _flexbicut_initial(state: _MinMaxState, order: np.ndarray) -> None:
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
    """Target part whose move of v lowers (max load, total load) lexicographically the most, or None.
    ``rest[c]``: the largest load among parts other than v's part and c (they do not change)."""
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


def _reassign(state: _MinMaxState, max_passes: int) -> int:
    """Re- step of Alg. 3: passes over the vertices that could help (a neighbour part holds more of their
    pair weight, or they sit on the bottleneck rank), largest cut reduction first, moving each vertex whose
    move lowers (max load, total load); stops when a pass moves nothing."""
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


def re_flexbicut(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int, *, batch_size: int = 200,
                 compute_imbalance: float | None = 0.1, vertex_imbalance: float = 1.0,
                 max_passes: int = 20) -> np.ndarray:
    """Alg. 3 (our reading of Re-FlexBiCut): owner rank per vertex minimising the max per-rank communication.

    Surrogate of Eq. 5: vertices u, v that interact in a batch cost one fetch and one write-back, so a
    pair weighted by the number of batches in which it interacts adds 2 * weight to the load of both
    owners when cut. FlexBiCut places vertices heaviest first where the resulting maximum load is lowest
    (a flexible, min-max version of BiCut's hub-first bipartite placement); Re- then reassigns single
    vertices while that lowers (max load, total load).

    Constraints. Events run on their source's owner, so the partition is also the work split: when
    ``compute_imbalance`` is given (default 0.1) a rank computes at most (1 + compute_imbalance) * E / P
    events (without it the cheapest partition piles most events on one rank). Every rank owns at most
    (1 + vertex_imbalance) * N / P vertices (memory rows); this cap always holds. A vertex the greedy pass
    cannot fit under both caps goes to the least-computing part with room, so the compute cap can then be
    exceeded by that vertex's events.
    """
    src, dst = _check_stream(src, dst, num_nodes, num_parts)
    if num_parts == 1:
        return np.zeros(num_nodes, dtype=np.int64)
    graph = _pair_graph(src, dst, num_nodes, batch_size)
    compute_weight = np.bincount(src, minlength=num_nodes).astype(np.float64)
    compute_cap = np.inf if compute_imbalance is None else max(
        (1 + compute_imbalance) * len(src) / num_parts, compute_weight.max(initial=0))
    vertex_cap = np.ceil((1 + vertex_imbalance) * num_nodes / num_parts)
    state = _MinMaxState(graph, compute_weight, num_parts, compute_cap, vertex_cap)
    order = np.lexsort((np.arange(num_nodes), -compute_weight, -graph.degree))
    _flexbicut_initial(state, order)
    _reassign(state, max_passes)
    return state.owner
