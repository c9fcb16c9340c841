"""DGC's partitioning by graph chunks (PGC, Chen et al., DGC §4): chunk generation and assignment.

* :func:`build_supergraph`: the super-graph whose vertices are the *instances* v_{i,t} (vertex i
  present in snapshot t), with the snapshots' spatial edges plus *virtual temporal edges* between a
  vertex's consecutive appearances (§4.1), instance ids as Eq. 1 numbers the initial labels.
* :class:`TrafficProfile`: what crosses a cut edge for one model (§4.1: "weight(c) may vary depending
  on the specific DGNN model"): an edge's weight is the bytes that would cross if it were cut.
* :func:`label_propagation`: chunk generation (§4.1, Eq. 1-2) with a maximum chunk size.
* :func:`chunk_pair_bytes`: h(a, a') of Alg. 1, the communication cost between two chunks.
* :func:`assign_chunks`: Alg. 1 / Eq. 3, chunk -> GPU (rank).
* :func:`cut_rows` / :func:`predicted_bytes`: the rows and bytes a partition of the instances makes
  cross (any instance -> part map: chunks, ranks, and PSS / PTS written as instance maps).

Choices where the paper says nothing (also in docs/discrete-schemes.md, DGC section):

* V_t: with ``presence="edges"`` V_t is the set of vertices with an edge (either end) in snapshot t;
  ``presence="all"`` is every vertex in every snapshot (the harness's all-vertex layout, instance id
  t·N + i); ``alive`` (presence ``lifetime``, e.g. a `nonuniform` store's vertex lifetimes, see
  trainers/discrete/presence.py) gives V_t explicitly.
* Temporal edges link consecutive appearances only (also for attention, which reads every earlier
  instance: the prediction :func:`cut_rows` counts what attention really reads; LPA's super-graph
  keeps the consecutive links). Their weight is what cutting that link moves (§4.1, weights as "the
  total amount of traffic"): a recurrent module's link moves one state; attention's link into the
  k-th appearance of a vertex (k earlier instances) weighs k states, since a cut there sends all k
  earlier instances to the later side (:func:`temporal_link_weights`).
* A spatial edge src -> dst (row dst aggregates row src) weighs ``profile.spatial_edge_bytes``; both
  directions present weigh twice; self loops cost nothing. Duplicate edges count once.
* Label propagation (Eq. 2) is synchronous: every instance picks its new label from its neighbours'
  labels of the previous iteration. Plain synchronous propagation never settles on a bipartite
  component (the two ends of an isolated edge swap labels forever), so each instance also counts
  its *own* label with the weight of its heaviest incident edge: a tie between its own label and a
  neighbour's then goes by the tie rule, and a clique settles in one iteration. Ties between labels
  of equal weight go to the label of highest priority, a permutation of the labels drawn from the
  seed (deterministic per seed; no drift toward low ids). The maximum chunk size is enforced as
  "constraining the propagation of some labels if they are attached to too many vertices": a label
  held by ``max_chunk_size`` instances cannot be adopted, and when more instances want a label in
  one iteration than it has room for, the heaviest (then lowest id) are admitted and the others keep
  their label — so no chunk ever exceeds the cap. Stop when no label changes, or after
  ``max_iterations`` (50).
* Alg. 1's degenerate cases (an empty Q_m, or no shared edges, scores 0, so at the start every GPU
  ties, and a GPU already above ḡ with no shared edges, 0, would outrank one below with shared
  edges, negative): ḡ = Σ_a g_a / |M|; a GPU whose load would exceed ḡ·(1 + slack) is avoided while
  any other can take the chunk; if the best score is ≤ 0 the least-loaded GPU gets it, and among
  GPUs tied at the best score the least-loaded (then the lowest index) wins.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.partition.edges import EdgeSource, SnapshotEdges, as_snapshot_edges

PRESENCE_EDGES, PRESENCE_ALL = "edges", "all"
PRESENCE_LIFETIME = "lifetime"  # V_t given by the caller (build_supergraph's ``alive``)
PRESENCES = (PRESENCE_EDGES, PRESENCE_ALL)
REACH_PREVIOUS, REACH_ALL = "previous", "all"
DEFAULT_MAX_ITERATIONS = 50
DEFAULT_MAX_LEVELS = 10
DEFAULT_SLACK = 0.05


# --------------------------------------------------------------------------- traffic per model

@dataclass(frozen=True)
class TrafficProfile:
    """Bytes a cut super-graph edge moves per forward pass, for one model.

    ``spatial_widths``: one entry per structure-encoder exchange (a graph aggregation that reads
    neighbours' rows; the precomputed first Ã X⁰ reads none), the row width it moves.
    ``temporal_widths``: one entry per time-encoder exchange, the width a cut temporal edge moves
    (a GRU's carry h; an LSTM's (h, c) = 2·hidden; attention's input embedding).
    ``temporal_reach``: ``"previous"`` (a recurrent module reads (i, t_prev) only) or ``"all"``
    (temporal self-attention reads every earlier instance of i).
    """

    spatial_widths: tuple[int, ...]
    temporal_widths: tuple[int, ...]
    temporal_reach: str = REACH_PREVIOUS
    bytes_per_element: int = 4

    def __post_init__(self) -> None:
        if self.temporal_reach not in (REACH_PREVIOUS, REACH_ALL):
            raise DgbenchError(f"temporal_reach must be '{REACH_PREVIOUS}' or '{REACH_ALL}', "
                               f"got {self.temporal_reach!r}")
        if any(w < 0 for w in (*self.spatial_widths, *self.temporal_widths)):
            raise DgbenchError("traffic widths must be non-negative")

    @property
    def spatial_edge_bytes(self) -> int:
        """Bytes one cut spatial dependency (a row read by another part) moves over all exchanges."""
        return sum(self.spatial_widths) * self.bytes_per_element

    @property
    def temporal_edge_bytes(self) -> int:
        """Bytes one cut temporal dependency moves over all exchanges."""
        return sum(self.temporal_widths) * self.bytes_per_element


# --------------------------------------------------------------------------- the super-graph

@dataclass(frozen=True)
class SuperGraph:
    """Instances v_{i,t} and their dependencies; instance ids follow Eq. 1 (0-based):
    id(i, t) = Σ_{τ<t} |V_τ| + (position of i in V_t, ascending)."""

    num_vertices: int
    num_snapshots: int
    presence: str
    offsets: np.ndarray  # (T + 1,): Σ_{τ<t} |V_τ|
    vertex: np.ndarray  # instance -> vertex id i
    step: np.ndarray  # instance -> snapshot t
    spatial_src: np.ndarray  # distinct directed instance pairs, dst reads src, no self loops
    spatial_dst: np.ndarray
    temporal_src: np.ndarray  # (i, t_prev) -> (i, t): consecutive appearances of one vertex
    temporal_dst: np.ndarray
    snapshot_edges: tuple[int, ...] = field(default=())  # spatial pairs per snapshot (for cost features)

    @property
    def num_instances(self) -> int:
        return len(self.vertex)

    def present(self, t: int) -> np.ndarray:
        """V_t: the vertices present in snapshot t, ascending."""
        return self.vertex[self.offsets[t]:self.offsets[t + 1]]

    def instances(self, t: int, vertices: np.ndarray) -> np.ndarray:
        """Instance ids of ``vertices`` in snapshot t (each must be present there)."""
        present = self.present(t)
        vertices = np.asarray(vertices, dtype=np.int64)
        where = np.searchsorted(present, vertices)
        ok = where < len(present)
        ok[ok] = present[where[ok]] == vertices[ok]
        if not ok.all():
            raise DgbenchError(f"snapshot {t}: vertex {int(vertices[~ok][0])} is not present (V_t)")
        return self.offsets[t] + where


def present_vertices(edges: SnapshotEdges, presence: str = PRESENCE_EDGES) -> list[np.ndarray]:
    """V_t per snapshot: vertices with an edge in snapshot t (``edges``) or every vertex (``all``)."""
    if presence not in PRESENCES:
        raise DgbenchError(f"presence must be one of {', '.join(PRESENCES)}, got {presence!r}")
    if presence == PRESENCE_ALL:
        return [np.arange(edges.num_vertices, dtype=np.int64) for _ in range(edges.num_snapshots)]
    return [np.unique(np.concatenate([s, d])) for s, d in zip(edges.src, edges.dst)]


def build_supergraph(source: EdgeSource, presence: str = PRESENCE_EDGES,
                     num_vertices: int | None = None, alive: np.ndarray | None = None) -> SuperGraph:
    """The super-graph of §4.1 over the snapshots of ``source``. ``alive`` ([T, N] bool, e.g. a
    `nonuniform` store's vertex lifetimes) gives V_t explicitly (presence ``lifetime``): every edge
    must join alive vertices."""
    edges = as_snapshot_edges(source, num_vertices)
    if alive is None:
        present = present_vertices(edges, presence)
    else:
        present = [np.flatnonzero(row).astype(np.int64) for row in np.asarray(alive, bool)]
        presence = PRESENCE_LIFETIME
        if len(present) != edges.num_snapshots or any(not np.asarray(row, bool)[np.r_[s, d]].all()
                                                      for row, s, d in zip(alive, edges.src, edges.dst)):
            raise DgbenchError("alive: one row per snapshot, and every edge must join alive vertices")
    offsets = np.r_[0, np.cumsum([len(v) for v in present])].astype(np.int64)
    vertex = np.concatenate(present) if present else np.empty(0, np.int64)
    step = np.repeat(np.arange(edges.num_snapshots, dtype=np.int64), np.diff(offsets))
    srcs, dsts, per_snapshot = [], [], []
    n = np.int64(edges.num_vertices)
    for t, (s, d) in enumerate(zip(edges.src, edges.dst)):
        keep = s != d
        pairs = np.unique(s[keep] * n + d[keep])
        ps, pd = np.divmod(pairs, n)
        srcs.append(offsets[t] + np.searchsorted(present[t], ps))
        dsts.append(offsets[t] + np.searchsorted(present[t], pd))
        per_snapshot.append(len(pairs))
    order = np.lexsort((step, vertex))  # each vertex's instances in time order
    same = vertex[order[1:]] == vertex[order[:-1]]
    return SuperGraph(edges.num_vertices, edges.num_snapshots, presence, offsets, vertex, step,
                      np.concatenate(srcs), np.concatenate(dsts), order[:-1][same], order[1:][same],
                      tuple(per_snapshot))


def sequence_positions(graph: SuperGraph) -> np.ndarray:
    """Position of every instance in its vertex's sequence of appearances (0 = first)."""
    order = np.lexsort((graph.step, graph.vertex))
    first = np.r_[True, graph.vertex[order[1:]] != graph.vertex[order[:-1]]] if len(order) else np.zeros(0, bool)
    starts = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0)) if len(order) else order
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order)) - starts
    return position


def temporal_link_weights(graph: SuperGraph, profile: TrafficProfile) -> np.ndarray:
    """Bytes cutting each temporal link (i, t_prev) -> (i, t) moves: one state for a recurrent module;
    for attention (reach "all") the k instances before (i, t) in i's sequence, k states (§4.1)."""
    per_state = np.full(len(graph.temporal_src), profile.temporal_edge_bytes, np.float64)
    if profile.temporal_reach != REACH_ALL:
        return per_state
    return per_state * sequence_positions(graph)[graph.temporal_dst]


def weighted_edges(graph: SuperGraph, profile: TrafficProfile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The undirected weighted super-graph (u < v, bytes if cut): spatial + virtual temporal edges."""
    k = np.int64(max(graph.num_instances, 1))
    lo = np.concatenate([np.minimum(graph.spatial_src, graph.spatial_dst), graph.temporal_src])
    hi = np.concatenate([np.maximum(graph.spatial_src, graph.spatial_dst), graph.temporal_dst])
    weight = np.concatenate([np.full(len(graph.spatial_src), profile.spatial_edge_bytes, np.float64),
                             temporal_link_weights(graph, profile)])
    keys, inverse = np.unique(lo * k + hi, return_inverse=True)
    summed = np.bincount(inverse, weights=weight, minlength=len(keys))
    u, v = np.divmod(keys, k)
    keep = summed > 0  # an edge that costs nothing to cut does not pull labels
    return u[keep], v[keep], summed[keep]


# --------------------------------------------------------------------------- chunk generation

@dataclass(frozen=True)
class Chunks:
    """Chunk of every instance (ids 0..C-1, numbered by their smallest instance) and how LPA ran."""

    chunk_of: np.ndarray
    max_chunk_size: int
    iterations: tuple[int, ...]  # label-propagation iterations of each coarsening level
    converged: bool  # every level stopped because no label changed (not at the iteration cap)
    seed: int

    @property
    def num_chunks(self) -> int:
        return int(self.chunk_of.max()) + 1 if len(self.chunk_of) else 0

    @property
    def sizes(self) -> np.ndarray:
        return np.bincount(self.chunk_of, minlength=self.num_chunks)

    def members(self) -> list[np.ndarray]:
        """Instance ids of each chunk, ascending."""
        order = np.argsort(self.chunk_of, kind="stable")
        return np.split(order, np.cumsum(self.sizes)[:-1])

    def report(self) -> dict:
        """What a result record keeps of the chunking."""
        sizes = self.sizes
        return {"chunks": self.num_chunks, "max_chunk_size": self.max_chunk_size,
                "size_min": int(sizes.min()) if len(sizes) else 0, "size_max": int(sizes.max()) if len(sizes) else 0,
                "size_mean": float(sizes.mean()) if len(sizes) else 0.0, "levels": len(self.iterations),
                "iterations": list(self.iterations), "converged": self.converged, "seed": self.seed}


def default_max_chunk_size(num_instances: int, parts: int) -> int:
    """⌈Σ_t |V_t| / (8P)⌉: at least 8 chunks per rank for Alg. 1 to balance (the paper gives no cap)."""
    return max(1, -(-num_instances // (8 * max(parts, 1))))


def label_propagation(graph: SuperGraph, profile: TrafficProfile, max_chunk_size: int, seed: int = 0,
                      max_iterations: int = DEFAULT_MAX_ITERATIONS, max_levels: int = DEFAULT_MAX_LEVELS) -> Chunks:
    """Chunk generation (§4.1): labels start unique (Eq. 1) and each iteration every instance takes
    the label of maximum weight among its neighbours' (Eq. 2), until no label changes.

    Graph coarsening [2, 15, 20, 34] repeats this on the contracted graph: once a level has settled,
    every label becomes one node (its size the instances it holds, its edges the summed weights to
    other labels) and propagation runs again, until a level merges nothing or ``max_levels`` ran.
    Level 0 alone is the paper's single pass (``max_levels=1``). See the module docstring for the
    rules the paper leaves open (self term, ties, the cap, synchronous updates).
    """
    if max_chunk_size < 1:
        raise DgbenchError(f"max_chunk_size must be at least 1, got {max_chunk_size}")
    u, v, w = weighted_edges(graph, profile)
    priority = label_priority(graph, seed)
    chunk = np.arange(graph.num_instances, dtype=np.int64)  # instance -> node of the current level
    size = np.ones(graph.num_instances, dtype=np.int64)
    iterations, converged = [], True
    for _ in range(max(1, max_levels)):
        label, used, settled = _propagate(u, v, w, size, priority, max_chunk_size, max_iterations)
        iterations.append(used)
        converged &= settled
        node = _compact(label)
        if node.max(initial=-1) + 1 == len(size):  # nothing merged: coarsening is done
            break
        chunk = node[chunk]
        u, v, w = _contract(node, u, v, w)
        size = np.bincount(node, weights=size).astype(np.int64)
        best = np.full(len(size), np.iinfo(np.int64).max)
        np.minimum.at(best, node, priority)
        priority = best
    return Chunks(_compact(chunk), max_chunk_size, tuple(iterations), converged, seed)


def _propagate(u: np.ndarray, v: np.ndarray, w: np.ndarray, size: np.ndarray, priority: np.ndarray, cap: int,
               max_iterations: int) -> tuple[np.ndarray, int, bool]:
    """Synchronous weighted label propagation over nodes 0..n-1 (labels are node ids, Eq. 1-2) with
    node sizes and a cap on the summed size of a label; returns (labels, iterations, converged)."""
    n = len(size)
    receiver, sender, weight = np.concatenate([v, u]), np.concatenate([u, v]), np.concatenate([w, w])
    self_weight = np.zeros(n)
    np.maximum.at(self_weight, receiver, weight)
    linked = np.flatnonzero(self_weight > 0)
    receiver = np.concatenate([receiver, linked])  # the self term: a node's own label, at the weight
    sender = np.concatenate([sender, linked])  # of its heaviest edge (stops the two-node swap)
    weight = np.concatenate([weight, self_weight[linked]])
    label = np.arange(n, dtype=np.int64)
    held = size.copy()  # summed size of the nodes holding each label
    nn = np.int64(max(n, 1))
    for iteration in range(1, max_iterations + 1):
        keys, inverse = np.unique(receiver * nn + label[sender], return_inverse=True)
        totals = np.bincount(inverse, weights=weight, minlength=len(keys))
        who, candidate = np.divmod(keys, nn)
        allowed = (held[candidate] + size[who] <= cap) | (candidate == label[who])
        who, candidate, totals = who[allowed], candidate[allowed], totals[allowed]
        order = np.lexsort((priority[candidate], -totals, who))
        first = order[np.r_[True, who[order][1:] != who[order][:-1]]] if len(order) else order
        movers = candidate[first] != label[who[first]]
        who, wanted, gain = who[first][movers], candidate[first][movers], totals[first][movers]
        admitted = _admit(wanted, gain, who, size[who], cap - held[wanted])
        if not admitted.any():
            return label, iteration, True
        label[who[admitted]] = wanted[admitted]
        held = np.bincount(label, weights=size, minlength=n).astype(np.int64)
    return label, max_iterations, False


def _contract(node: np.ndarray, u: np.ndarray, v: np.ndarray, w: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges between the next level's nodes: endpoints mapped, internal edges dropped, parallel summed."""
    a, b = node[u], node[v]
    keep = a != b
    lo, hi = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    num = np.int64(max(int(node.max(initial=0)) + 1, 1))
    keys, inverse = np.unique(lo * num + hi, return_inverse=True)
    return keys // num, keys % num, np.bincount(inverse, weights=w[keep], minlength=len(keys))


def label_priority(graph: SuperGraph, seed: int) -> np.ndarray:
    """Tie-break order of the labels (lower wins): earlier snapshot first, then a seeded order of the
    vertices. Time first keeps Eq. 1's order along every sequence, so a label can run the whole
    length of a temporal chain instead of stopping at every local priority optimum."""
    order = np.random.default_rng(seed).permutation(graph.num_vertices).astype(np.int64)
    return graph.step * np.int64(graph.num_vertices) + order[graph.vertex]


def _admit(wanted: np.ndarray, gain: np.ndarray, who: np.ndarray, node_size: np.ndarray,
           room: np.ndarray) -> np.ndarray:
    """Which nodes asking for ``wanted`` labels get them: per label, the heaviest (then lowest id)
    while their summed size fits the label's free room (its holders are counted as staying)."""
    order = np.lexsort((who, -gain, wanted))
    sorted_wanted, sorted_size = wanted[order], node_size[order]
    starts = np.r_[0, np.flatnonzero(sorted_wanted[1:] != sorted_wanted[:-1]) + 1] if len(order) else order
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    running = np.cumsum(sorted_size)
    within = running - (running[group_start] - sorted_size[group_start])  # size admitted up to and incl. this one
    admitted = np.zeros(len(order), dtype=bool)
    admitted[order] = within <= room[order]
    return admitted


def _compact(label: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..C-1 in the order of each label's smallest instance."""
    if not len(label):
        return label
    _, first, inverse = np.unique(label, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse]


# --------------------------------------------------------------------------- what a cut moves

@dataclass(frozen=True)
class CutRows:
    """Rows crossing between parts for one instance -> part map: ``spatial[p, q]`` distinct
    instances of part p that part q reads through a spatial edge (one row per exchange width);
    ``temporal[p, q]`` the same through temporal dependencies."""

    spatial: np.ndarray
    temporal: np.ndarray


def _distinct_pairs(sender: np.ndarray, receiving_part: np.ndarray, part: np.ndarray,
                    num_parts: int) -> np.ndarray:
    """(num_parts, num_parts) counts of distinct (sender instance, receiving part) pairs that cross."""
    crossing = part[sender] != receiving_part
    sender, receiving_part = sender[crossing], receiving_part[crossing]
    keys = np.unique(sender * np.int64(num_parts) + receiving_part)
    sent_from = part[keys // num_parts]
    return np.bincount(sent_from * num_parts + keys % num_parts,
                       minlength=num_parts * num_parts).reshape(num_parts, num_parts)


def attention_reads(graph: SuperGraph, label: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Attention reach: instance (i, t') is read by every other label holding a later instance of i.

    Returns (sender label, reader label, rows) triples whose rows sum to the distinct
    (instance, reading label) pairs. Each vertex's sequence is cut into runs of one label, so the
    work is quadratic in runs per sequence, not in sequence length.
    """
    order = np.lexsort((graph.step, graph.vertex))
    vertex, held = graph.vertex[order], np.asarray(label, dtype=np.int64)[order]
    if not len(order):
        empty = np.empty(0, np.int64)
        return empty, empty, empty
    new_run = np.r_[True, (vertex[1:] != vertex[:-1]) | (held[1:] != held[:-1])]
    run_start = np.flatnonzero(new_run)
    run_length = np.diff(np.r_[run_start, len(order)])
    run_vertex, run_label = vertex[run_start], held[run_start]
    new_vertex = np.r_[True, run_vertex[1:] != run_vertex[:-1]]
    first_run = np.flatnonzero(new_vertex)[np.cumsum(new_vertex) - 1]  # first run of each run's vertex
    key = run_vertex * np.int64(int(held.max()) + 1) + run_label
    _, from_end = np.unique(key[::-1], return_index=True)
    last = np.sort(len(key) - 1 - from_end)  # the last run of every (vertex, label)
    count = last - first_run[last]
    reader = np.repeat(last, count)
    earlier = np.repeat(first_run[last], count) + np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    keep = run_label[earlier] != run_label[reader]
    return run_label[earlier][keep], run_label[reader][keep], run_length[earlier][keep]


def cut_rows(graph: SuperGraph, profile: TrafficProfile, part: np.ndarray, num_parts: int | None = None) -> CutRows:
    """The rows that cross between parts when instance x lives on ``part[x]`` (the halo volume)."""
    part = np.asarray(part, dtype=np.int64)
    if part.shape != (graph.num_instances,):
        raise DgbenchError(f"part must give one part per instance ({graph.num_instances}), got shape {part.shape}")
    num_parts = int(part.max()) + 1 if num_parts is None else num_parts
    spatial = _distinct_pairs(graph.spatial_src, part[graph.spatial_dst], part, num_parts)
    if profile.temporal_reach == REACH_PREVIOUS:
        temporal = _distinct_pairs(graph.temporal_src, part[graph.temporal_dst], part, num_parts)
    else:
        sender, reader, rows = attention_reads(graph, part)
        temporal = np.bincount(sender * num_parts + reader, weights=rows,
                               minlength=num_parts * num_parts).astype(np.int64).reshape(num_parts, num_parts)
    return CutRows(spatial, temporal)


def predicted_bytes(rows: CutRows, profile: TrafficProfile) -> dict[str, int]:
    """Forward bytes per epoch the cut moves: spatial halo rows × Σ spatial widths, temporal likewise
    (the backward pass returns one gradient row per row sent)."""
    return {"spatial": int(rows.spatial.sum()) * profile.spatial_edge_bytes,
            "temporal": int(rows.temporal.sum()) * profile.temporal_edge_bytes}


@dataclass(frozen=True)
class ChunkPairs:
    """h(a, a') of Alg. 1 as a symmetric sparse list: for every unordered pair of chunks that share a
    cut edge, the bytes crossing between them in both directions."""

    a: np.ndarray
    b: np.ndarray
    bytes: np.ndarray

    def dense(self, num_chunks: int) -> np.ndarray:
        out = np.zeros((num_chunks, num_chunks))
        out[self.a, self.b] = self.bytes
        out[self.b, self.a] = self.bytes
        return out


def chunk_pair_bytes(graph: SuperGraph, profile: TrafficProfile, chunk_of: np.ndarray) -> ChunkPairs:
    """h(a, a') = bytes that cross between chunks a and a' if they sit on different GPUs: distinct
    (instance, reading chunk) pairs of both directions, times the profile's widths."""
    chunk_of = np.asarray(chunk_of, dtype=np.int64)
    num = np.int64(max(int(chunk_of.max()) + 1 if len(chunk_of) else 0, 1))
    senders, readers, values = [], [], []
    dependencies = [(graph.spatial_src, graph.spatial_dst, profile.spatial_edge_bytes)]
    if profile.temporal_reach == REACH_PREVIOUS:
        dependencies.append((graph.temporal_src, graph.temporal_dst, profile.temporal_edge_bytes))
    for sender, reader, width in dependencies:
        crossing = chunk_of[sender] != chunk_of[reader]
        keys = np.unique(sender[crossing] * num + chunk_of[reader[crossing]])
        senders.append(chunk_of[keys // num])
        readers.append(keys % num)
        values.append(np.full(len(keys), float(width)))
    if profile.temporal_reach == REACH_ALL:
        sender, reader, rows = attention_reads(graph, chunk_of)
        senders.append(sender)
        readers.append(reader)
        values.append(rows * float(profile.temporal_edge_bytes))
    src, dst, val = np.concatenate(senders), np.concatenate(readers), np.concatenate(values)
    keep = val > 0
    lo, hi = np.minimum(src, dst)[keep], np.maximum(src, dst)[keep]
    keys, inverse = np.unique(lo * num + hi, return_inverse=True)
    summed = np.bincount(inverse, weights=val[keep], minlength=len(keys))
    return ChunkPairs(keys // num, keys % num, summed)


# --------------------------------------------------------------------------- chunk assignment

@dataclass(frozen=True)
class Assignment:
    """GPU (rank) of every chunk (Alg. 1's x_a) and the predicted load per rank."""

    rank_of_chunk: np.ndarray
    load: np.ndarray
    average: float  # ḡ

    @property
    def imbalance(self) -> float:
        """Predicted λ = max / min rank load (§2.2.2)."""
        return float(self.load.max() / self.load.min()) if self.load.min() > 0 else float("inf")


def assign_chunks(workload: np.ndarray, pairs: ChunkPairs, parts: int, slack: float = DEFAULT_SLACK) -> Assignment:
    """Alg. 1: chunks in decreasing predicted workload g_a; each goes to
    argmax_m s_m = (ḡ - Σ_{a'∈Q_m} g_{a'}) · Σ_{a'∈Q_m} h(a, a') (Eq. 3), with the degenerate-case
    rules of the module docstring."""
    workload = np.asarray(workload, dtype=np.float64)
    if parts < 1:
        raise DgbenchError(f"need at least one GPU to assign chunks to, got {parts}")
    if (workload < 0).any() or not np.isfinite(workload).all():
        raise DgbenchError("chunk workloads must be finite and non-negative")
    num = len(workload)
    neighbours = _neighbour_lists(pairs, num)
    average = float(workload.sum() / parts)
    limit = average * (1.0 + slack)
    load = np.zeros(parts)
    affinity = np.zeros((num, parts))  # Σ_{a'∈Q_m} h(a, a'), kept current as chunks are placed
    rank_of = np.full(num, -1, dtype=np.int64)
    for a in np.argsort(-workload, kind="stable"):
        m = _best_gpu(workload[a], load, affinity[a], average, limit)
        rank_of[a] = m
        load[m] += workload[a]
        others, cost = neighbours[a]
        affinity[others, m] += cost
    return Assignment(rank_of, load, average)


def _best_gpu(g: float, load: np.ndarray, affinity: np.ndarray, average: float, limit: float) -> int:
    eligible = load + g <= limit
    if not eligible.any():
        eligible[:] = True
    score = np.where(eligible, (average - load) * affinity, -np.inf)
    best = score.max()
    tied = eligible & (score == best) if best > 0 else eligible
    candidates = np.flatnonzero(tied)
    return int(candidates[np.argmin(load[candidates])])  # least loaded, then lowest index


def _neighbour_lists(pairs: ChunkPairs, num: int) -> list[tuple[np.ndarray, np.ndarray]]:
    a = np.concatenate([pairs.a, pairs.b]).astype(np.int64)
    b = np.concatenate([pairs.b, pairs.a]).astype(np.int64)
    cost = np.concatenate([pairs.bytes, pairs.bytes])
    order = np.argsort(a, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(a, minlength=num))]
    return [(b[order[bounds[i]:bounds[i + 1]]], cost[order[bounds[i]:bounds[i + 1]]]) for i in range(num)]


# --------------------------------------------------------------------------- the baselines as instance maps

PSS_LAYOUTS = ("contiguous", "interleaved")


def pss_parts(graph: SuperGraph, parts: int, layout: str = "contiguous") -> np.ndarray:
    """PSS (§2.2.2), "the same number of snapshots" per GPU; part of every instance. ``contiguous``:
    equal ranges of consecutive snapshots; ``interleaved``: snapshot t on rank t mod P (the paper says
    neither; §7.2's PSS traffic growing with the snapshot count fits the interleaved one for a GRU/LSTM,
    docs/discrete-schemes.md)."""
    if layout == "interleaved":
        return (graph.step % parts).astype(np.int64)
    if layout != "contiguous":
        raise ValueError(f"unknown PSS layout {layout!r}: one of {PSS_LAYOUTS}")
    bounds = np.r_[0, np.cumsum([len(c) for c in np.array_split(np.arange(graph.num_snapshots), parts)])]
    return np.searchsorted(bounds, graph.step, side="right") - 1


def pts_vertex_owner(num_vertices: int, parts: int) -> np.ndarray:
    """PTS (§2.2.2): every GPU gets the same number of temporal sequences (contiguous vertex ranges)."""
    return np.repeat(np.arange(parts, dtype=np.int64), [len(c) for c in np.array_split(np.arange(num_vertices), parts)])


def pts_parts(graph: SuperGraph, parts: int) -> np.ndarray:
    """PTS as an instance map: an instance lives with its vertex's sequence."""
    return pts_vertex_owner(graph.num_vertices, parts)[graph.vertex]
