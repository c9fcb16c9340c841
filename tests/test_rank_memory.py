"""Per-rank loading of the discrete family (trainers/projection/lazydata.py's RankDiscreteData): a rank
builds only the input steps its placement reads, with the same numbers as the whole data, so a
`snapshot` rank holds its own steps, a `vertex` rank only a few recent ones, and both train like
`single`. Memory goals: the printed tables of benchmarks/test_scale_bench.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.store import open_store
from dgbench.loaders.smoothing import EDGE_LIFE, M_PRODUCT
from dgbench.generators.esdg_random import build
from dgbench.trainers.config import RunConfig
from dgbench.trainers.discrete.data import TRAIN, DiscreteData
from dgbench.trainers.experiment import run_experiments
from dgbench.trainers.projection.lazydata import KEEP_STEPS, RankDiscreteData

SNAPSHOTS = 9
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return build(out=tmp_path_factory.mktemp("rank") / "s.zarr", nodes=48, snapshots=SNAPSHOTS, edge_factor=3.0,
                 seed=5)


def snapshot_bytes(store: Path, steps: list[int]) -> int:
    opened = open_store(store)
    return sum(a.nbytes for t in steps for a in (lambda s: (s.src, s.dst, s.weight))(opened.snapshot(t))
               if a is not None)


def test_rank_data_builds_the_steps_asked_for_with_the_whole_data_numbers(store):
    whole, rank = DiscreteData(store, seed=3), RankDiscreteData(store, seed=3)
    assert rank.steps_held() == [] and rank.store_bytes_read == 0
    for t in (2, 3, 4):
        a, b = whole.adjacency[t], rank.adjacency[t]
        assert np.array_equal(a.rowptr, b.rowptr) and np.array_equal(a.col, b.col) and np.array_equal(a.val, b.val)
        assert np.array_equal(whole.degree_features[t], rank.degree_features[t])
    assert np.array_equal(whole.first_layer_input[2:5], rank.first_layer_input[2:5])
    assert rank.steps_held() == [2, 3, 4]
    assert rank.store_bytes_read == snapshot_bytes(store, [2, 3, 4]), "each step read once"
    for x, y in zip(whole.split_pairs(TRAIN, 1), rank.split_pairs(TRAIN, 1)):
        assert np.array_equal(x.src, y.src) and np.array_equal(x.dst, y.dst) and np.array_equal(x.label, y.label)
    assert rank.steps_held() == [2, 3, 4], "sampling pairs reads the targets, builds no input step"
    assert whole.steps_held() == list(range(SNAPSHOTS - 1))


@pytest.mark.parametrize("smoothing", [EDGE_LIFE, M_PRODUCT])
def test_smoothed_steps_built_from_their_window_equal_the_whole_smoothed_data(store, smoothing):
    whole = DiscreteData(store, seed=3, smoothing=smoothing, smoothing_window=3)
    rank = RankDiscreteData(store, seed=3, smoothing=smoothing, smoothing_window=3)
    for t in (5, 6, 1):  # a window inside the sequence, its next step, and one cut at step 0
        a, b = whole.adjacency[t], rank.adjacency[t]
        assert np.array_equal(a.rowptr, b.rowptr) and np.array_equal(a.col, b.col) and np.array_equal(a.val, b.val)
        assert np.array_equal(whole.degree_features[t], rank.degree_features[t])
        assert np.array_equal(whole.first_layer_input[t], rank.first_layer_input[t])
    assert rank.steps_held() == [1, 5, 6]
    assert rank.store_bytes_read == snapshot_bytes(store, [3, 4, 5, 6, 0, 1]), "each raw step of a window read once"
    assert np.array_equal(whole.edges_per_step, rank.edges_per_step) and whole.work() == rank.work()
    assert np.array_equal(whole.nonzeros_per_step(), rank.nonzeros_per_step())
    assert (rank.edges_per_step[2:] > rank.raw_edges_per_step[2:]).all(), "the windows add earlier edges"


def _run(store: Path, scheme: str, nproc: int) -> dict:
    return run_experiments([RunConfig(scheme, "cdgcn", store, nproc=nproc, epochs=2, seed=7, hidden=6,
                                      out=store.parent / "runs")])[0]


@pytest.fixture(scope="module")
def single(store) -> dict:
    return _run(store, "single", 1)


def test_a_snapshot_rank_holds_only_its_steps_and_trains_like_single(store, single):
    snapshot = _run(store, "snapshot", 2)
    np.testing.assert_allclose([e["loss"] for e in snapshot["epochs"]], [e["loss"] for e in single["epochs"]],
                               rtol=1e-5)
    # every rank reads every training target for the pair sampling (validation and test: the evaluation sets)
    targets = list(range(1, SNAPSHOTS - 2))
    (one,) = single["extra"]["rank_data"]
    assert one["input_steps_held"] == list(range(SNAPSHOTS - 1))
    ranks = snapshot["extra"]["rank_data"]
    assert len(ranks) == 2
    for rank, figures in enumerate(ranks):
        a, b = snapshot["extra"]["time_ranges"][0][rank]
        assert figures["input_steps_held"] == list(range(a, b)), f"rank {rank}"
        assert figures["store_bytes_read"] == snapshot_bytes(store, targets) + snapshot_bytes(store, list(range(a, b)))
        assert 0 < figures["rss_before_data_bytes"] < figures["peak_rss_bytes"], "its floor, before any data"


def test_a_vertex_rank_keeps_no_more_than_a_few_steps_and_trains_like_single(store, single):
    vertex = _run(store, "vertex", 2)
    np.testing.assert_allclose([e["loss"] for e in vertex["epochs"]], [e["loss"] for e in single["epochs"]],
                               rtol=1e-5)
    for rank, figures in enumerate(vertex["extra"]["rank_data"]):
        assert len(figures["input_steps_held"]) <= KEEP_STEPS < SNAPSHOTS - 1, f"rank {rank}"
