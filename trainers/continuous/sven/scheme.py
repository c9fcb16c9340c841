"""`sven` (Xia et al., HPDC'23 / TPDS): redundancy-free all-to-alls of whole N&M rows (Alg. 2, Eq. 9), a
communication-balanced partition (Re-FlexBiCut, Alg. 3, or a baseline), the two-level pipeline of
§3.3.2 (the fetch in n micro-batches overlapping the memory update, n from Eq. 12 when 0; the
write-back overlapping the temporal GNN), the prefetch queue (§3.3.1) and optionally the staleness-1
gradient all-reduce (Eq. 13). Events are split evenly across ranks, as in every scheme."""
from __future__ import annotations

from dataclasses import dataclass

from dgbench.dist import DistContext
from dgbench.models.temporal import StateLayout
from dgbench.options import Options, option
from dgbench.trainers.continuous.sven import formulas
from dgbench.trainers.continuous.traffic import BatchTraffic, CommVolume
from dgbench.trainers.continuous.data import StreamProblem
from dgbench.trainers.continuous.sven.partition import INTERVAL_HELP, PARTITIONERS, even_split, partition_nodes
from dgbench.trainers.continuous.state import NodeState, ResidentState
from dgbench.trainers.continuous.sven.state import PartitionedState
from dgbench.trainers.contract import ContinuousScheme, EventAssignment, Partition, register_scheme


@dataclass(frozen=True)
class SvenOptions(Options):
    partition: str = option("reflexbicut", "Vertex partitioning of N&M (Alg. 3 Re-FlexBiCut, or a baseline).",
                            aliases=("--partitioner",), choices=PARTITIONERS)
    interval: int = option(64, INTERVAL_HELP, positive=True)
    microbatches: int = option(0, "Pipelining granularity n of the state fetch (0 = from Eq. 12).", minimum=0)
    overlap_aggregation: bool = option(True, "Overlap the write-back with the temporal GNN (§3.3.2, level 2).")
    async_allreduce: bool = option(False, "Staleness-1 gradient all-reduce (Eq. 13).")


@register_scheme
class Sven(ContinuousScheme[SvenOptions]):
    name = "sven"
    summary = "Sven: redundancy-free all-to-alls, Re-FlexBiCut partition, prefetch, two-level pipeline"
    Options = SvenOptions
    conformance = ({"partition": "interval", "microbatches": 3, "overlap_aggregation": False}, {"protocol": "batch"})

    def partition(self, problem: StreamProblem, parts: int, options: SvenOptions) -> Partition:
        return partition_nodes(problem, parts, options.partition, options.interval)

    def streamed_refusal(self, options: SvenOptions) -> str:
        return ""  # every partitioner reads a streamed stream block by block (sven/partition.py)

    def assign_events(self, partition: Partition, rank: int, world_size: int) -> EventAssignment:
        return even_split(world_size, rank)

    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition,
                   options: SvenOptions) -> NodeState:
        assert partition.owner is not None
        if ctx.world_size == 1:
            return ResidentState(ctx, layout, partition.owner)
        return PartitionedState(ctx, layout, partition.owner, deduplicate_ids=True,
                                chunks=max(1, options.microbatches), overlap_write=options.overlap_aggregation)

    def gradient_staleness(self, options: SvenOptions) -> int:
        return 1 if options.async_allreduce else 0

    def microbatches(self, options: SvenOptions) -> int:
        return options.microbatches

    def predicted_volume(self, traffic: BatchTraffic) -> CommVolume | None:
        return formulas.rank_volume("sven", traffic) if traffic.world_size > 1 else None
