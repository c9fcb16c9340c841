"""`checkpoint`: ESDG §3.1-3.2 on one process — gradient checkpointing over nb blocks of timesteps,
snapshots moved to the device per block, whole (base) or as graph differences (gd)."""
from __future__ import annotations

from dataclasses import dataclass

from dgbench.dist import DistContext
from dgbench.options import Options, option
from dgbench.trainers.contract import DiscreteScheme, Partition, WorldRule, register_scheme
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.placement import Placement, TimePlacement
from dgbench.trainers.discrete.transfer import BASE, GRAPH_DIFFERENCE


def blocks_option() -> int:
    return option(1, "Gradient-checkpoint blocks of timesteps (ESDG §3.1's nb).", aliases=("--nb",), positive=True)


def transfer_option() -> str:
    return option(BASE, "Move snapshots to the device whole (base) or as graph differences (gd, ESDG §3.2).",
                  choices=(BASE, GRAPH_DIFFERENCE))


@dataclass(frozen=True)
class CheckpointOptions(Options):
    blocks: int = blocks_option()
    transfer: str = transfer_option()


@register_scheme
class Checkpoint(DiscreteScheme[CheckpointOptions]):
    name = "checkpoint"
    summary = "gradient checkpointing over nb blocks, snapshots moved per block (base or gd)"
    conformance = ({"blocks": 2, "transfer": "gd"}, {"blocks": 4})
    Options = CheckpointOptions
    world = WorldRule(one_process=True)

    def placement(self, ctx: DistContext, data: DiscreteData, options: CheckpointOptions,
                  partition: Partition) -> Placement:
        return TimePlacement(ctx, data, blocks=options.blocks, streamed=True, transfer=options.transfer)
