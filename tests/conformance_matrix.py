"""The registry-driven conformance matrix shared by tests/test_conformance.py (discrete) and
tests/test_conformance_continuous.py (continuous): which (scheme, options, model) cases run at each world
size, the stores they train on, and one launch per family and world size that trains every case.

A new scheme or model is covered by registering it; nothing here names one (except ``single``, the
reference). The two families live in two test files so that two test workers can run them side by side.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dgbench.registry import MODELS, SCHEMES, load_plugins
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import family_hooks, run_experiments

WORLDS = (1, 2, 4)
# P = 4 trains every scheme x model a third time: under `-m slow` (CI's default run holds P = 1 and 2; the
# schemes' own suites keep their P = 4 must-holds)
WORLD_PARAMS = (1, 2, pytest.param(4, marks=pytest.mark.slow))
DISCRETE = dict(epochs=2, hidden=6, seed=7)
CONTINUOUS = dict(epochs=1, batch_size=200, memory_dim=16, neighbors=5, seed=3)

load_plugins("dgbench.trainers")


def schemes(family: str) -> list[Any]:
    return sorted((s for s in SCHEMES.values() if s.family == family), key=lambda s: s.name)


def models(family: str) -> list[str]:
    return sorted(m.name for m in MODELS.values() if m.family == family)


def cases(family: str, world: int) -> list[tuple[str, dict[str, Any]]]:
    """(scheme, options) pairs allowed at ``world`` ranks: defaults and each declared option set; on one
    rank also `single` under every protocol another scheme runs by default (its reference)."""
    out = []
    for scheme in schemes(family):
        if scheme.world.problem(scheme.name, world) is None:
            out += [(scheme.name, dict(variant)) for variant in ({}, *scheme.conformance)]
    if world == 1:
        out += [("single", dict(protocol)) for protocol in protocols(family) if protocol]
    return out


def protocols(family: str) -> list[dict[str, Any]]:
    """The protocol option sets schemes of ``family`` run under, by default or in a declared option set (the
    default protocol first)."""
    names = {f.name for f in dataclasses.fields(family_hooks(family).TaskOptions)}
    out: list[dict[str, Any]] = [{}]
    for scheme in schemes(family):
        for variant in ({}, *scheme.conformance):
            protocol = {**scheme.protocol_defaults, **{k: v for k, v in variant.items() if k in names}}
            if protocol and protocol not in out:
                out.append(protocol)
    return out


def own_reference(runs: dict[int, dict], family: str, key: tuple[str, str, tuple], world: int) -> dict | None:
    """The one-process run a scheme with its own reference (``reference_options``, e.g. tgcn's grid) is held to."""
    scheme, model, options = key
    own = SCHEMES[f"{family}:{scheme}"].reference_options(dict(options), world)
    return None if own is None else runs[1][(scheme, model, tuple(sorted(own.items())))]


def own_references(family: str) -> list[tuple[str, dict[str, Any]]]:
    """Those one-process runs, where a run of the scheme on one rank is not already one."""
    out: list[tuple[str, dict[str, Any]]] = []
    for world in WORLDS:
        for name, variant in cases(family, world):
            own = SCHEMES[f"{family}:{name}"].reference_options(variant, world)
            if own is not None and (name, own) not in out + cases(family, 1):
                out.append((name, own))
    return out


def trained_models(family: str, scheme: str, variant: dict[str, Any] | None = None) -> list[str]:
    """The family's models the scheme trains (its ``models``, else all), less those that refuse the
    variant's ``--protocol batch`` (a model's ``batch_protocol_refusal``)."""
    allowed = SCHEMES[f"{family}:{scheme}"].models
    return [m for m in models(family) if (allowed is None or m in allowed) and not refuses(family, m, variant or {})]


def refuses(family: str, model: str, variant: dict[str, Any]) -> bool:
    if variant.get("protocol") != "batch":
        return False
    built = MODELS[f"{family}:{model}"].build(memory_dim=4, edge_dim=0)
    return bool(getattr(built, "batch_protocol_refusal", ""))


def snapshot_store(folder: Path) -> Path:
    from dgbench.generators.esdg_random import build
    return build(out=folder / "snapshots.zarr", nodes=48, snapshots=9, edge_factor=3.0, seed=11)


def event_store(folder: Path) -> Path:
    from dgbench.generators.stream import build
    return build(out=folder / "stream.zarr", users=60, items=50, events=1400, edge_dim=4, seed=5)


class RunsByWorld(dict):
    """Each world's runs, trained the first time a test asks for that world (a deselected P is never trained)."""

    def __init__(self, train):
        super().__init__()
        self._train = train

    def __missing__(self, world: int) -> dict:
        self[world] = self._train(world)
        return self[world]


def losses(record: dict) -> list[float]:
    return [e["loss"] for e in record["epochs"]]


def measured(record: dict, tag: str) -> int:
    """Elements sent under ``tag`` in the last epoch, summed over ranks."""
    return sum(rank["comm_by_tag"].get(tag, {}).get("elements", 0) for rank in record["epochs"][-1]["per_rank"])


def _train(family: str, store: Path, world: int, base: dict[str, Any], extra: dict[str, Any] | None = None
           ) -> dict[tuple[str, str, tuple], dict]:
    keys, configs = [], []
    for scheme, variant in cases(family, world) + (own_references(family) if world == 1 else []):
        for model in trained_models(family, scheme, variant):
            keys.append((scheme, model, tuple(sorted(variant.items()))))
            configs.append(RunConfig(scheme, model, store, nproc=world, out=store.parent / "runs", extra=extra or {},
                                     **base, **variant))
    return dict(zip(keys, run_experiments(configs)))


def _reference(runs: dict[int, dict], model: str, record: dict | None = None) -> dict:
    """`single` on one rank under the protocol ``record`` ran (the protocol options it recorded)."""
    wanted = {name: record["hyperparameters"].get(name)
              for protocol in protocols(record["family"]) for name in protocol} if record else {}
    return next(r for (scheme, m, options), r in runs[1].items() if scheme == "single" and m == model
                and {name: r["hyperparameters"].get(name) for name in wanted} == wanted)

