"""`sven` (Xia et al., HPDC'23 / TPDS): redundancy-free all-to-alls (Alg. 2), a communication-balanced
partition (range / interval / Re-FlexBiCut, Alg. 3), the state fetch pipelined in micro-batches
(n from Eq. 12 when 0) and optionally a staleness-1 gradient all-reduce (Eq. 13)."""
from __future__ import annotations

from dataclasses import dataclass

from dgbench.dist import DistContext
from dgbench.models.temporal import StateLayout
from dgbench.options import Options, option
from trainers.continuous import sven_core
from trainers.continuous.data import StreamProblem
from trainers.continuous.schemes.common import by_source_owner, training_events
from trainers.continuous.state import NodeState, PartitionedState
from trainers.contract import ContinuousScheme, EventAssignment, Partition, register_scheme

PARTITIONERS = ("range", "interval", "reflexbicut")


@dataclass(frozen=True)
class SvenOptions(Options):
    partition: str = option("reflexbicut", "Vertex partitioning of N&M (Alg. 3 Re-FlexBiCut, or a baseline).",
                            aliases=("--partitioner",), choices=PARTITIONERS)
    microbatches: int = option(0, "Pipelining granularity n of the state fetch (0 = from Eq. 12).", minimum=0)
    async_allreduce: bool = option(False, "Staleness-1 gradient all-reduce (Eq. 13).")


@register_scheme
class Sven(ContinuousScheme[SvenOptions]):
    name = "sven"
    summary = "Sven: redundancy-free all-to-alls, Re-FlexBiCut partition, prefetch, pipelining"
    Options = SvenOptions
    conformance = ({"partition": "interval", "microbatches": 1},)

    def partition(self, problem: StreamProblem, parts: int, options: SvenOptions) -> Partition:
        src, dst = training_events(problem.stream)
        nodes = problem.stream.num_nodes
        if options.partition == "reflexbicut":
            owner = sven_core.re_flexbicut(src, dst, nodes, parts, batch_size=problem.batch_size)
        elif options.partition == "interval":
            owner = sven_core.interval_partition(src, dst, nodes, parts)
        else:
            owner = sven_core.range_partition(src, dst, nodes, parts)
        return Partition(owner, options.partition)

    def assign_events(self, partition: Partition, rank: int, world_size: int) -> EventAssignment:
        return by_source_owner(partition, rank) if world_size > 1 else super().assign_events(partition, rank, 1)

    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition, options: SvenOptions) -> NodeState:
        assert partition.owner is not None
        return PartitionedState(ctx, layout.width, layout.empty_rows, partition.owner, deduplicate_ids=True,
                                chunks=max(1, options.microbatches))

    def gradient_staleness(self, options: SvenOptions) -> int:
        return 1 if options.async_allreduce else 0

    def microbatches(self, options: SvenOptions) -> int:
        return options.microbatches

    def predicted_volume(self, eta1: float, eta2: float, batch_events: int, world_size: int, row_width: int,
                         num_neighbors: float, remote_fraction: float, aggregation_remote_fraction: float,
                         bytes_per_value: int) -> sven_core.CommVolume | None:
        return sven_core.comm_volume("sven", eta1, eta2, batch_events, world_size, row_width, 1,
                                     num_neighbors=num_neighbors, remote_fraction=remote_fraction,
                                     aggregation_remote_fraction=aggregation_remote_fraction,
                                     bytes_per_value=bytes_per_value) if world_size > 1 else None
