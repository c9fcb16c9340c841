"""`single`: one process, node memory and mailboxes resident (the TGL protocol's reference run)."""
from __future__ import annotations

from dgbench.dist import DistContext
from dgbench.models.temporal import StateLayout
from dgbench.options import NoOptions
from dgbench.trainers.continuous.data import StreamProblem
from dgbench.trainers.continuous.sven.partition import range_owners
from dgbench.trainers.continuous.state import NodeState, ResidentState
from dgbench.trainers.contract import ContinuousScheme, Partition, WorldRule, register_scheme


@register_scheme
class Single(ContinuousScheme[NoOptions]):
    name = "single"
    summary = "One process, node memory and mailbox resident (TGL protocol)"
    world = WorldRule(one_process=True)

    def partition(self, problem: StreamProblem, parts: int, options: NoOptions) -> Partition:
        return range_owners(problem.stream, parts)

    def streamed_refusal(self, options: NoOptions) -> str:
        return ""

    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition, options: NoOptions) -> NodeState:
        assert partition.owner is not None
        return ResidentState(ctx, layout, partition.owner)
