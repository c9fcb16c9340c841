"""`checkpoint`: ESDG §3.1-3.2 on one process — gradient checkpointing over nb blocks of timesteps,
snapshots moved to the device per block, whole (base) or as graph differences (gd)."""
from __future__ import annotations

from dataclasses import dataclass

from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.options import Options, option
from dgbench.trainers.contract import DiscreteScheme, Partition, WorldRule, register_scheme
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.placement import Placement, TimePlacement
from dgbench.trainers.discrete.schedule import BlockSchedule, Schedule
from dgbench.trainers.discrete.transfer import BASE, GRAPH_DIFFERENCE


def blocks_option() -> int:
    return option(1, "Gradient-checkpoint blocks of timesteps (ESDG §3.1's nb).", aliases=("--nb",), positive=True)


def state_every_option() -> int:
    return option(1, "Keep the hand-over state of every K-th checkpoint block only; the backward sweep recomputes "
                     "a segment's others (two-level checkpointing: about nb/K + K states held instead of nb, one "
                     "more forward pass of most blocks; the same losses). 1: ESDG §3.1, every block's.",
                  positive=True)


def state_every_schedule(state_every: int, blocks: int) -> Schedule | None:
    """The loop's block schedule keeping every ``state_every``-th hand-over state (None: the default, every one)."""
    if state_every > 1 and blocks == 1:
        raise DgbenchError(f"--state-every {state_every}: with --blocks 1 there is no hand-over state to thin out; "
                           f"use --blocks > 1")
    return BlockSchedule(state_every) if state_every > 1 else None


def transfer_option() -> str:
    return option(BASE, "Move snapshots to the device whole (base) or as graph differences (gd, ESDG §3.2).",
                  choices=(BASE, GRAPH_DIFFERENCE))


@dataclass(frozen=True)
class CheckpointOptions(Options):
    blocks: int = blocks_option()
    transfer: str = transfer_option()
    state_every: int = state_every_option()


@register_scheme
class Checkpoint(DiscreteScheme[CheckpointOptions]):
    name = "checkpoint"
    summary = "gradient checkpointing over nb blocks, snapshots moved per block (base or gd)"
    conformance = ({"blocks": 2, "transfer": "gd"}, {"blocks": 4})
    Options = CheckpointOptions
    world = WorldRule(one_process=True)

    def validate(self, options: CheckpointOptions, world_size: int) -> None:
        state_every_schedule(options.state_every, options.blocks)

    def schedule(self, options: CheckpointOptions) -> Schedule | None:
        return state_every_schedule(options.state_every, options.blocks)

    def placement(self, ctx: DistContext, data: DiscreteData, options: CheckpointOptions,
                  partition: Partition) -> Placement:
        return TimePlacement(ctx, data, blocks=options.blocks, streamed=True, transfer=options.transfer)
