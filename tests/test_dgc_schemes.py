"""DGC's schemes (pss, pts, dgc) against single (DGC §7.6, Fig. 18: every method but stale aggregation
reaches the same losses) with DGC's vertex presence, and dgc's measured bytes against its chunk cut."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiments

MODELS = ("tgcn", "dysat", "mpnn-lstm")
BASE = dict(epochs=2, hidden=6, seed=3, presence="edges")
CASES = (("pss", {}), ("pts", {}), ("dgc", {}), ("dgc", {"fusion": "off"}))


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from dgbench.generators.nonuniform import build  # vertices live over intervals: sequences of different lengths
    return build(out=tmp_path_factory.mktemp("dgc") / "nonuniform.zarr", nodes=40, snapshots=8, mean_edges=30,
                 std_edges=10, min_presence=0.3, seed=5)


def _runs(store: Path, world: int) -> dict:
    configs = [RunConfig(scheme, model, store, nproc=world, out=store.parent / "runs", **BASE, **options)
               for scheme, options in CASES for model in MODELS]
    return {(c.scheme, tuple(sorted(o.items())), c.model): r
            for c, (_, o), r in zip(configs, [case for case in CASES for _ in MODELS], run_experiments(configs))}


@pytest.fixture(scope="module")
def reference(store) -> dict:
    configs = [RunConfig("single", model, store, nproc=1, out=store.parent / "runs", **BASE) for model in MODELS]
    return {c.model: [e["loss"] for e in r["epochs"]] for c, r in zip(configs, run_experiments(configs))}


def forward_bytes(record: dict, *tags: str) -> int:
    return sum(rank["comm_by_tag"].get(f"{tag}:forward", {}).get("bytes", 0)
               for tag in tags for rank in record["epochs"][-1]["per_rank"])


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_schemes_train_like_single_and_dgc_moves_its_cut(store, reference, world):
    for (scheme, options, model), record in _runs(store, world).items():
        where = f"{scheme} {dict(options)} {model} P={world}"
        np.testing.assert_allclose([e["loss"] for e in record["epochs"]], reference[model], rtol=1e-5, err_msg=where)
        predicted = record["extra"].get("predicted_comm_elements")
        if predicted is not None:
            for tag, elements in predicted.items():
                measured = sum(r["comm_by_tag"].get(tag, {}).get("elements", 0)
                               for r in record["epochs"][-1]["per_rank"])
                assert measured == elements, f"{where}: {tag}"
        if scheme == "dgc":
            cut = record["extra"]["partition"]["predicted_bytes_per_epoch"]
            assert forward_bytes(record, "halo") == cut["spatial"], where
            assert forward_bytes(record, "carry", "history") == cut["temporal"], where
            chunking = record["extra"]["partition"]["chunking"]
            assert chunking["size_max"] <= chunking["max_chunk_size"], where
        if scheme == "pss":
            assert forward_bytes(record, "halo") == 0, where  # whole snapshots: no spatial halo
        if scheme == "pts":
            assert forward_bytes(record, "carry", "history") == 0, where  # whole sequences: nothing temporal


def test_pts_gives_every_rank_the_same_number_of_sequences():
    """DGC §2.2.2: equal sequence counts, not balanced degrees. Vertices 1, 4, 5 never appear (no
    sequence) and go with the range of the next vertex that has one; the last with the last range."""
    from types import SimpleNamespace

    from dgbench.trainers.discrete.dgc.pts import equal_sequence_owner
    present = np.zeros((3, 8), bool)
    present[0, [0, 2, 3]] = present[2, [6, 7]] = present[1, 3] = True  # sequences: 0, 2, 3, 6, 7
    owner = equal_sequence_owner(SimpleNamespace(num_nodes=8, present=present), 2)
    assert owner.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # sequences {0, 2, 3} and {6, 7}: 3 + 2
    assert equal_sequence_owner(SimpleNamespace(num_nodes=8, present=None), 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    skewed = np.zeros((2, 9), bool)
    skewed[0, :6] = skewed[1, 8] = True  # 7 sequences in 3 ranges: 3, 2, 2 whatever the degrees
    counts = np.bincount(equal_sequence_owner(SimpleNamespace(num_nodes=9, present=skewed), 3)[skewed.any(0)])
    assert counts.tolist() == [3, 2, 2]


def test_bad_dgc_options_are_one_line_errors(store):
    from dgbench.errors import DgbenchError
    from dgbench.trainers.experiment import resolve
    for options, message in (({"stale": "sometimes"}, "--stale"), ({"fusion": "partly"}, "--fusion"),
                             ({"stale_formula": "guess"}, "--stale-formula"), ({"chunk_size": -1}, "--chunk-size")):
        with pytest.raises(DgbenchError, match=message):
            resolve(RunConfig("dgc", "tgcn", store, nproc=2, out=store.parent / "runs", **options))
    with pytest.raises(DgbenchError, match="--presence"):
        resolve(RunConfig("pss", "tgcn", store, nproc=2, out=store.parent / "runs", presence="sometimes"))
    resolve(RunConfig("dgc", "tgcn", store, nproc=2, out=store.parent / "runs", stale="0.7D"))


@pytest.mark.slow
def test_fitted_cost_model_is_used_and_its_eq8_error_recorded(store):
    from dgbench.trainers.discrete.dgc.costmodel import MODEL_ENCODERS, Sampling, fit_chunk_cost_model
    path = fit_chunk_cost_model(store.parent / "dgc-cost.json", MODEL_ENCODERS["tgcn"], samples=16, epochs=3, repeats=1,
                                sampling=Sampling(max_vertices=128, max_sequence_length=8))
    proxy, fitted = run_experiments([
        RunConfig("dgc", "tgcn", store, nproc=2, out=store.parent / "runs", **BASE),
        RunConfig("dgc", "tgcn", store, nproc=2, out=store.parent / "runs", cost_model=str(path), **BASE)])
    assert proxy["extra"]["partition"]["cost_model"]["source"] == "proxy"
    assert "cost_model_error" not in proxy["extra"]["partition"]
    report = fitted["extra"]["partition"]
    assert report["cost_model"]["source"] == "fitted" and report["cost_model"]["path"] == str(path)
    assert report["cost_model_error"]["chunks"] > 0 and np.isfinite(report["cost_model_error"]["eq8_error"])
    assert [e["loss"] for e in fitted["epochs"]] == pytest.approx([e["loss"] for e in proxy["epochs"]], rel=1e-5)
