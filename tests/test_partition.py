"""Vertex partitioning (dgbench.trainers.discrete.partition): volume model, partitioners, halo plans, local
subgraphs."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.partition import (as_snapshot_edges, block_imbalance, build_halo_plan,
                                                 build_rank_halo_plan, column_net_hypergraph, connectivity_volume,
                                                 local_subgraph, partition_vertices, partition_vertices_detailed,
                                                 range_partition, reference_exchange, vertex_weights)
from dgbench.trainers.discrete.partition import partitioners
from dgbench.store import open_store

HAS_MTKAHYPAR = partitioners._installed("mtkahypar")
HAS_PYMETIS = partitioners._installed("pymetis")
needs_mtkahypar = pytest.mark.skipif(not HAS_MTKAHYPAR, reason="mtkahypar is not installed")
needs_pymetis = pytest.mark.skipif(not HAS_PYMETIS, reason="pymetis is not installed")


def random_snapshots(seed: int, num_vertices: int, num_snapshots: int, edges_per_snapshot: int):
    """Uniform random directed edges, with self-loops and duplicates left in, plus one empty snapshot."""
    rng = np.random.default_rng(seed)
    snaps = [tuple(rng.integers(0, num_vertices, size=(2, edges_per_snapshot))) for _ in range(num_snapshots)]
    return snaps + [(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))]


def planted_snapshots(seed: int, num_vertices: int, num_snapshots: int, blocks: int, inside: float = 0.95):
    """Planted partition on shuffled ids (so contiguous ranges cannot find it): most edges stay in a block."""
    rng = np.random.default_rng(seed)
    block_of = rng.permutation(np.arange(num_vertices) % blocks)
    members = [np.flatnonzero(block_of == b) for b in range(blocks)]
    snaps = []
    for _ in range(num_snapshots):
        src = rng.integers(0, num_vertices, size=3 * num_vertices)
        dst = rng.integers(0, num_vertices, size=len(src))
        local = rng.random(len(src)) < inside
        dst[local] = [rng.choice(members[block_of[s]]) for s in src[local]]
        snaps.append((src, dst))
    return snaps


def brute_force_volume(snaps, owner) -> int:
    """Σ over (t, u) of |{owner[u]} ∪ {owner[v] : u -> v in snapshot t}| - 1, by plain loops."""
    total = 0
    for src, dst in snaps:
        readers: dict[int, set[int]] = {}
        for u, v in zip(src.tolist(), dst.tolist()):
            readers.setdefault(u, {int(owner[u])}).add(int(owner[v]))
        total += sum(len(ranks) - 1 for ranks in readers.values())
    return total


# --------------------------------------------------------------------------- volume model

@pytest.mark.parametrize("seed,num_parts", [(0, 2), (1, 3), (2, 5), (3, 8)])
def test_connectivity_volume_matches_brute_force(seed, num_parts):
    snaps = random_snapshots(seed, num_vertices=40, num_snapshots=5, edges_per_snapshot=90)
    owner = np.random.default_rng(seed + 100).integers(0, num_parts, size=40)
    expected = brute_force_volume(snaps, owner)
    assert expected > 0
    assert connectivity_volume(snaps, owner) == expected
    assert column_net_hypergraph(as_snapshot_edges(snaps, 40)).connectivity(owner) == expected


def test_persistent_edges_merge_into_weighted_nets():
    src, dst = np.array([0, 0, 1, 2, 3, 3, 4]), np.array([1, 2, 2, 0, 3, 0, 4])
    repeated = as_snapshot_edges([(src, dst)] * 4, 5)
    once = column_net_hypergraph(as_snapshot_edges([(src, dst)], 5))
    merged = column_net_hypergraph(repeated)
    # Nets of 0, 1, 2 and 3 ({3} ∪ {3, 0}); vertex 4 only reads itself: a one-pin net, dropped.
    assert merged.num_nets == once.num_nets == 4
    assert merged.weights.tolist() == [4] * 4
    owner = np.array([0, 1, 1, 0, 1])
    assert merged.connectivity(owner) == 4 * once.connectivity(owner) == connectivity_volume(repeated, owner)


# --------------------------------------------------------------------------- halo plan

@pytest.fixture(scope="module")
def random_case():
    snaps = random_snapshots(7, num_vertices=60, num_snapshots=4, edges_per_snapshot=150)
    owner = np.random.default_rng(8).integers(0, 5, size=60)
    owner[owner == 3] = 4  # rank 3 owns nothing: plans must still be consistent
    return as_snapshot_edges(snaps, 60), owner, 5


def test_plan_rows_sent_equal_connectivity_volume(random_case):
    edges, owner, num_parts = random_case
    plan = build_halo_plan(edges, owner, num_parts)
    assert plan.rows_sent() == connectivity_volume(edges, owner) > 0
    assert plan.volume([16, 8]) == plan.rows_sent() * 24


def test_every_needed_row_arrives_exactly_once(random_case):
    edges, owner, num_parts = random_case
    plan = build_halo_plan(edges, owner, num_parts)
    for t in range(edges.num_snapshots):
        for p in range(num_parts):
            into_p = owner[edges.dst[t]] == p
            needed = {u for u in edges.src[t][into_p].tolist() if owner[u] != p}
            arrived = plan.recv_vertices(t, p).tolist()
            assert len(arrived) == len(set(arrived)) and set(arrived) == needed
            assert plan.recv_counts[t, p].sum() == len(arrived)


def test_send_and_receive_lists_agree(random_case):
    edges, owner, num_parts = random_case
    plan = build_halo_plan(edges, owner, num_parts)
    for t in range(edges.num_snapshots):
        assert np.all(np.diagonal(plan.send_counts[t]) == 0)
        assert np.array_equal(plan.send_counts[t], plan.recv_counts[t].T)
        for p in range(num_parts):
            per_peer = []
            for q in range(num_parts):
                sent = plan.owned[p][plan.send_rows_to(t, p, q)]
                assert np.array_equal(sent, plan.recv_vertices_from(t, q, p))
                assert len(sent) == plan.send_counts[t, p, q]
                assert np.all(owner[sent] == p) and (q != p or len(sent) == 0)
                per_peer.append(plan.send_rows_to(t, p, q))
            assert np.array_equal(plan.send_rows(t, p), np.concatenate(per_peer))


def test_a_rank_plan_built_step_by_step_holds_its_lists_of_the_whole_plan(random_case):
    edges, owner, num_parts = random_case
    plan = build_halo_plan(edges, owner, num_parts)
    for rank in range(num_parts):
        mine = build_rank_halo_plan(zip(edges.src, edges.dst), owner, num_parts, rank)
        assert np.array_equal(mine.send_counts, plan.send_counts) and mine.rows_sent() == plan.rows_sent()
        assert np.array_equal(mine.local_row, plan.local_row)
        assert all(np.array_equal(a, b) for a, b in zip(mine.owned, plan.owned))
        for t in range(edges.num_snapshots):
            for peer in range(num_parts):
                assert np.array_equal(mine.recv_vertices_from(t, rank, peer), plan.recv_vertices_from(t, rank, peer))
                assert np.array_equal(mine.recv_vertices_from(t, peer, rank), plan.recv_vertices_from(t, peer, rank))
        others = [q for q in range(num_parts) if q != rank]
        with pytest.raises(ValueError, match="holds no lists"):
            mine.recv_vertices_from(0, others[0], others[1])


def aggregate(src, dst, coef, x, num_rows):
    y = np.zeros((num_rows, x.shape[1]))
    np.add.at(y, dst, coef[:, None] * x[src])
    return y


@pytest.mark.parametrize("method", ["random", "range", "metis"])
def test_simulated_exchange_reproduces_full_aggregation(random_case, method):
    if method == "metis" and not HAS_PYMETIS:
        pytest.skip("pymetis is not installed")
    edges, owner, num_parts = random_case
    if method != "random":
        owner = partition_vertices(edges, num_parts, method)
    plan = build_halo_plan(edges, owner, num_parts)
    rng = np.random.default_rng(3)
    for t in range(edges.num_snapshots):
        # Small integers keep every float sum exact, so the comparison can be exact too.
        x = rng.integers(-8, 8, size=(edges.num_vertices, 6)).astype(np.float64)
        coef = rng.integers(1, 4, size=len(edges.src[t])).astype(np.float64)
        expected = aggregate(edges.src[t], edges.dst[t], coef, x, edges.num_vertices)
        own = [x[plan.owned[p]] for p in range(num_parts)]
        received = reference_exchange(plan, t, own)
        for p in range(num_parts):
            sub = local_subgraph(edges, plan, p, t)
            x_local = np.concatenate([own[p], received[p]])
            assert x_local.shape[0] == sub.num_rows
            y_own = aggregate(sub.src, sub.dst, coef[sub.edge_ids], x_local, sub.num_own)
            assert np.array_equal(y_own, expected[plan.owned[p]])


# --------------------------------------------------------------------------- partitioners

@pytest.fixture(scope="module")
def planted():
    return as_snapshot_edges(planted_snapshots(11, num_vertices=256, num_snapshots=4, blocks=4), 256)


@pytest.fixture(scope="module")
def planted_results(planted):
    return {m: partition_vertices_detailed(planted, 4, m, seed=0)
            for m in ("range", "metis", "hypergraph") if m in partitioners.available_methods()}


def test_partitions_beat_range_on_planted_partition(planted, planted_results):
    volumes = {m: r.connectivity for m, r in planted_results.items()}
    assert volumes.keys() > {"range"}, "no real partitioner installed"
    for method, volume in volumes.items():
        assert volume == connectivity_volume(planted, planted_results[method].owner)
        if method != "range":
            assert volume < 0.5 * volumes["range"], volumes


@needs_mtkahypar
def test_hypergraph_reports_the_connectivity_it_minimised(planted_results):
    result = planted_results["hypergraph"]
    assert result.method == "hypergraph"
    assert result.reported_connectivity == result.connectivity


def test_balance_within_imbalance(planted, planted_results):
    weights = vertex_weights(planted)
    for method, result in planted_results.items():
        assert np.bincount(result.owner, minlength=4).min() > 0
        assert result.imbalance == pytest.approx(block_imbalance(result.owner, weights, 4))
        # METIS honours ufactor only approximately, range up to one vertex's weight.
        slack = {"hypergraph": 1e-9, "metis": 0.02, "range": weights.max() / (weights.sum() / 4)}[method]
        assert result.imbalance <= 0.03 + slack, (method, result.imbalance)


@needs_mtkahypar
def test_hypergraph_is_deterministic_and_the_seed_matters():
    edges = as_snapshot_edges(random_snapshots(5, num_vertices=120, num_snapshots=3, edges_per_snapshot=240))
    first = partition_vertices(edges, 3, "hypergraph", seed=4)
    assert np.array_equal(first, partition_vertices(edges, 3, "hypergraph", seed=4))
    assert not np.array_equal(first, partition_vertices(edges, 3, "hypergraph", seed=5))


@needs_pymetis
def test_metis_is_deterministic_given_the_seed(planted):
    assert np.array_equal(partition_vertices(planted, 4, "metis", seed=2),
                          partition_vertices(planted, 4, "metis", seed=2))


def test_range_blocks_are_contiguous_and_weight_balanced():
    weights = np.array([5, 1, 1, 1, 1, 1, 5, 5, 1, 1, 1, 1])
    owner = range_partition(weights, 3)
    assert np.all(np.diff(owner) >= 0) and set(owner.tolist()) == {0, 1, 2}
    assert np.bincount(owner, weights=weights).max() <= weights.sum() / 3 + weights.max()


def test_single_part_owns_everything_and_sends_nothing(random_case):
    edges, _, _ = random_case
    owner = partition_vertices(edges, 1)
    assert np.array_equal(owner, np.zeros(edges.num_vertices)) and connectivity_volume(edges, owner) == 0


def test_auto_falls_back_with_a_warning(monkeypatch, caplog, random_case):
    edges, _, _ = random_case
    monkeypatch.setattr(partitioners, "_installed", lambda module: False)
    with caplog.at_level(logging.WARNING, logger="dgbench.trainers.discrete.partition.partitioners"):
        result = partition_vertices_detailed(edges, 3, "auto")
    assert result.method == "range" and "falls back to 'range'" in caplog.text
    assert result.requested == "auto" and result.fallback
    assert not partition_vertices_detailed(edges, 3, "range").fallback  # asked for, not fallen back to
    assert np.array_equal(result.owner, range_partition(vertex_weights(edges), 3))
    with pytest.raises(DgbenchError, match="needs mtkahypar"):
        partition_vertices(edges, 3, "hypergraph")


def test_store_and_snapshot_list_give_the_same_partition(esdg_store):
    store = open_store(esdg_store)
    as_list = [(s.src, s.dst) for s in store.snapshots()]
    from_store = partition_vertices(store, 4, "range")
    assert np.array_equal(from_store, partition_vertices(as_list, 4, "range", num_vertices=store.num_nodes))
    assert build_halo_plan(store, from_store, 4).rows_sent() == brute_force_volume(as_list, from_store)


@pytest.mark.parametrize("call,message", [
    (lambda e: partition_vertices([(np.array([0, 5]), np.array([1, 2]))], 2, num_vertices=4), "field 'src'"),
    (lambda e: partition_vertices([(np.array([0, 1]), np.array([1]))], 2), "2 src but 1 dst"),
    (lambda e: partition_vertices(e, e.num_vertices + 1), "into 61 parts"),
    (lambda e: partition_vertices(e, 2, "spectral"), "unknown partitioning method"),
    (lambda e: build_halo_plan(e, np.zeros(3, dtype=int), 2), "shape \\(60,\\)"),
    (lambda e: build_halo_plan(e, np.full(60, 2), 2), "ranks must lie in 0..1"),
])
def test_bad_input_gives_one_clear_error(random_case, call, message):
    with pytest.raises(DgbenchError, match=message):
        call(random_case[0])


def test_a_fallen_back_vertex_partition_is_recorded_and_not_ranked_officially(monkeypatch, esdg_store):
    from dgbench.leaderboard.board import ranking_problem
    from dgbench.trainers.discrete.data import DiscreteData
    from dgbench.trainers.discrete.esdg.vertex import Vertex, VertexOptions
    data = DiscreteData(esdg_store)
    installed = Vertex().partition(data, 2, VertexOptions()).report
    assert installed["requested"] == "auto" and installed["method"] == "hypergraph" and not installed["fallback"]
    monkeypatch.setattr(partitioners, "_installed", lambda module: False)
    fallen = Vertex().partition(data, 2, VertexOptions()).report
    assert fallen["method"] == "range" and fallen["fallback"]
    for report, ranked in ((installed, True), (fallen, False)):
        record = {"extra": {"partition": report}}
        for track in ("throughput", "scaling"):
            assert (ranking_problem(track, record, None) is None) == ranked
    assert "fell back" in ranking_problem("throughput", {"extra": {"partition": fallen}}, None)
