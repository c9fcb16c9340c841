"""DGC's critical-path model (trainers/discrete/dgc/critical_path.py): hand arithmetic on 2 ranks,
the plans' counts, and the V100 profile it is priced on."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.trainers.discrete.dgc.chunks import TrafficProfile, build_supergraph, cut_rows, pss_parts, pts_parts
from dgbench.trainers.discrete.dgc.costmodel import EncoderSpec
from dgbench.trainers.projection.hardware import load_profile
from dgbench.trainers.discrete.dgc.critical_path import (DeviceRates, ModelShape, instance_critical_path,
                                                 pss_ts_critical_path, round_work, scheme_critical_paths)

# unit rates: every term below is counted by hand
RATES = DeviceRates(flops=1.0, memory_bandwidth=1.0, step_overhead_s=1.0, alpha_s=10.0, bandwidth=1.0)
SHAPE = ModelShape(feature_width=1, width=1, spatial_widths=(1,), structure_layers=1, time="gru", time_layers=1,
                   temporal_widths=(1,))


@pytest.fixture
def two_vertices():
    """N = 2, T = 4, every vertex present, one edge 0 -> 1 in every snapshot."""
    one = np.array([0]), np.array([1])
    return build_supergraph([one] * 4, presence="all", num_vertices=2)


def test_contiguous_pss_terms_by_hand(two_vertices):
    # rank 0: steps 0-1, rank 1: steps 2-3. Per rank 4 cells, 2 nonzeros:
    # structure = 3 x ((2 + 4)·1·4 B / 1 + 4·2·1·1 FLOP / 1) = 96
    # round k: only rank k works: 2 steps x 1 s + 4 cells x 12 GRU FLOP = 50, x 3 = 150; two rounds
    # one carry exchange (rank 0 sends 2 rows of 4 B) forward and backward: 2 x 10 s + 2 x 8 B / 1
    path = instance_critical_path("pss", two_vertices, pss_parts(two_vertices, 2), 2, SHAPE, RATES)
    assert path.structure_s == [96.0, 96.0]
    assert path.round_s == [150.0, 150.0]
    assert (path.exchanges, path.latency_s, path.transfer_s, path.bytes) == (2, 20.0, 16.0, 16)
    assert path.epoch_s == 96 + 300 + 20 + 16


def test_sequences_per_rank_terms_by_hand(two_vertices):
    # vertex 0 on rank 0, vertex 1 on rank 1: rank 1 aggregates the 4 edges, rank 0 sends 4 halo rows
    path = instance_critical_path("pts", two_vertices, pts_parts(two_vertices, 2), 2, SHAPE, RATES)
    assert path.structure_s == [3 * (4 * 4 + 8.0), 3 * (8 * 4 + 8.0)]
    assert path.round_s == [3 * (4 * 1 + 4 * 12.0)]  # one round, both ranks side by side
    assert (path.exchanges, path.latency_s, path.transfer_s, path.bytes) == (2, 20.0, 32.0, 32)
    assert path.epoch_s == 120 + 156 + 20 + 32


def test_pss_ts_shuffles_by_hand(two_vertices):
    # 4 instances change rank between the layouts; each shuffle: 2 rows of 4 B from each rank
    path = pss_ts_critical_path(two_vertices, 2, SHAPE, RATES)
    assert path.structure_s == [96.0, 96.0] and path.round_s == [156.0]
    assert (path.exchanges, path.latency_s, path.transfer_s, path.bytes) == (4, 40.0, 32.0, 64)


def test_recurrent_term_serial_for_contiguous_pss_per_round_max_for_chunks(two_vertices):
    def per_rank_rounds(part):
        work = round_work(two_vertices, part, 2)
        return SHAPE.time_layers * work.steps * RATES.step_overhead_s + work.cells * 12.0

    pss = pss_parts(two_vertices, 2)
    by_rank = per_rank_rounds(pss).sum(axis=0)  # each rank's own recurrent work
    assert instance_critical_path("pss", two_vertices, pss, 2, SHAPE, RATES).recurrent_s == 3 * by_rank.sum()
    chunks = pts_parts(two_vertices, 2)  # two chunks, one per sequence, one per rank
    rounds = per_rank_rounds(chunks)
    path = instance_critical_path("dgc", two_vertices, chunks, 2, SHAPE, RATES)
    assert path.recurrent_s == 3 * rounds.max(axis=1).sum() < 3 * rounds.sum()


def test_counts_match_the_cut_the_plans_send(tmp_path):
    from dgbench.store import open_store
    from dgbench.generators.nonuniform import build, lifetime_presence
    store = open_store(build(out=tmp_path / "g.zarr", snapshots=8, mean_edges=40, std_edges=10.0, presence="lifetime",
                             instances_per_edge=2.5, seed=1))
    graph = build_supergraph(store, alive=lifetime_presence(store))
    assert graph.presence == "lifetime" and graph.num_instances == lifetime_presence(store).sum()
    part = pss_parts(graph, 3, "interleaved")
    carries = round_work(graph, part, 3).carries
    assert carries.sum() == cut_rows(graph, TrafficProfile((1,), (1,)), part, 3).temporal.sum()
    profile, spec = TrafficProfile((6,), (6,)), EncoderSpec("gcn", 2, "gru", 1)
    rates = DeviceRates.from_profile(load_profile("dgc-v100").document, 8)
    paths = scheme_critical_paths(graph, profile, spec, 8, rates, feature_width=2, width=6)
    assert set(paths) == {"pss", "pss-interleaved", "pts", "pss-ts", "dgc"}
    for path in paths.values():
        assert path.epoch_s > 0 and len(path.structure_s) == 8
    expected = 2 * 4 * 6 * cut_rows(graph, profile, pts_parts(graph, 8), 8).spatial.sum()  # fwd + bwd rows x 6 x 4 B
    assert paths["pts"].bytes == expected


def test_v100_profile_states_the_paper_setting():
    profile = load_profile("dgc-v100")
    assert profile.document["ranks_per_node"] == 8 and profile.document["device"]["fp32_flops"] == 15.7e12
    rates = DeviceRates.from_profile(profile.document, 8)
    assert rates.bandwidth == profile.document["links"]["intra"]["bandwidth"]
