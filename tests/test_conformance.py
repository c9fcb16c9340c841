"""Registry-driven conformance, discrete family: every registered scheme, under every world size its
rules allow (1, 2, 4), with its default options and its declared ``conformance`` option sets, trains
every model of its family exactly like ``single`` and moves exactly the bytes it predicts.

The matrix (cases, stores, one launch per world size) is tests/conformance_matrix.py; the continuous
family is tests/test_conformance_continuous.py (a file of its own so two test workers share the work).
"""
from __future__ import annotations


import numpy as np
import pytest

from conformance_matrix import (CONTINUOUS, DISCRETE, WORLD_PARAMS, RunsByWorld, _reference, _train,  # noqa: F401
                                losses, measured, snapshot_store)
from dgbench.registry import MODELS, SCHEMES

# scripts/conformance_snapshot.py reads the matrix through this module (DISCRETE, CONTINUOUS, _train)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def discrete_runs(tmp_path_factory) -> dict[int, dict]:
    store = snapshot_store(tmp_path_factory.mktemp("conformance"))
    return RunsByWorld(lambda world: _train("discrete", store, world, DISCRETE))


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


def test_every_registered_discrete_scheme_is_exercised(discrete_runs):
    assert {s.family for s in SCHEMES.values()} <= {"discrete", "continuous"}  # each family has its file
    ran = {scheme for world in (1, 2) for (scheme, _, _) in discrete_runs[world]}
    registered = {s.name for s in SCHEMES.values() if s.family == "discrete"}
    assert registered <= ran, registered - ran
