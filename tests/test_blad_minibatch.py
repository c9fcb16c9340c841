"""BLAD §3.1's vertex mini-batches (``--seed-batch``, ``--fanouts``): the sampler keeps what it promises,
a batch of every vertex with fanouts above every degree is the whole graph, and every scheme that runs
them follows `single` under the same batches and moves the bytes it predicts (the registry-driven
conformance suite runs `blad`'s option set at P = 1, 2, 4 for every model)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.trainers.config import RunConfig
from dgbench.trainers.discrete.blad.minibatch import MiniBatching, sample_rows, sample_step
from dgbench.trainers.discrete.data import TRAIN, DiscreteData
from dgbench.trainers.experiment import resolve, run_experiments

BASE = dict(epochs=2, hidden=6, seed=5, group_length=4, smoothing="none", group_batch=2)
BATCHES = dict(seed_batch=10, fanouts="2,2")
CONTROL = {"counts", "loss", "evaluation", "blad:report"}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path_factory.mktemp("minibatch") / "s.zarr", nodes=80, snapshots=9, edge_factor=4.0, seed=7)


@pytest.fixture(scope="module")
def data(store) -> DiscreteData:
    return DiscreteData(store, seed=BASE["seed"], group_length=BASE["group_length"], smoothing="none")


def _config(scheme: str, model: str, store: Path, nproc: int, **options) -> RunConfig:
    return RunConfig(scheme, model, store, nproc=nproc, out=store.parent / "runs", **{**BASE, **options})


def _losses(record: dict) -> list[float]:
    return [e["loss"] for e in record["epochs"]]


def _sent(record: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for rank in record["epochs"][-1]["per_rank"]:
        for tag, stats in rank["comm_by_tag"].items():
            out[tag] = out.get(tag, 0) + int(stats["elements"])
    return out


def test_a_sampled_row_keeps_at_most_the_fanout_and_scales_to_the_row_sum(data):
    a = data.adjacency[3]
    rows = np.arange(data.num_nodes)
    sampled, cols, values = sample_rows(a, rows, 2, np.random.default_rng(0))
    rowptr, col, val = np.asarray(a.rowptr), np.asarray(a.col).astype(np.int64), np.asarray(a.val)
    for v in rows:
        neighbours = col[rowptr[v]:rowptr[v + 1]]
        off = neighbours != v
        kept = cols[sampled == v]
        assert len(kept) == min(2, off.sum()) and len(set(kept)) == len(kept)
        assert set(kept) <= set(neighbours[off])
        if off.sum():  # degree / kept times each kept value: an unbiased estimate of the row's neighbour sum
            weight = dict(zip(neighbours, val[rowptr[v]:rowptr[v + 1]]))
            expected = [weight[u] * off.sum() / len(kept) for u in kept]
            np.testing.assert_allclose(values[sampled == v], expected, rtol=1e-6)


def test_hops_reach_only_sampled_neighbours_of_the_frontier(data):
    a = data.adjacency[2]
    seeds = np.array([0, 5, 9])
    step = sample_step(a, seeds, (2, 1), np.random.default_rng(1))
    hop1 = np.setdiff1d(step.cols[np.isin(step.rows, seeds)], seeds)
    assert set(step.rows) <= set(seeds) | set(hop1)  # rows sampled: the seeds, then the first hop's new vertices
    assert set(step.vertices) == set(seeds) | set(step.cols)


def test_one_batch_of_every_vertex_with_unbounded_fanouts_is_the_whole_graph(data):
    batching = MiniBatching(data.num_nodes, (10 ** 6, 10 ** 6), make_placement=lambda mini: None)
    pairs = data.split_pairs(TRAIN, 0)
    [batch] = batching.batches(data, pairs, epoch=0)
    mini = batching.sampled(data, batch, epoch=0, index=0)
    assert mini.num_nodes == data.num_nodes
    for t in range(max(data.steps_of(TRAIN)) + 1):
        full, sampled = data.adjacency[t], mini.adjacency[t]
        np.testing.assert_array_equal(np.asarray(sampled.rowptr), np.asarray(full.rowptr))
        np.testing.assert_array_equal(np.asarray(sampled.col), np.asarray(full.col))
        np.testing.assert_allclose(np.asarray(sampled.val), np.asarray(full.val), rtol=1e-6)
        np.testing.assert_allclose(mini.first_layer_input[t], data.first_layer_input[t], rtol=1e-5, atol=1e-7)


def test_each_pair_trains_once_in_the_batch_of_its_source(data):
    batching = MiniBatching(7, (2, 2), make_placement=lambda mini: None)
    pairs = data.split_pairs(TRAIN, 1)
    batches = batching.batches(data, pairs, epoch=1)
    assert len(batches) > 1
    for target, whole in enumerate(pairs):
        parts = [b.pairs[target] for b in batches]
        assert sum(len(p.src) for p in parts) == len(whole.src)
        for batch, part in zip(batches, parts):
            assert np.isin(part.src, batch.seeds).all() and np.isin(part.dst, batch.seeds).all()


def test_sampled_snapshots_vary_in_vertices_and_are_recorded(store):
    [record] = run_experiments([_config("single", "wdgcn", store, 1, **BATCHES)])
    report = record["extra"]["minibatches"]
    assert report["seed_batch"] == 10 and report["fanouts"] == [2, 2] and report["batches_last_epoch"] > 1
    sampled = report["sampled_vertices_per_snapshot"]
    assert 0 < sampled["min"] < sampled["max"] < 80 and sampled["max_over_min_within_batch"] > 1
    assert record["hyperparameters"]["seed_batch"] == 10


CASES = [("snapshot", {}), ("vertex", {"partition": "range"}), ("blad", {}), ("blad-nm", {}),
         ("blad", {"procs_per_device": 1})]


@pytest.fixture(scope="module")
def runs(store) -> dict:
    records = run_experiments([_config(s, "wdgcn", store, 2, **BATCHES, **o) for s, o in CASES])
    reference = run_experiments([_config("single", "wdgcn", store, 1, **BATCHES),
                                 _config("single", "wdgcn", store, 1)])
    return {"p2": dict(zip([f"{s} {o}" for s, o in CASES], records)), "single": reference[0],
            "whole": reference[1]}


def test_every_scheme_follows_single_over_the_same_seed_batches(runs):
    for where, record in runs["p2"].items():
        np.testing.assert_allclose(_losses(record), _losses(runs["single"]), rtol=1e-5, err_msg=where)
        predicted, sent = record["extra"]["predicted_comm_elements"], _sent(record)
        assert predicted, where
        for tag, elements in predicted.items():
            assert sent.get(tag, 0) == elements, f"{where}: {tag}"
        model_data = {tag for tag, n in sent.items() if n and tag not in CONTROL and not tag.endswith(":wait")}
        assert model_data <= set(predicted), where  # nothing moves that the prediction leaves out


def test_seed_batches_change_the_trajectory_against_whole_graphs(runs):
    assert not np.allclose(_losses(runs["single"]), _losses(runs["whole"]), rtol=1e-5)


def test_blad_plans_each_batch_from_its_sampled_counts(runs):
    report = runs["p2"]["blad {}"]["extra"]["blad"]
    assert "per_seed_batch" in report["durations"] and report["durations"]["source"] != "profiled"
    assert report["exchanges_run"] > 0  # the topology manager's decisions ran inside the batches


@pytest.mark.parametrize("options, message", [
    ({"group_length": 0, "group_batch": 0}, "--group-length"),
    ({"presence": "edges"}, "--presence all"),
    ({"fanouts": "2,x"}, "comma-separated"),
    ({"fanouts": "0"}, "at least one"),
])
def test_refusals_are_one_line(store, options, message):
    with pytest.raises(DgbenchError, match=message) as caught:
        resolve(_config("single", "wdgcn", store, 1, **{**BATCHES, **options}))
    assert "\n" not in str(caught.value)


def test_a_scheme_without_a_batch_placement_is_refused(store):
    with pytest.raises(DgbenchError, match="no mini-batch placement"):
        resolve(_config("checkpoint", "wdgcn", store, 1, **BATCHES))
