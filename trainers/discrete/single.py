"""`single`: one process, every snapshot resident on the device — the reference every scheme must match."""
from __future__ import annotations

from dgbench.dist import DistContext
from dgbench.options import NoOptions
from dgbench.trainers.contract import DiscreteScheme, Partition, WorldRule, register_scheme
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.placement import Placement, TimePlacement


@register_scheme
class Single(DiscreteScheme[NoOptions]):
    name = "single"
    summary = "one process, every snapshot resident"
    world = WorldRule(one_process=True)
    trains_minibatches = True

    def placement(self, ctx: DistContext, data: DiscreteData, options: NoOptions, partition: Partition) -> Placement:
        return TimePlacement(ctx, data, blocks=1, streamed=False)
