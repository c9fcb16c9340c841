"""`pts`: DGC's partitioning by temporal sequences (PTS, DGC §2.2, Fig. 2b; DynaGraph [12]).

Every rank holds whole temporal sequences — "the same number of sequences" per GPU (§2.2.2), here
contiguous vertex-id ranges of equal counts of vertices that exist in some step (``--presence``) — so
the time encoder never crosses ranks and each structure-encoder aggregation reads its remote spatial
neighbours. That is ESDG's vertex layout (`vertex`, §4.1) with DGC's equal-count rule in place of a
partitioner, so the halo machinery is the vertex scheme's (:class:`VertexPlacement`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgbench.dist import DistContext
from dgbench.options import Options
from dgbench.trainers.contract import DiscreteScheme, Partition, register_scheme
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.placement import Placement, VertexPlacement
from dgbench.trainers.discrete.esdg.checkpoint import blocks_option


@dataclass(frozen=True)
class PTSOptions(Options):
    blocks: int = blocks_option()


def equal_sequence_owner(data: DiscreteData, parts: int) -> np.ndarray:
    """Owner of every vertex: the vertices that have a sequence (every vertex under ``--presence all``;
    those present in some step under ``edges`` or ``lifetime``) split into ``parts`` contiguous ranges of equal counts;
    a vertex without one goes with the range of the next vertex that has one (it moves nothing)."""
    present = getattr(data, "present", None)
    has_sequence = np.ones(data.num_nodes, bool) if present is None else present.any(axis=0)
    with_sequence = np.flatnonzero(has_sequence)
    owner_of_sequence = np.repeat(np.arange(parts), [len(c) for c in np.array_split(with_sequence, parts)])
    if not len(with_sequence):
        return np.zeros(data.num_nodes, np.int64)
    nearest = np.minimum(np.searchsorted(with_sequence, np.arange(data.num_nodes)), len(with_sequence) - 1)
    return owner_of_sequence[nearest].astype(np.int64)


@register_scheme
class PTS(DiscreteScheme[PTSOptions]):
    name = "pts"
    summary = "DGC's PTS: equal counts of whole sequences per rank, spatial halos (§2.2; DynaGraph)"
    Options = PTSOptions
    conformance = ({"blocks": 2},)

    def partition(self, problem: DiscreteData, parts: int, options: PTSOptions) -> Partition:
        owner = equal_sequence_owner(problem, parts)
        sequences = np.ones(problem.num_nodes, bool) if getattr(problem, "present", None) is None \
            else problem.present.any(axis=0)
        report = {"method": "equal-sequences", "sequences_per_rank": np.bincount(owner[sequences],
                                                                                minlength=parts).tolist()}
        return Partition(owner, "equal-sequences", report)

    def placement(self, ctx: DistContext, data: DiscreteData, options: PTSOptions, partition: Partition) -> Placement:
        assert partition.owner is not None
        return VertexPlacement(ctx, data, blocks=options.blocks, owner=partition.owner, method=partition.method,
                               report=partition.report)
