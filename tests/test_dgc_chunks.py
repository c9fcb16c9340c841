"""DGC chunk generation (§4.1), assignment (Alg. 1) and the bytes a chunk cut makes cross."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.dgc.chunks import (ChunkPairs, TrafficProfile, assign_chunks, build_supergraph,
                                                  chunk_pair_bytes, cut_rows, label_propagation, predicted_bytes,
                                                  pss_parts, pts_parts)

SPATIAL_HEAVY = TrafficProfile(spatial_widths=(8, 8), temporal_widths=(4,))
TEMPORAL_HEAVY = TrafficProfile(spatial_widths=(1,), temporal_widths=(16,))
ATTENTION = TrafficProfile(spatial_widths=(4,), temporal_widths=(4,), temporal_reach="all")


def clique_edges(vertices: list[int]) -> tuple[np.ndarray, np.ndarray]:
    src, dst = zip(*[(u, v) for u in vertices for v in vertices if u != v])
    return np.array(src, np.int64), np.array(dst, np.int64)


Snapshots = list[tuple[np.ndarray, np.ndarray]]


def snapshots_of_groups(groups: dict[tuple[int, ...], range], num_snapshots: int) -> Snapshots:
    """Each group of vertices is a clique in every snapshot of its range (and absent elsewhere)."""
    out = []
    for t in range(num_snapshots):
        pieces = [clique_edges(list(group)) for group, steps in groups.items() if t in steps]
        out.append((np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, np.int64),
                    np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, np.int64)))
    return out


GROUPS = {(0, 1, 2): range(0, 4), (3, 4, 5, 6): range(1, 3), (7, 8): range(0, 1), (9, 10, 11): range(2, 4),
          (12, 13, 14, 15, 16): range(3, 4)}


@pytest.mark.parametrize("profile", [SPATIAL_HEAVY, TEMPORAL_HEAVY, ATTENTION])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_disconnected_cliques_across_time_are_exactly_the_chunks(profile, seed):
    graph = build_supergraph(snapshots_of_groups(GROUPS, 4), num_vertices=17)
    chunks = label_propagation(graph, profile, max_chunk_size=100, seed=seed)
    found = {frozenset(zip(graph.vertex[m].tolist(), graph.step[m].tolist())) for m in chunks.members()}
    expected = {frozenset((v, t) for v in group for t in steps) for group, steps in GROUPS.items()}
    assert found == expected
    assert chunks.converged


def test_one_pass_without_coarsening_leaves_a_persistent_clique_per_snapshot():
    """The paper's single LPA pass: spatial weight dominates, so a clique over time stays per snapshot;
    coarsening levels (the default) merge it (the test above)."""
    graph = build_supergraph(snapshots_of_groups({(0, 1, 2): range(0, 3)}, 3), num_vertices=3)
    chunks = label_propagation(graph, SPATIAL_HEAVY, max_chunk_size=100, max_levels=1)
    assert sorted(chunks.sizes.tolist()) == [3, 3, 3]
    assert all(len(set(graph.step[m])) == 1 for m in chunks.members())


def random_snapshots(rng: np.random.Generator, nodes: int, steps: int, edges: int) -> Snapshots:
    return [(rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)) for _ in range(steps)]


@pytest.mark.parametrize("cap", [1, 2, 5, 17, 60])
@pytest.mark.parametrize("presence", ["edges", "all"])
def test_maximum_chunk_size_is_never_exceeded(cap, presence):
    rng = np.random.default_rng(cap)
    graph = build_supergraph(random_snapshots(rng, 40, 6, 90), presence=presence, num_vertices=40)
    for profile in (SPATIAL_HEAVY, TEMPORAL_HEAVY, ATTENTION):
        chunks = label_propagation(graph, profile, max_chunk_size=cap, seed=3)
        assert chunks.sizes.max() <= cap
        assert chunks.sizes.sum() == graph.num_instances
    big_clique = build_supergraph(snapshots_of_groups({tuple(range(6)): range(4)}, 4), num_vertices=6)
    assert label_propagation(big_clique, SPATIAL_HEAVY, max_chunk_size=5).sizes.max() <= 5


def test_deterministic_per_seed():
    rng = np.random.default_rng(11)
    graph = build_supergraph(random_snapshots(rng, 60, 8, 120), num_vertices=60)
    runs = {seed: label_propagation(graph, SPATIAL_HEAVY, max_chunk_size=25, seed=seed).chunk_of for seed in (0, 1, 2)}
    for seed, chunk_of in runs.items():
        np.testing.assert_array_equal(label_propagation(graph, SPATIAL_HEAVY, max_chunk_size=25, seed=seed).chunk_of,
                                      chunk_of)
    assert any(not np.array_equal(runs[0], other) for other in (runs[1], runs[2]))  # the seed is used


def test_eq1_instance_ids_and_presence():
    snaps = [(np.array([0, 2]), np.array([2, 0])), (np.array([3]), np.array([1]))]
    graph = build_supergraph(snaps, num_vertices=4)
    assert graph.offsets.tolist() == [0, 2, 4]  # |V_0| = |{0, 2}|, |V_1| = |{1, 3}|
    assert graph.vertex.tolist() == [0, 2, 1, 3] and graph.step.tolist() == [0, 0, 1, 1]
    assert graph.instances(1, np.array([3])).tolist() == [3]
    with pytest.raises(DgbenchError, match="not present"):
        graph.instances(1, np.array([0]))
    dense = build_supergraph(snaps, presence="all", num_vertices=4)
    assert dense.num_instances == 8 and dense.instances(1, np.array([2])).tolist() == [6]  # t·N + i
    assert dense.temporal_src.tolist() == [0, 1, 2, 3] and dense.temporal_dst.tolist() == [4, 5, 6, 7]


def test_alg1_hand_built_instance():
    """g = [4, 3, 3, 2, 2] on 2 GPUs: ḡ = 7, limit 7·1.05 = 7.35.
    a0: every score 0 -> least loaded, GPU 0 (loads 4, 0).
    a1: no affinity anywhere -> least loaded, GPU 1 (4, 3).
    a2: s0 = (7-4)·h(2,0)=3·1 = 3, s1 = (7-3)·h(2,1) = 4·8 = 32 -> GPU 1 (4, 6).
    a3: GPU 1 would reach 8 > 7.35, so only GPU 0 is eligible (s1 = (7-6)·h(3,2) = 50 would win
        otherwise): s0 = 3·h(3,0) = 30 -> GPU 0 (6, 6).
    a4: both would exceed 7.35, so both are eligible again: s0 = 1·h(4,3) = 1, s1 = 1·(h(4,1) + h(4,2)) = 8
        -> GPU 1 (6, 8)."""
    pairs = ChunkPairs(a=np.array([0, 1, 0, 1, 2, 3, 2]), b=np.array([3, 2, 2, 4, 4, 4, 3]),
                       bytes=np.array([10.0, 8, 1, 6, 2, 1, 50]))
    result = assign_chunks(np.array([4.0, 3, 3, 2, 2]), pairs, parts=2)
    assert result.rank_of_chunk.tolist() == [0, 1, 1, 0, 1]
    assert result.load.tolist() == [6.0, 8.0] and result.average == 7.0
    # without the slack rule (a huge slack) a3 follows its 50 bytes to GPU 1, as Eq. 3 alone says
    assert assign_chunks(np.array([4.0, 3, 3, 2, 2]), pairs, parts=2, slack=10.0).rank_of_chunk.tolist()[3] == 1


def test_alg1_multiplies_headroom_by_shared_bytes():
    """Eq. 3 is a product. g = [9, 7, 2, 1, 1] on 2 GPUs, ḡ = 10, no slack rule: a0 -> GPU 0, a1 -> GPU 1
    (nothing shared yet, least loaded). a2 shares 7 bytes with a0 and 3 with a1:
    s0 = (10 - 9)·7 = 7 < s1 = (10 - 7)·3 = 9 -> GPU 1 (a sum, 1 + 7 = 8 > 3 + 3 = 6, would pick GPU 0).
    a3, a4 share nothing: the least loaded (9, 9 -> GPU 0; then GPU 1)."""
    pairs = ChunkPairs(a=np.array([0, 1]), b=np.array([2, 2]), bytes=np.array([7.0, 3.0]))
    result = assign_chunks(np.array([9.0, 7, 2, 1, 1]), pairs, parts=2, slack=10.0)
    assert result.rank_of_chunk.tolist() == [0, 1, 1, 0, 1]
    assert result.load.tolist() == [10.0, 10.0] and result.imbalance == 1.0


def test_alg1_prefers_the_underloaded_gpu_it_shares_bytes_with():
    pairs = ChunkPairs(a=np.array([0, 1]), b=np.array([2, 3]), bytes=np.array([5.0, 5.0]))
    result = assign_chunks(np.array([2.0, 2.0, 1.0, 1.0]), pairs, parts=2)
    assert result.rank_of_chunk.tolist() == [0, 1, 0, 1]


def hand_built():
    """T = 2, N = 4. Snapshot 0: 0->1, 1->0, 2->1, 2->0; snapshot 1: 0->3, 3->2.
    V_0 = {0, 1, 2} (instances 0, 1, 2), V_1 = {0, 2, 3} (instances 3, 4, 5).
    Temporal: (0,0)->(0,1) = 0->3, (2,0)->(2,1) = 2->4."""
    snaps = [(np.array([0, 1, 2, 2]), np.array([1, 0, 1, 0])), (np.array([0, 3]), np.array([3, 2]))]
    return build_supergraph(snaps, num_vertices=4)


def test_predicted_bytes_from_a_hand_built_cut():
    graph = hand_built()
    part = np.array([0, 0, 1, 1, 1, 0])
    rows = cut_rows(graph, TrafficProfile((8,), (4,)), part, 2)
    # spatial: instance 2 (part 1) is read by instances 1 and 0 (part 0): one row, not two;
    # instance 3 -> 5 (part 1 -> 0); instance 5 -> 4 (part 0 -> 1)
    assert rows.spatial.tolist() == [[0, 1], [2, 0]]
    # temporal: 0 -> 3 crosses (part 0 -> 1); 2 -> 4 stays in part 1
    assert rows.temporal.tolist() == [[0, 1], [0, 0]]
    assert predicted_bytes(rows, TrafficProfile((8, 2), (4,))) == {"spatial": 3 * 10 * 4, "temporal": 1 * 4 * 4}
    # h(a, a') with the parts as chunks: both directions summed
    pairs = chunk_pair_bytes(graph, TrafficProfile((8,), (4,)), part)
    assert pairs.dense(2)[0, 1] == 3 * 8 * 4 + 1 * 4 * 4


def test_attention_reads_every_earlier_instance_once_per_reading_part():
    # vertex 0 present at t = 0, 1, 2 (a self-free edge to vertex 1 each time), parts 0, 1, 0 for vertex 0
    snaps = [(np.array([0]), np.array([1]))] * 3
    graph = build_supergraph(snaps, num_vertices=2)  # instances: (0,0)=0 (1,0)=1 (0,1)=2 (1,1)=3 (0,2)=4 (1,2)=5
    part = np.array([0, 0, 1, 1, 0, 0])
    rows = cut_rows(graph, ATTENTION, part, 2)
    # part 1 reads (0,0) and (1,0) (from part 0); part 0's last instances (t=2) read (0,1), (1,1) from part 1
    assert rows.temporal.tolist() == [[0, 2], [2, 0]]
    recurrent = cut_rows(graph, TrafficProfile((4,), (4,)), part, 2)
    assert recurrent.temporal.tolist() == [[0, 2], [2, 0]]  # here the previous instance is the only one
    part = np.array([0, 0, 1, 1, 1, 1])  # t = 2 on part 1 too: it already holds (·,1), reads (·,0) once
    assert cut_rows(graph, ATTENTION, part, 2).temporal.tolist() == [[0, 2], [0, 0]]
    pairs = chunk_pair_bytes(graph, ATTENTION, part)
    assert pairs.dense(2)[0, 1] == 2 * ATTENTION.temporal_edge_bytes  # the spatial edges never cross here


def test_pss_and_pts_as_instance_maps():
    graph = build_supergraph([(np.array([0, 1]), np.array([1, 2]))] * 4, presence="all", num_vertices=4)
    assert pss_parts(graph, 2).reshape(4, 4)[:, 0].tolist() == [0, 0, 1, 1]
    assert pts_parts(graph, 2).reshape(4, 4)[0].tolist() == [0, 0, 1, 1]
    profile = TrafficProfile((1,), (1,))
    assert cut_rows(graph, profile, pss_parts(graph, 2), 2).spatial.sum() == 0  # PSS never cuts a snapshot
    assert cut_rows(graph, profile, pts_parts(graph, 2), 2).temporal.sum() == 0  # PTS never cuts a sequence


def test_bad_inputs_are_one_line_errors():
    graph = hand_built()
    with pytest.raises(DgbenchError, match="one part per instance"):
        cut_rows(graph, SPATIAL_HEAVY, np.zeros(3, np.int64))
    with pytest.raises(DgbenchError, match="max_chunk_size"):
        label_propagation(graph, SPATIAL_HEAVY, max_chunk_size=0)
    with pytest.raises(DgbenchError, match="temporal_reach"):
        TrafficProfile((1,), (1,), temporal_reach="future")
    with pytest.raises(DgbenchError, match="presence"):
        build_supergraph([(np.array([0]), np.array([1]))], presence="sometimes")


def test_attention_weighs_a_temporal_link_by_the_earlier_instances_a_cut_there_moves():
    from dgbench.trainers.discrete.dgc.chunks import sequence_positions, temporal_link_weights
    graph = build_supergraph([(np.array([0]), np.array([1]))] * 5, presence="all", num_vertices=3)
    assert sequence_positions(graph).reshape(5, 3)[:, 0].tolist() == [0, 1, 2, 3, 4]
    recurrent = temporal_link_weights(graph, TEMPORAL_HEAVY)
    assert np.all(recurrent == TEMPORAL_HEAVY.temporal_edge_bytes)
    attention = temporal_link_weights(graph, ATTENTION)
    position = sequence_positions(graph)[graph.temporal_dst]
    assert np.array_equal(attention, position * ATTENTION.temporal_edge_bytes)
    for k in range(1, 5):  # cutting vertex 0's sequence before its k-th appearance: attention reads k rows across
        part = (graph.step >= k).astype(np.int64)
        part[graph.vertex != 0] = 0
        assert cut_rows(graph, ATTENTION, part, 2).temporal.sum() == k
        link = (graph.vertex[graph.temporal_dst] == 0) & (graph.step[graph.temporal_dst] == k)
        assert attention[link].item() == k * ATTENTION.temporal_edge_bytes


def test_pss_interleaved_puts_snapshot_t_on_rank_t_mod_p_and_cuts_every_recurrent_link():
    graph = build_supergraph([(np.array([0, 1]), np.array([1, 2]))] * 6, presence="all", num_vertices=4)
    assert pss_parts(graph, 2, "interleaved").reshape(6, 4)[:, 0].tolist() == [0, 1, 0, 1, 0, 1]
    recurrent = TrafficProfile((1,), (1,))
    contiguous = cut_rows(graph, recurrent, pss_parts(graph, 2), 2).temporal.sum()
    interleaved = cut_rows(graph, recurrent, pss_parts(graph, 2, "interleaved"), 2).temporal.sum()
    assert contiguous == 4 and interleaved == 5 * 4  # (P - 1) vs (T - 1) hand-overs per sequence
    with pytest.raises(ValueError, match="layout"):
        pss_parts(graph, 2, "diagonal")
