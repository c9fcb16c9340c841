"""`depcache` (Sven's baseline, §2.3 Fig. 4a, Eq. 7): a full N&M replica on every rank, so dispatch is
local; after each batch every rank's updates reach every replica through one all-gather, after the
redundancy-free aggregation the paper gives it (Eq. 7's (1 - eta2): one row per vertex leaves a rank).
Events are split evenly across ranks, as in every scheme."""
from __future__ import annotations

from dgbench.dist import DistContext
from dgbench.models.temporal import StateLayout
from dgbench.options import NoOptions
from dgbench.trainers.continuous.sven import formulas
from dgbench.trainers.continuous.traffic import BatchTraffic, CommVolume
from dgbench.trainers.continuous.data import StreamProblem
from dgbench.trainers.continuous.sven.partition import even_split, partition_nodes
from dgbench.trainers.continuous.state import NodeState, ResidentState
from dgbench.trainers.continuous.sven.state import ReplicatedState
from dgbench.trainers.contract import ContinuousScheme, EventAssignment, Partition, register_scheme


@register_scheme
class DepCache(ContinuousScheme[NoOptions]):
    name = "depcache"
    summary = "Full N&M replica per rank; deduplicated updates all-gathered after each batch (Eq. 7)"
    conformance = ({"protocol": "batch"},)

    def partition(self, problem: StreamProblem, parts: int, options: NoOptions) -> Partition:
        # nothing is partitioned; range owners only label "remote" in the per-rank Eq. 1 counters
        return partition_nodes(problem, parts, "range", 1)

    def streamed_refusal(self, options: NoOptions) -> str:
        return ""

    def assign_events(self, partition: Partition, rank: int, world_size: int) -> EventAssignment:
        return even_split(world_size, rank)

    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition, options: NoOptions) -> NodeState:
        assert partition.owner is not None
        placement = ReplicatedState if ctx.world_size > 1 else ResidentState
        return placement(ctx, layout, partition.owner)

    def predicted_volume(self, traffic: BatchTraffic) -> CommVolume | None:
        return formulas.rank_volume("depcache", traffic) if traffic.world_size > 1 else None
