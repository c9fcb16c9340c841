"""Registry-driven conformance, continuous family: every registered scheme, under every world size its
rules allow (1, 2, 4), with its default options and its declared ``conformance`` option sets, trains
every model of its family exactly like ``single`` (or the one-process run it names as its own
reference) and moves exactly the bytes it predicts.

The matrix is tests/conformance_matrix.py; the discrete family is tests/test_conformance.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from conformance_matrix import (CONTINUOUS, WORLD_PARAMS, RunsByWorld, _reference, _train, event_store,
                                own_reference, schemes)
from dgbench.registry import SCHEMES

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def continuous_runs(tmp_path_factory) -> dict[int, dict]:
    store = event_store(tmp_path_factory.mktemp("conformance"))
    # float64: Adam turns float32 rounding noise in near-zero gradients into full-size steps
    extra = {"dtype": "float64", "prefetch": 2}
    return RunsByWorld(lambda world: _train("continuous", store, world, CONTINUOUS, extra))


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


def test_every_registered_continuous_scheme_is_exercised(continuous_runs):
    ran = {scheme for world in (1, 2) for (scheme, _, _) in continuous_runs[world]}
    registered = {s.name for s in SCHEMES.values() if s.family == "continuous"}
    assert registered <= ran, registered - ran
