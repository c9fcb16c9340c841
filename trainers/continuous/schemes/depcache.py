"""`depcache` (Sven's baseline, Eq. 7): a full N&M replica per rank; each batch's updated rows are sent
to every other rank; the batch's events are split evenly across ranks."""
from __future__ import annotations

import numpy as np

from dgbench.dist import DistContext
from dgbench.models.temporal import StateLayout
from dgbench.options import NoOptions
from trainers.continuous import sven_core
from trainers.continuous.data import StreamProblem
from trainers.continuous.schemes.common import range_owners
from trainers.continuous.state import NodeState, ReplicatedState, ResidentState
from trainers.contract import ContinuousScheme, EventAssignment, Partition, register_scheme


@register_scheme
class DepCache(ContinuousScheme[NoOptions]):
    name = "depcache"
    summary = "Full N&M replica per rank; updated rows broadcast after each batch"

    def partition(self, problem: StreamProblem, parts: int, options: NoOptions) -> Partition:
        return range_owners(problem.stream, parts)  # only the Eq. 1 / Eq. 5 bookkeeping uses owners

    def assign_events(self, partition: Partition, rank: int, world_size: int) -> EventAssignment:
        if world_size == 1:
            return super().assign_events(partition, rank, world_size)
        return lambda src: (np.arange(len(src)) * world_size) // max(len(src), 1) == rank

    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition, options: NoOptions) -> NodeState:
        assert partition.owner is not None
        placement = ReplicatedState if ctx.world_size > 1 else ResidentState
        return placement(ctx, layout.width, layout.empty_rows, partition.owner)

    def predicted_volume(self, eta1: float, eta2: float, batch_events: int, world_size: int, row_width: int,
                         num_neighbors: float, remote_fraction: float, aggregation_remote_fraction: float,
                         bytes_per_value: int) -> sven_core.CommVolume | None:
        return sven_core.comm_volume("depcache", eta1, eta2, batch_events, world_size, row_width, 1,
                                     num_neighbors=num_neighbors, remote_fraction=remote_fraction,
                                     aggregation_remote_fraction=aggregation_remote_fraction,
                                     bytes_per_value=bytes_per_value) if world_size > 1 else None
