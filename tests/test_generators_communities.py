"""The demo's generated default has temporal structure: edges recur, activity lasts, groups hold edges."""
from __future__ import annotations

import numpy as np

from dgbench.store import open_store
from dgbench.generators.communities import build


def _pairs(store, t):
    snap = store.snapshot(t)
    return set(zip(snap.src.tolist(), snap.dst.tolist()))


def test_edges_recur_and_the_store_is_deterministic(tmp_path):
    a = open_store(build(out=tmp_path / "a.zarr", nodes=300, snapshots=5, persistence=0.5, seed=3))
    b = open_store(build(out=tmp_path / "b.zarr", nodes=300, snapshots=5, persistence=0.5, seed=3))
    assert a.fingerprint == b.fingerprint
    assert (a.edges_per_snapshot() == 900).all()
    for t in range(1, 5):
        carried = len(_pairs(a, t) & _pairs(a, t - 1)) / len(_pairs(a, t))
        assert 0.35 < carried < 0.75  # about half carried over; a uniform graph would share ~1%


def test_without_persistence_or_communities_it_is_close_to_uniform(tmp_path):
    store = open_store(build(out=tmp_path / "u.zarr", nodes=300, snapshots=3, persistence=0.0, communities=1,
                             activity_shape=1000.0, seed=1))
    carried = len(_pairs(store, 2) & _pairs(store, 1)) / len(_pairs(store, 2))
    assert carried < 0.05


def test_activity_is_skewed_and_lasting(tmp_path):
    store = open_store(build(out=tmp_path / "s.zarr", nodes=400, snapshots=4, persistence=0.0, seed=2))
    degrees = [np.bincount(store.snapshot(t).dst, minlength=400) for t in range(4)]
    assert np.corrcoef(degrees[0], degrees[3])[0, 1] > 0.5  # the same vertices stay popular
    assert degrees[0].max() > 8 * max(degrees[0].mean(), 1)
