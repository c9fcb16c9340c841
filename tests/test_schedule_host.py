"""A discrete schedule sees its rank only through ScheduleHost: the trainer is one, and the default, DGC
stale and BLAD group schedules run, predict and evaluate an epoch on an object that has nothing else."""
from __future__ import annotations

import typing
from typing import Any

import pytest
import torch

from dgbench.dist import Comm, DistContext, PhaseTimer
from dgbench.trainers.config import RunConfig
from dgbench.trainers.discrete.blad.groups import GroupSchedule
from dgbench.trainers.discrete.data import TRAIN
from dgbench.trainers.discrete.dgc.stale_schedule import StaleSchedule
from dgbench.trainers.discrete.placement import CommProfile
from dgbench.trainers.discrete.schedule import BlockSchedule, ScheduleHost


class OnlyTheHost:
    """``trainer`` with every member but ScheduleHost's hidden: a schedule reaching past it fails."""

    MEMBERS = {name for name in dir(ScheduleHost) if not name.startswith("_")} | \
        set(typing.get_type_hints(ScheduleHost, localns={"DistContext": Any, "DiscreteData": Any,
                                                         "Placement": Any, "DynamicGNN": Any}))

    def __init__(self, trainer: Any):
        self._trainer = trainer

    def __getattr__(self, name: str) -> Any:
        if name not in self.MEMBERS:
            raise AttributeError(f"a schedule used trainer.{name}, which ScheduleHost does not offer")
        return getattr(self._trainer, name)


def trainer_for(store, scheme: str, **options: Any):
    from dgbench.trainers.discrete.family import build_rank, partition_problem
    from dgbench.trainers.experiment import resolve
    run = resolve(RunConfig(scheme, "tmgcn", store, epochs=1, hidden=6, seed=3, **options))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    problem = partition_problem(run)
    return build_rank(ctx, run, run.scheme.partition(problem, 1, run.scheme_options), problem)


def epoch_loss(host: Any, trainer: Any) -> float:
    pairs = trainer.data.split_pairs(TRAIN, 0)
    batches = trainer.schedule.assign(host, pairs)
    trainer.optimizer.zero_grad(set_to_none=False)
    timer = PhaseTimer(torch.device("cpu"))
    return trainer.schedule.forward_backward(host, batches, sum(len(b.src) for b in pairs), timer)


@pytest.mark.parametrize("scheme, options, schedule, blocks", [
    ("single", {}, BlockSchedule, 1), ("checkpoint", {"blocks": 3}, BlockSchedule, 3),
    ("dgc", {"stale": "adaptive"}, StaleSchedule, None), ("single", {"group_length": 2}, GroupSchedule, None)])
def test_a_schedule_needs_only_the_host(esdg_store, scheme, options, schedule, blocks):
    trainer = trainer_for(esdg_store, scheme, **options)
    assert isinstance(trainer, ScheduleHost) and type(trainer.schedule) is schedule
    assert blocks is None or len(trainer.placement.blocks) == blocks
    assert {"ctx", "data", "placement", "model", "block_loss", "initial_state"} <= OnlyTheHost.MEMBERS
    assert "optimizer" not in OnlyTheHost.MEMBERS and "schedule" not in OnlyTheHost.MEMBERS
    whole = epoch_loss(trainer, trainer)
    assert epoch_loss(OnlyTheHost(trainer), trainer) == whole
    pairs = trainer.data.split_pairs(TRAIN, 0)
    profile = CommProfile.of(trainer.model)
    host = OnlyTheHost(trainer)
    assert trainer.schedule.predicted_elements(host, profile, pairs) == \
        trainer.schedule.predicted_elements(trainer, profile, pairs)
    assert trainer.schedule.units(host) == trainer.schedule.units(trainer)
    assert trainer.schedule.evaluate(host) == trainer.schedule.evaluate(trainer)  # the group protocol's own
    with pytest.raises(AttributeError, match="ScheduleHost does not offer"):
        OnlyTheHost(trainer).optimizer
