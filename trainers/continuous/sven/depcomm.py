"""`depcomm` (Sven's baseline, §2.3 Fig. 4b, Eq. 8): N&M partitioned by vertex; each owner reads its
rows locally, runs the memory update itself and returns the updated memory (d_mem wide) of every
position another rank asks for, without deduplication (Eq. 8's N1 d_mem); the write-back is
deduplicated as the paper gives it (Eq. 8's N2 (1 - eta2)). Events are split evenly across ranks;
the partition is an option, by default the same as sven's (HPDC §3.1.3 applies Sven's partitioning
to the baselines for a fair comparison)."""
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
from dgbench.trainers.continuous.sven.state import OwnerComputeState
from dgbench.trainers.contract import ContinuousScheme, EventAssignment, Partition, register_scheme


@dataclass(frozen=True)
class DepCommOptions(Options):
    partition: str = option("reflexbicut", "Vertex partitioning of N&M (the same choices as sven's).",
                            aliases=("--partitioner",), choices=PARTITIONERS)
    interval: int = option(64, INTERVAL_HELP, positive=True)


@register_scheme
class DepComm(ContinuousScheme[DepCommOptions]):
    name = "depcomm"
    summary = "N&M partitioned; owners update memory and send d_mem rows per position (Eq. 8)"
    Options = DepCommOptions
    conformance = ({"partition": "range"}, {"protocol": "batch"})

    def partition(self, problem: StreamProblem, parts: int, options: DepCommOptions) -> Partition:
        return partition_nodes(problem, parts, options.partition, options.interval)

    def streamed_refusal(self, options: DepCommOptions) -> str:
        return ""  # every partitioner reads a streamed stream block by block (sven/partition.py)

    def assign_events(self, partition: Partition, rank: int, world_size: int) -> EventAssignment:
        return even_split(world_size, rank)

    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition,
                   options: DepCommOptions) -> NodeState:
        assert partition.owner is not None
        if ctx.world_size == 1:
            return ResidentState(ctx, layout, partition.owner)
        return OwnerComputeState(ctx, layout, partition.owner)

    def predicted_volume(self, traffic: BatchTraffic) -> CommVolume | None:
        return formulas.rank_volume("depcomm", traffic) if traffic.world_size > 1 else None
