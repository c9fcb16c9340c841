"""Vertex partitioning cost and quality: time and halo volume of hypergraph vs metis vs range.

Graph: esdg-random (ESDG §6.1 weak-scaling graphs), N = 4096, T = 16, m = 3N per snapshot, 8 parts.
Each partitioner runs once (one Mt-KaHyPar run is tens of CPU seconds). The volume (halo rows per
aggregation over all snapshots) and its ratio to ``range`` go into ``extra_info`` and are printed
(run with ``-s``): ``.venv/bin/pytest benchmarks/test_partition_bench.py --benchmark-disable -s``.
"""
from __future__ import annotations

import pytest

from dgbench.trainers.discrete.partition import (as_snapshot_edges, available_methods, build_halo_plan,
                                                 column_net_hypergraph, connectivity_volume,
                                                 partition_vertices_detailed)
from dgbench.store import open_store

NODES, SNAPSHOTS, EDGE_FACTOR, PARTS = 4096, 16, 3.0, 8


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    from dgbench.generators.esdg_random import build
    path = build(out=tmp_path_factory.mktemp("partition") / "esdg.zarr", nodes=NODES, snapshots=SNAPSHOTS,
                 edge_factor=EDGE_FACTOR, seed=0)
    return as_snapshot_edges(open_store(path))


@pytest.fixture(scope="module")
def range_partition(edges):
    return partition_vertices_detailed(edges, PARTS, "range")


@pytest.mark.parametrize("method", ["range", "metis", "hypergraph"])
def test_partition_time_and_volume(benchmark, edges, range_partition, method):
    if method not in available_methods():
        pytest.skip(f"{method} partitioner is not installed")
    result = benchmark.pedantic(partition_vertices_detailed, args=(edges, PARTS, method), rounds=1, iterations=1)
    assert result.connectivity == connectivity_volume(edges, result.owner)
    ratio = result.connectivity / range_partition.connectivity
    benchmark.extra_info.update(volume_rows=result.connectivity, volume_vs_range=round(ratio, 4),
                                imbalance=round(result.imbalance, 4), seconds=round(result.seconds, 3))
    print(f"\n{method}: N={NODES} T={SNAPSHOTS} parts={PARTS} volume={result.connectivity} rows "
          f"({ratio:.3f} x range) imbalance={result.imbalance:.4f} time={result.seconds:.2f}s")


def test_column_net_hypergraph_build(benchmark, edges):
    hypergraph = benchmark(column_net_hypergraph, edges)
    benchmark.extra_info.update(nets=hypergraph.num_nets, pins=len(hypergraph.pins))


def test_halo_plan_build(benchmark, edges, range_partition):
    plan = benchmark(build_halo_plan, edges, range_partition.owner, PARTS)
    assert plan.rows_sent() == range_partition.connectivity
