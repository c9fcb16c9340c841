"""ESDG's protocol as the paper sets it: each model on its own smoothing (Table 1, §5.4, TM-GCN's features
M-averaged too), link-prediction targets from the raw next snapshot, and §6.4's fixed training pairs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.store import open_store
from dgbench.generators.esdg_random import build
from dgbench.loaders.smoothing import EDGE_LIFE, M_PRODUCT, RAW, edge_life, m_product, window_mean
from dgbench.trainers.config import RunConfig
from dgbench.trainers.discrete.data import TRAIN, DiscreteData
from dgbench.trainers.discrete.family import smoothing_of
from dgbench.trainers.experiment import resolve


@pytest.fixture(scope="module")
def raw_store(tmp_path_factory) -> Path:
    """Snapshots that repeat many of their edges (so smoothing carries edges into the next input)."""
    return build(out=tmp_path_factory.mktemp("esdg") / "raw.zarr", nodes=40, snapshots=8, edge_factor=2.0, seed=2)


def _keys(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    return np.unique(src.astype(np.int64) * n + dst)


@pytest.mark.parametrize("name, transform", [(EDGE_LIFE, edge_life), (M_PRODUCT, m_product)])
def test_inputs_are_smoothed_in_memory_and_targets_stay_raw(raw_store, tmp_path, name, transform):
    smoothed_store = open_store(transform(raw_store, tmp_path / "smoothed.zarr", 3))
    data = DiscreteData(raw_store, smoothing=name, smoothing_window=3)
    written = DiscreteData(smoothed_store.path)  # the streaming transform's store, used as it is
    raw = open_store(raw_store)
    n = raw.num_nodes
    for snap in raw.snapshots():
        if snap.index >= 1:  # targets: the raw next snapshot
            np.testing.assert_array_equal(data.target_keys[snap.index], _keys(snap.src, snap.dst, n))
    for t in range(data.num_steps):  # inputs: the same Ã as the smoothed store gives
        np.testing.assert_array_equal(data.adjacency[t].rowptr, written.adjacency[t].rowptr)
        np.testing.assert_array_equal(data.adjacency[t].col, written.adjacency[t].col)
        np.testing.assert_allclose(data.adjacency[t].val, written.adjacency[t].val, rtol=1e-6)
    # a smoothed store's own targets carry the input's edges over as trivial positives; raw targets do not
    inputs = {snap.index: _keys(snap.src, snap.dst, n) for snap in smoothed_store.snapshots()}
    for t in range(1, data.num_steps):
        assert np.isin(data.target_keys[t + 1], written.target_keys[t + 1]).all()
        trivial_smoothed = np.isin(written.target_keys[t + 1], inputs[t]).mean()
        trivial_raw = np.isin(data.target_keys[t + 1], inputs[t]).mean()
        assert trivial_smoothed > trivial_raw + 0.2, (t, trivial_smoothed, trivial_raw)
    assert data.edges_per_step.sum() > data.raw_edges_per_step.sum()  # work counts the smoothed inputs


def test_tmgcn_features_are_m_averaged_too(raw_store):
    raw, smoothed = DiscreteData(raw_store), DiscreteData(raw_store, smoothing=M_PRODUCT, smoothing_window=3)
    expected = window_mean(raw.degree_features, 3)
    for got, want in zip(smoothed.degree_features, expected):
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(smoothed.degree_features[2], raw.degree_features[2])
    edge = DiscreteData(raw_store, smoothing=EDGE_LIFE, smoothing_window=3)  # ESDG smooths only the graph there
    for got, want in zip(edge.degree_features, raw.degree_features):
        np.testing.assert_array_equal(got, want)


def _run(store: Path, model: str, **options) -> object:
    return resolve(RunConfig(scheme="single", model=model, dataset=store, **options))


def test_each_model_gets_its_table_1_smoothing(raw_store, tmp_path):
    assert smoothing_of(_run(raw_store, "tmgcn")) == M_PRODUCT
    assert smoothing_of(_run(raw_store, "evolvegcn-o")) == EDGE_LIFE
    assert smoothing_of(_run(raw_store, "cdgcn")) == RAW
    assert smoothing_of(_run(raw_store, "tmgcn", smoothing="none")) == RAW
    smoothed = m_product(raw_store, tmp_path / "m.zarr", 3)
    with pytest.raises(DgbenchError, match="already smoothed"):
        _run(smoothed, "tmgcn")  # its targets would be smoothed too
    assert smoothing_of(_run(smoothed, "tmgcn", smoothing="none")) == RAW


def test_paper_protocol_keeps_one_training_set(raw_store):
    fixed = DiscreteData(raw_store, seed=4, fixed_training_pairs=True)
    redrawn = DiscreteData(raw_store, seed=4)
    for a, b in zip(fixed.split_pairs(TRAIN, 0), fixed.split_pairs(TRAIN, 5)):
        np.testing.assert_array_equal(a.src, b.src)
        np.testing.assert_array_equal(a.dst, b.dst)
    assert any(not np.array_equal(a.src, b.src)
               for a, b in zip(redrawn.split_pairs(TRAIN, 0), redrawn.split_pairs(TRAIN, 5)))
