"""Registry-driven conformance: every registered scheme, under every world size its rules allow (1, 2,
4), with its default options and its declared ``conformance`` option sets, trains every model of its
family exactly like ``single`` and moves exactly the bytes it predicts.

A new scheme or model is covered by registering it; nothing here names one (except ``single``, the
reference). One launch per family and world size trains every case (spawning ranks dominates).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
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


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def snapshot_store(tmp_path_factory) -> Path:
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path_factory.mktemp("conformance") / "snapshots.zarr", nodes=48, snapshots=9,
                 edge_factor=3.0, seed=11)


@pytest.fixture(scope="module")
def event_store(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("conformance") / "stream.zarr", users=60, items=50, events=1400,
                 edge_dim=4, seed=5)


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


@pytest.fixture(scope="module")
def discrete_runs(snapshot_store) -> dict[int, dict]:
    return RunsByWorld(lambda world: _train("discrete", snapshot_store, world, DISCRETE))


@pytest.fixture(scope="module")
def continuous_runs(event_store) -> dict[int, dict]:
    # float64: Adam turns float32 rounding noise in near-zero gradients into full-size steps
    extra = {"dtype": "float64", "prefetch": 2}
    return RunsByWorld(lambda world: _train("continuous", event_store, world, CONTINUOUS, extra))


def _reference(runs: dict[int, dict], model: str, record: dict | None = None) -> dict:
    """`single` on one rank under the protocol ``record`` ran (the protocol options it recorded)."""
    wanted = {name: record["hyperparameters"].get(name)
              for protocol in protocols(record["family"]) for name in protocol} if record else {}
    return next(r for (scheme, m, options), r in runs[1].items() if scheme == "single" and m == model
                and {name: r["hyperparameters"].get(name) for name in wanted} == wanted)


@pytest.mark.parametrize("world", WORLD_PARAMS)
def test_discrete_schemes_train_like_single_and_move_what_they_predict(discrete_runs, world):
    runs = discrete_runs[world]
    assert runs, f"no discrete scheme runs on {world} ranks"
    for (scheme, model, options), record in runs.items():
        where = f"{scheme} {dict(options)} {model} P={world}"
        reference = _reference(discrete_runs, model, record)
        np.testing.assert_allclose(losses(record), losses(reference), rtol=1e-5, err_msg=where)
        for split in ("val", "test"):  # the same evaluation set, scored by the one evaluator
            assert record["final_metrics"][split].keys() == reference["final_metrics"][split].keys(), where
            assert record["final_metrics"][split]["mrr"] == pytest.approx(reference["final_metrics"][split]["mrr"],
                                                                          abs=1e-3), where
        assert record["world_size"] == world
        predicted = record["extra"].get("predicted_comm_elements")
        assert predicted is not None or world == 1, f"{where}: no volume prediction"
        for tag, elements in (predicted or {}).items():
            assert measured(record, tag) == elements, f"{where}: {tag}"
        if world > 1 and "gradients" not in (predicted or {}):  # else predicted by the schedule, checked above
            parameters = record["extra"].get("parameters") or sum(
                p.numel() for p in MODELS[f"discrete:{model}"].build(in_features=2, hidden=6).parameters())
            assert measured(record, "gradients") == world * parameters, where


@pytest.mark.parametrize("world", WORLD_PARAMS)
def test_continuous_schemes_train_like_single_and_move_what_they_predict(continuous_runs, world):
    runs = continuous_runs[world]
    assert runs, f"no continuous scheme runs on {world} ranks"
    for (scheme, model, options), record in runs.items():
        where = f"{scheme} {dict(options)} {model} P={world}"
        reference = (own_reference(continuous_runs, "continuous", (scheme, model, options), world)
                     or _reference(continuous_runs, model, record))
        np.testing.assert_allclose(record["extra"]["batch_losses_last_epoch"],
                                   reference["extra"]["batch_losses_last_epoch"], rtol=1e-9, atol=1e-12,
                                   err_msg=where)
        for split in ("val", "test"):  # scores equal to ~1e-15; exactly tied scores may order either way
            assert record["final_metrics"][split]["ap"] == pytest.approx(reference["final_metrics"][split]["ap"],
                                                                         abs=1e-3), where
        predicted, rows = record["extra"]["predicted_bytes"], record["extra"]["measured_row_bytes"]
        if world > 1 and (predicted["dispatch"] or predicted["aggregation"]):
            assert rows["dispatch"] == pytest.approx(predicted["dispatch"], rel=1e-9, abs=1e-6), where
            assert rows["aggregation"] == pytest.approx(predicted["aggregation"], rel=1e-9), where


def test_every_continuous_scheme_runs_the_batch_protocol_or_says_why_not():
    for scheme in schemes("continuous"):
        declared = any(variant.get("protocol") == "batch" for variant in ({}, *scheme.conformance))
        assert declared or scheme.batch_protocol_refusal or scheme.name == "single", scheme.name


def test_every_registered_scheme_is_exercised(discrete_runs, continuous_runs):
    ran = {(s, f) for f, runs in (("discrete", discrete_runs), ("continuous", continuous_runs))
           for world in (1, 2) for (s, _, _) in runs[world]}
    registered = {(s.name, s.family) for s in SCHEMES.values()}
    assert registered <= ran, registered - ran
