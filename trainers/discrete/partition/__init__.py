"""Vertex partitioning (ESDG §4.1), shared by `vertex`, DGC's `pts` and BLAD: partitioners and halo plans.

* :mod:`~dgbench.trainers.discrete.partition.edges`: the accepted edge inputs (store or per-snapshot (src, dst)).
* :mod:`~dgbench.trainers.discrete.partition.hypergraph`: the column-net hypergraph whose λ-1 is the halo volume.
* :mod:`~dgbench.trainers.discrete.partition.partitioners`: hypergraph (Mt-KaHyPar), metis, range, auto.
* :mod:`~dgbench.trainers.discrete.partition.halo`: send/receive lists, local subgraphs, the local index layout.
"""
from dgbench.trainers.discrete.partition.edges import (EdgeSource, SnapshotEdges, StreamedEdges, as_snapshot_edges,
                                                      block_imbalance, vertex_weights)
from dgbench.trainers.discrete.partition.halo import (HaloPlan, LocalSubgraph, RankHaloPlan, build_halo_plan,
                                                      build_rank_halo_plan, connectivity_volume, halo_rows,
                                                      local_subgraph, reference_exchange)
from dgbench.trainers.discrete.partition.hypergraph import ColumnNetHypergraph, column_net_hypergraph
from dgbench.trainers.discrete.partition.partitioners import (METHODS, VertexPartition, available_methods,
                                                              partition_vertices, partition_vertices_detailed,
                                                              range_partition, resolve_method)

__all__ = ["EdgeSource", "SnapshotEdges", "StreamedEdges", "as_snapshot_edges", "block_imbalance", "vertex_weights",
           "HaloPlan", "LocalSubgraph", "RankHaloPlan", "build_halo_plan", "build_rank_halo_plan",
           "connectivity_volume", "halo_rows", "local_subgraph",
           "reference_exchange", "ColumnNetHypergraph", "column_net_hypergraph", "METHODS", "VertexPartition",
           "available_methods", "partition_vertices", "partition_vertices_detailed", "range_partition",
           "resolve_method"]
