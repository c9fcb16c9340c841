"""Scheme specifics of depcache / depcomm / sven beyond the registry-driven conformance suite
(tests/test_conformance.py: every scheme x model x world size equals `single` and moves Eq. 7-9's bytes):
sven's deduplication saving, its staleness-1 all-reduce, Eq. 12's granularity, the uniform sampler,
and the ids travelling with fetched rows.

One launch per world size runs every (model, scheme) pair in the same process group (spawning ranks
is the slow part). Runs use float64 so equality is checked tightly: in float32, Adam turns rounding
noise in near-zero gradients into full-size steps, which would hide real differences behind a loose
tolerance.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.dist import DistContext
from dgbench.launch import launch
from trainers.config import RunConfig
from trainers.experiment import resolve, train_runs

SMALL = dict(epochs=1, batch_size=200, memory_dim=16, neighbors=5, lr=0.01, seed=3)
DISTRIBUTED = ("depcache", "depcomm", "sven")


def _config(dataset: Path, model: str, scheme: str, nproc: int, **overrides) -> RunConfig:
    sven = {"partition": "reflexbicut", "microbatches": 3} if scheme == "sven" else {}
    return RunConfig(scheme=scheme, model=model, dataset=dataset, nproc=nproc,
                     extra={"dtype": "float64", "prefetch": 2}, **{**SMALL, **sven, **overrides})


def _summary(result: dict) -> dict:
    figures = result["figures"][-1]
    return {"losses": result["losses"], "metrics": figures["metrics"], "counters": result["counters"],
            "dispatch": figures.get("nm_dispatch_row_bytes", 0.0), "aggregation": figures.get("nm_aggregate_row_bytes", 0.0),
            "dispatch_ids": figures.get("nm_dispatch_bytes", 0.0) - figures.get("nm_dispatch_row_bytes", 0.0),
            "width": result["state_row_width"], "microbatches": result["microbatches"]}


def run_all(ctx: DistContext, dataset: Path, runs: list[tuple[str, str, dict]]) -> dict:
    """On every rank: train each (model, scheme, overrides) in turn; the per-rank summaries."""
    out = {}
    for model, scheme, overrides in runs:
        result = train_runs(ctx, [resolve(_config(dataset, model, scheme, ctx.world_size, **overrides))])[0]
        out[(model, scheme, tuple(sorted(overrides.items())))] = _summary(result)
    return out


@pytest.fixture(scope="module")
def stream_path(tmp_path_factory) -> Path:
    from generators.stream import build
    return build(out=tmp_path_factory.mktemp("stream") / "stream.zarr", users=60, items=50, events=1400,
                 edge_dim=4, seed=5)


@pytest.fixture(scope="module")
def single_results(stream_path) -> dict:
    runs = [(m, "single", {}) for m in ("tgn", "jodie", "apan")]
    # sven on one rank with async: the exact staleness-1 reference (its all-reduce is local)
    runs += [("tgn", "sven", {"async_allreduce": True}), ("tgn", "single", {"sampler": "uniform"})]
    return launch(run_all, 1, (stream_path, runs))[0]


@pytest.fixture(scope="module")
def two_rank_results(stream_path) -> list[dict]:
    runs = [(m, s, {}) for m in ("tgn", "jodie", "apan") for s in DISTRIBUTED]
    runs.append(("tgn", "sven", {"async_allreduce": True}))
    runs.append(("tgn", "sven", {"microbatches": 0}))
    runs += [("tgn", scheme, {"sampler": "uniform"}) for scheme in DISTRIBUTED]
    return launch(run_all, 2, (stream_path, runs), timeout_s=120)


def _assert_same_training(reference: dict, other: dict) -> None:
    assert len(other["losses"]) == len(reference["losses"]) > 3
    np.testing.assert_allclose(other["losses"], reference["losses"], rtol=1e-9, atol=1e-12)
    for split in ("val", "test"):
        for metric in ("ap", "auc", "accuracy"):
            # scores equal to ~1e-15; exactly tied scores of single may then order either way
            assert other["metrics"][split][metric] == pytest.approx(reference["metrics"][split][metric], abs=1e-3)


def test_training_learns_something(single_results):
    tgn = single_results[("tgn", "single", ())]
    assert tgn["losses"][-1] < tgn["losses"][0]
    assert tgn["metrics"]["test"]["ap"] > 0.6  # repeats make the generated stream predictable


def test_an_id_travels_with_every_fetched_row(two_rank_results):
    """Eq. 7-9 count rows; the ids asked for travel too (an int64 per fetched row)."""
    for key in two_rank_results[0]:
        if key[1] not in DISTRIBUTED:
            continue
        total = {name: sum(r[key][name] for r in two_rank_results) for name in ("dispatch", "dispatch_ids")}
        width = two_rank_results[0][key]["width"]  # float64 rows of ``width`` values here
        assert total["dispatch_ids"] == pytest.approx(total["dispatch"] / width), key


def test_sven_moves_fewer_bytes_than_depcomm_and_depcache(two_rank_results):
    for model in ("tgn", "jodie", "apan"):
        total = {s: sum(r[(model, s, ())]["dispatch"] + r[(model, s, ())]["aggregation"] for r in two_rank_results)
                 for s in DISTRIBUTED}
        assert total["sven"] < total["depcomm"] and total["sven"] < total["depcache"], (model, total)
        assert two_rank_results[0][(model, "sven", ())]["counters"]["eta1"] > 0


def test_async_allreduce_trains_with_one_step_staleness(single_results, two_rank_results):
    asynchronous = two_rank_results[0][("tgn", "sven", (("async_allreduce", True),))]
    reference = single_results[("tgn", "single", ())]
    assert len(asynchronous["losses"]) == len(reference["losses"])
    assert asynchronous["losses"][0] == pytest.approx(reference["losses"][0])  # same first forward pass
    assert not np.allclose(asynchronous["losses"], reference["losses"])  # later steps use stale gradients
    assert asynchronous["metrics"]["test"]["ap"] > 0.5
    # one process applying g_{t-1} at step t is the exact reference for the distributed staleness-1 run
    for rank_result in two_rank_results:
        _assert_same_training(single_results[("tgn", "sven", (("async_allreduce", True),))],
                              rank_result[("tgn", "sven", (("async_allreduce", True),))])


def test_uniform_sampler_trains_exactly_like_single(single_results, two_rank_results):
    reference = single_results[("tgn", "single", (("sampler", "uniform"),))]
    assert not np.allclose(reference["losses"], single_results[("tgn", "single", ())]["losses"])
    for scheme in DISTRIBUTED:
        _assert_same_training(reference, two_rank_results[0][("tgn", scheme, (("sampler", "uniform"),))])


def test_granularity_from_eq12_is_chosen_and_agreed(single_results, two_rank_results):
    chosen = [r[("tgn", "sven", (("microbatches", 0),))]["microbatches"] for r in two_rank_results]
    assert chosen[0]["n"] >= 1 and all(c["n"] == chosen[0]["n"] for c in chosen)
    _assert_same_training(single_results[("tgn", "single", ())],
                          two_rank_results[0][("tgn", "sven", (("microbatches", 0),))])
