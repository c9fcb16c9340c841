"""`depcomm` (Sven's baseline, Eq. 8): N&M partitioned by vertex (contiguous id ranges); every needed
position fetched from its owner and every update written back by all-to-all, redundancy kept; events
run on their source's owner."""
from __future__ import annotations

from dgbench.dist import DistContext
from dgbench.models.temporal import StateLayout
from dgbench.options import NoOptions
from trainers.continuous import sven_core
from trainers.continuous.data import StreamProblem
from trainers.continuous.schemes.common import by_source_owner, range_owners
from trainers.continuous.state import NodeState, PartitionedState
from trainers.contract import ContinuousScheme, EventAssignment, Partition, register_scheme


@register_scheme
class DepComm(ContinuousScheme[NoOptions]):
    name = "depcomm"
    summary = "N&M partitioned by vertex; fetch and write-back by all-to-all"

    def partition(self, problem: StreamProblem, parts: int, options: NoOptions) -> Partition:
        return range_owners(problem.stream, parts)

    def assign_events(self, partition: Partition, rank: int, world_size: int) -> EventAssignment:
        return by_source_owner(partition, rank) if world_size > 1 else super().assign_events(partition, rank, 1)

    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition, options: NoOptions) -> NodeState:
        assert partition.owner is not None
        return PartitionedState(ctx, layout.width, layout.empty_rows, partition.owner, deduplicate_ids=False)

    def predicted_volume(self, eta1: float, eta2: float, batch_events: int, world_size: int, row_width: int,
                         num_neighbors: float, remote_fraction: float, aggregation_remote_fraction: float,
                         bytes_per_value: int) -> sven_core.CommVolume | None:
        return sven_core.comm_volume("depcomm", eta1, eta2, batch_events, world_size, row_width, 1,
                                     num_neighbors=num_neighbors, remote_fraction=remote_fraction,
                                     aggregation_remote_fraction=aggregation_remote_fraction,
                                     bytes_per_value=bytes_per_value) if world_size > 1 else None
