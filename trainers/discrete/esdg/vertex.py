"""`vertex`: ESDG §4.1 vertex partitioning — each rank owns the vertices a partitioner gives it for all
timesteps (Mt-KaHyPar minimising the connectivity-1 halo volume; METIS or ranges as fallbacks) and
halo rows travel along precomputed send/receive lists. BLAD calls this Aligraph-style partitioning."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dgbench.dist import DistContext
from dgbench.options import Options, option
from dgbench.trainers.discrete.partition import METHODS
from dgbench.trainers.contract import DiscreteScheme, Partition, register_scheme
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.placement import Placement, VertexPlacement, partition_owner
from dgbench.trainers.discrete.esdg.checkpoint import blocks_option, state_every_option, state_every_schedule
from dgbench.trainers.discrete.schedule import Schedule


@dataclass(frozen=True)
class VertexOptions(Options):
    blocks: int = blocks_option()
    state_every: int = state_every_option()
    partition: str = option("auto", "Vertex partitioner (auto = the best installed).", aliases=("--partitioner",),
                            choices=METHODS)


@register_scheme
class Vertex(DiscreteScheme[VertexOptions]):
    name = "vertex"
    summary = "vertex partitioning by a hypergraph partitioner, halo exchange (ESDG §4.1)"
    conformance = ({"blocks": 2, "partition": "range"}, {"blocks": 5, "partition": "range", "state_every": 2})
    trains_minibatches = True
    Options = VertexOptions

    def validate(self, options: VertexOptions, world_size: int) -> None:
        state_every_schedule(options.state_every, options.blocks)

    def schedule(self, options: VertexOptions) -> Schedule | None:
        return state_every_schedule(options.state_every, options.blocks)

    def partition(self, problem: DiscreteData, parts: int, options: VertexOptions) -> Partition:
        made = partition_owner(problem, parts, options.partition, problem.seed)
        report: dict[str, Any] = {"method": made.method, "requested": made.requested, "fallback": made.fallback,
                                  "connectivity": made.connectivity, "imbalance": made.imbalance,
                                  "seconds": made.seconds}
        return Partition(made.owner.astype(np.int64), made.method, report)

    def placement(self, ctx: DistContext, data: DiscreteData, options: VertexOptions,
                  partition: Partition) -> Placement:
        assert partition.owner is not None
        return VertexPlacement(ctx, data, blocks=options.blocks, owner=partition.owner, method=partition.method,
                               report=partition.report)
