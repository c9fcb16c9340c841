"""Scheme specifics of depcache / depcomm / sven beyond the registry-driven conformance suite
(tests/test_conformance.py: every scheme x model x world size equals `single` and moves its per-rank
Eq. 7-9 bytes): compute balanced the same way for every scheme, DepComm's and DepCache's bytes equal
Eq. 8 / Eq. 7 evaluated independently on the same batches, sven's deduplication saving, its
staleness-1 all-reduce, Eq. 12's granularity, the uniform sampler and the paper-form record.

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
from dgbench.trainers.config import RunConfig
from dgbench.trainers.continuous.data import BatchPlanner, EventStream
from dgbench.trainers.continuous.family import partition_problem
from dgbench.trainers.continuous.sampler import TemporalSampler
from dgbench.trainers.continuous.sven.formulas import even_share
from dgbench.trainers.experiment import resolve, train_runs

SMALL = dict(epochs=1, batch_size=200, memory_dim=16, neighbors=5, lr=0.01, seed=3)
DISTRIBUTED = ("depcache", "depcomm", "sven")
FLOAT64 = 8


def _config(dataset: Path, model: str, scheme: str, nproc: int, **overrides) -> RunConfig:
    sven = {"microbatches": 3} if scheme == "sven" else {}
    return RunConfig(scheme=scheme, model=model, dataset=dataset, nproc=nproc,
                     extra={"dtype": "float64", "prefetch": 2}, **{**SMALL, **sven, **overrides})


def _summary(result: dict) -> dict:
    figures = result["figures"][-1]
    return {"losses": result["losses"], "metrics": figures["metrics"], "counters": result["counters"],
            "dispatch": figures.get("nm_dispatch_row_bytes", 0.0),
            "aggregation": figures.get("nm_aggregate_row_bytes", 0.0),
            "dispatch_ids": figures.get("nm_dispatch_bytes", 0.0) - figures.get("nm_dispatch_row_bytes", 0.0),
            "gradient": figures.get("nm_gradient_bytes", 0.0), "width": result["state_row_width"],
            "microbatches": result["microbatches"], "compute_s": figures["compute_s"]}


def run_all(ctx: DistContext, dataset: Path, runs: list[tuple[str, str, dict]]) -> dict:
    """On every rank: train each (model, scheme, overrides) in turn; the per-rank summaries."""
    out = {}
    for model, scheme, overrides in runs:
        result = train_runs(ctx, [resolve(_config(dataset, model, scheme, ctx.world_size, **overrides))])[0]
        out[(model, scheme, tuple(sorted(overrides.items())))] = _summary(result)
    return out


@pytest.fixture(scope="module")
def stream_path(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    # bipartite: users (every source) first, so source-owner compute would pile on the low ranks
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
    runs.append(("tgn", "depcomm", {"partition": "range"}))
    runs.append(("tgn", "sven", {"partition": "range"}))
    runs.append(("tgn", "sven", {"async_allreduce": True}))
    runs.append(("tgn", "sven", {"microbatches": 0}))
    runs += [("tgn", scheme, {"sampler": "uniform"}) for scheme in DISTRIBUTED]
    return launch(run_all, 2, (stream_path, runs), timeout_s=300)


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


def test_every_scheme_computes_an_even_share_of_every_batch(two_rank_results):
    """Compute placement is the same for every scheme: on this bipartite store (every source a user,
    users first) source-owner placement put nearly every event on rank 0."""
    batches = two_rank_results[0][("tgn", "sven", ())]["counters"]["batches"]
    for key in two_rank_results[0]:
        events = [r[key]["counters"]["events"] for r in two_rank_results]
        assert sum(events) > 0 and max(events) - min(events) <= batches, (key, events)


def _plans(dataset: Path, model: str, scheme: str, world: int, **overrides):
    """The training batches as each rank plans them, and the partition (owners, pre-sampled report), rebuilt here."""
    run = resolve(_config(dataset, model, scheme, world, **overrides))
    problem = partition_problem(run)
    partition = run.scheme.partition(problem, world, run.scheme_options)
    stream: EventStream = problem.stream
    sampler = TemporalSampler(stream.src, stream.dst, stream.t, stream.num_nodes)
    per_rank = []
    for rank in range(world):
        planner = BatchPlanner(stream, sampler, problem.neighbors, problem.sampler, problem.seed,
                               lambda src, r=rank: np.isin(np.arange(len(src)), even_share(len(src), r, world)),
                               lambda ids: None, fetch_neighbors=problem.fetch_neighbors,
                               deliver_to_neighbors=problem.deliver_to_neighbors)
        per_rank.append([planner.plan("train", i, a, b) for i, (a, b) in enumerate(planner.batch_bounds(
            "train", SMALL["batch_size"]))])
    return per_rank, partition, run


def test_depcomm_bytes_equal_eq8_on_the_same_batches(stream_path, two_rank_results):
    """Eq. 8 per batch: N1 d_mem (every remote position, no deduplication: DepComm returns the owner's
    updated memory, d_mem = 16 for TGN's GRU) + N2 (1 - eta2) rows of memory and message, each with
    the memory time, the mail time and the write priority; the ideal (M-1)/M is the counted remote share."""
    world, memory = 2, SMALL["memory_dim"]
    per_rank, partition, run = _plans(stream_path, "tgn", "depcomm", world, partition="range")
    owner = partition.owner
    n1_remote = n2_remote_distinct = 0
    for rank, plans in enumerate(per_rank):
        for plan in plans:
            n1_remote += int((owner[plan.needed_ids] != rank).sum())
            updated = np.unique(np.concatenate([plan.src, plan.dst]))
            n2_remote_distinct += int((owner[updated] != rank).sum())
    d_msg = 2 * memory + 4  # App. C: 2 d_mem + d_edge
    measured = {name: sum(r[("tgn", "depcomm", (("partition", "range"),))][name] for r in two_rank_results)
                for name in ("dispatch", "aggregation", "gradient")}
    assert measured["dispatch"] == n1_remote * memory * FLOAT64
    assert measured["aggregation"] == n2_remote_distinct * (d_msg + memory + 3) * FLOAT64
    assert measured["gradient"] == measured["dispatch"]  # the views' gradients return to the owners


def test_recorded_eq8_is_the_printed_formula_on_the_same_batches(stream_path):
    """The record's paper-form Eq. 8 (``paper_volume_bytes``) is C_DM = N1 d_mem 2(M-1)/M C0 +
    N2 (1 - eta2)(d_msg + d_mem) 2(M-1)/M C0 summed over the batches the ranks train on: N1, N2 and
    eta (Eq. 1: repeats over all positions of the whole mini-batch's list) counted here from the ranks'
    own plans, not from the pre-sampling pass that wrote the record."""
    world, memory, d_edge = 2, SMALL["memory_dim"], 4
    per_rank, partition, _ = _plans(stream_path, "tgn", "depcomm", world, partition="range")
    report = partition.report
    row, share = (2 * memory + d_edge) + memory, 2 * (world - 1) / world
    dispatch = aggregation = 0.0
    for batch in zip(*per_rank):  # the same batch as each rank planned its share of it
        needed = np.concatenate([plan.needed_ids for plan in batch])
        written = np.concatenate([np.concatenate([plan.src, plan.dst]) for plan in batch])
        eta2 = 1 - len(np.unique(written)) / len(written)
        dispatch += len(needed) * memory * share * FLOAT64
        aggregation += len(written) * (1 - eta2) * row * share * FLOAT64
    recorded = report["paper_volume_bytes"]["depcomm"]
    assert recorded["dispatch"] == pytest.approx(dispatch, rel=1e-12)
    assert recorded["aggregation"] == pytest.approx(aggregation, rel=1e-12)
    n1 = sum(len(plan.needed_ids) for plans in per_rank for plan in plans)
    assert report["paper_eta"]["n1"] == n1


def test_depcache_bytes_equal_eq7_on_the_same_batches(stream_path, two_rank_results):
    """Eq. 7: each rank's distinct updates (redundancy-free aggregation) all-gathered to the M-1 others."""
    world, memory = 2, SMALL["memory_dim"]
    per_rank, _, _ = _plans(stream_path, "tgn", "depcache", world)
    distinct = sum(len(np.unique(np.concatenate([p.src, p.dst]))) for plans in per_rank for p in plans)
    measured = sum(r[("tgn", "depcache", ())]["aggregation"] for r in two_rank_results)
    assert measured == distinct * (world - 1) * ((2 * memory + 4) + memory + 3) * FLOAT64
    assert sum(r[("tgn", "depcache", ())]["dispatch"] for r in two_rank_results) == 0


def test_an_id_travels_with_every_row_sven_fetches(two_rank_results):
    """Eq. 7-9 count rows; the ids asked for travel too (an int64 per fetched row)."""
    for key in two_rank_results[0]:
        if key[1] != "sven":
            continue
        total = {name: sum(r[key][name] for r in two_rank_results) for name in ("dispatch", "dispatch_ids")}
        width = two_rank_results[0][key]["width"]  # float64 rows of ``width`` values here
        assert total["dispatch_ids"] == pytest.approx(total["dispatch"] / width), key


def test_sven_deduplicates_what_depcomm_sends_per_position(two_rank_results):
    """Same owners (range): Sven fetches each remote vertex once per batch (Alg. 2), DepComm every position."""
    sven = sum(r[("tgn", "sven", (("partition", "range"),))]["dispatch"] for r in two_rank_results)
    depcomm = sum(r[("tgn", "depcomm", (("partition", "range"),))]["dispatch"] for r in two_rank_results)
    width = two_rank_results[0][("tgn", "sven", ())]["width"]
    assert sven / width < depcomm / SMALL["memory_dim"]  # rows
    for model in ("tgn", "jodie"):  # one mail per row: Eq. 11's condition holds at these redundancies
        total = {s: sum(r[(model, s, ())]["dispatch"] + r[(model, s, ())]["aggregation"] for r in two_rank_results)
                 for s in ("depcomm", "sven")}
        assert total["sven"] < total["depcomm"], (model, total)


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
    assert 1 <= chosen[0]["n"] <= 16 and all(c["n"] == chosen[0]["n"] for c in chosen)
    fitted = chosen[0]
    assert fitted["A"] + fitted["B"] / SMALL["batch_size"] == pytest.approx(fitted["profiled_eta1"][0], abs=0.1)
    expected = int(np.floor((fitted["A"] * SMALL["batch_size"] + fitted["B"]) / fitted["S_events"]))
    assert fitted["n"] == min(max(expected, 1), 16)  # Eq. 12
    _assert_same_training(single_results[("tgn", "single", ())],
                          two_rank_results[0][("tgn", "sven", (("microbatches", 0),))])
