"""`blad` and `blad-nm`: BLAD (Fu et al., SC'23) — whole snapshot groups per device (§5.1), two processes
per device as a pipeline split by Eq. 2's DP (§5.2), and (``blad`` only) the overlap-aware topology
manager reordering each GCN layer's aggregation and update (§6, Alg. 1). `blad-nm` is §7.4's variant
with the manager off; `--balance even` gives §7.5's BLAD-Even. Both train the snapshot-group protocol
(§3.1, Eq. 1; `--group-length`, default 4), which single, snapshot and vertex also run for comparison.
The runtime is trainers/discrete/blad/runtime.py; the algorithms beside it in trainers/discrete/blad/."""
from __future__ import annotations

from typing import Any

from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.trainers.contract import DiscreteScheme, Partition, register_scheme
from dgbench.trainers.discrete.blad.runtime import (DEFAULT_GROUP_BATCH, DEFAULT_GROUP_LENGTH, BladOptions,
                                                    BladPlacement, BladSchedule)
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.placement import Placement
from dgbench.trainers.discrete.schedule import Schedule


class _Blad(DiscreteScheme[BladOptions]):
    Options = BladOptions
    # §3.1's groups; BLAD §7.1 trains on the snapshots as they are (no ESDG Table 1 smoothing)
    # §5.1: an optimiser step after the devices' groups (--blad-sync group): DEFAULT_GROUP_BATCH groups a step
    protocol_defaults = {"group_length": DEFAULT_GROUP_LENGTH, "smoothing": "none", "group_batch": DEFAULT_GROUP_BATCH}
    reorder = True
    honours_presence = False  # groups run whole snapshots: BladPlacement has no V_t mask
    trains_minibatches = True

    def validate(self, options: BladOptions, world_size: int) -> None:
        procs = options.procs_per_device
        if procs and world_size % procs:
            raise DgbenchError(f"--procs-per-device {procs}: --nproc {world_size} is not a multiple of it")

    def placement(self, ctx: DistContext, data: DiscreteData, options: BladOptions, partition: Partition) -> Placement:
        return BladPlacement(ctx, data, first_pair=options.first_layer == "pair")

    def schedule(self, options: BladOptions) -> Schedule:
        return BladSchedule(options, reorder=self.reorder)

    def record_extras(self, options: BladOptions, partition: Partition) -> dict[str, Any]:
        return {"blad_variant": self.name}


@register_scheme
class Blad(_Blad):
    name = "blad"
    summary = "BLAD: snapshot groups per device, two processes per device split by Eq. 2, operator reordering"
    conformance = ({"procs_per_device": 1}, {"balance": "even"}, {"eq2": "paper", "assign": "even"},
                   {"blad_sync": "epoch", "group_batch": 0}, {"first_layer": "precomputed"},
                   {"seed_batch": 12, "fanouts": "3,2"})  # §3.1's vertex mini-batches


@register_scheme
class BladNM(_Blad):
    name = "blad-nm"
    summary = "BLAD without its topology manager (§7.4's BLAD-NM)"
    reorder = False
