"""Vertex partitioning (ESDG §4.1), shared by `vertex`, DGC's `pts` and BLAD: partitioners and halo plans.

* :mod:`~trainers.discrete.partition.edges`: the accepted edge inputs (store or per-snapshot (src, dst)).
* :mod:`~trainers.discrete.partition.hypergraph`: the column-net hypergraph whose λ-1 is the halo volume.
* :mod:`~trainers.discrete.partition.partitioners`: hypergraph (Mt-KaHyPar), metis, range, auto.
* :mod:`~trainers.discrete.partition.halo`: send/receive lists, local subgraphs, the local index layout.
"""
from trainers.discrete.partition.edges import (EdgeSource, SnapshotEdges, as_snapshot_edges, block_imbalance,
                                               vertex_weights)
from trainers.discrete.partition.halo import (HaloPlan, LocalSubgraph, build_halo_plan, connectivity_volume,
                                              local_subgraph, reference_exchange)
from trainers.discrete.partition.hypergraph import ColumnNetHypergraph, column_net_hypergraph
from trainers.discrete.partition.partitioners import (METHODS, VertexPartition, available_methods, partition_vertices,
                                                      partition_vertices_detailed, range_partition, resolve_method)

__all__ = ["EdgeSource", "SnapshotEdges", "as_snapshot_edges", "block_imbalance", "vertex_weights",
           "HaloPlan", "LocalSubgraph", "build_halo_plan", "connectivity_volume", "local_subgraph",
           "reference_exchange", "ColumnNetHypergraph", "column_net_hypergraph", "METHODS", "VertexPartition",
           "available_methods", "partition_vertices", "partition_vertices_detailed", "range_partition",
           "resolve_method"]
