"""`snapshot`: ESDG §4.2 snapshot partitioning — each rank runs the graph operator on contiguous
timesteps of every block and features are redistributed [T_local, N, F] <-> [T, N_local, F] for the
per-vertex temporal module. This is DGC's PSS-TS baseline (ESDG is DGC's ref [4], DGC §2.2, Fig. 2c).
With --blocks > 1 each block's snapshots are moved to the device when it runs (base or gd)."""
from __future__ import annotations

from dataclasses import dataclass

from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.options import Options
from dgbench.trainers.contract import DiscreteScheme, Partition, register_scheme
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.placement import Placement, TimePlacement
from dgbench.trainers.discrete.esdg.checkpoint import (blocks_option, state_every_option, state_every_schedule,
                                                      transfer_option)
from dgbench.trainers.discrete.schedule import Schedule
from dgbench.trainers.discrete.transfer import BASE


@dataclass(frozen=True)
class SnapshotOptions(Options):
    blocks: int = blocks_option()
    transfer: str = transfer_option()
    state_every: int = state_every_option()


@register_scheme
class Snapshot(DiscreteScheme[SnapshotOptions]):
    name = "snapshot"
    summary = "snapshot partitioning with re-distribution to vertices (ESDG §4.2; DGC's PSS-TS)"
    conformance = ({"blocks": 2}, {"blocks": 5, "state_every": 2})
    trains_minibatches = True
    Options = SnapshotOptions

    def validate(self, options: SnapshotOptions, world_size: int) -> None:
        if options.transfer != BASE and options.blocks == 1:
            raise DgbenchError(f"--transfer {options.transfer}: scheme 'snapshot' with --blocks 1 keeps its "
                               f"snapshots resident, so nothing is transferred; use --blocks > 1 or 'checkpoint'")
        state_every_schedule(options.state_every, options.blocks)

    def schedule(self, options: SnapshotOptions) -> Schedule | None:
        return state_every_schedule(options.state_every, options.blocks)

    def placement(self, ctx: DistContext, data: DiscreteData, options: SnapshotOptions,
                  partition: Partition) -> Placement:
        return TimePlacement(ctx, data, blocks=options.blocks, streamed=options.blocks > 1,
                             transfer=options.transfer)
