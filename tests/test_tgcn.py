"""Scheme `tgcn` (streaming T-GCN §4, Alg. 6-7): the swap schedule, the 3D grid, exactness against its own
one-process run of the same grid order (pipeline off and on), counted bytes equal to the predicted ones."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.store import open_store
from dgbench.trainers.config import RunConfig
from dgbench.trainers.continuous.data import EventStream
from dgbench.trainers.continuous.tgcn.scheme import (SWAP_LIVE_TAG, SWAP_SNAPSHOT_TAG, Grid, held_blocks, swap_partners,
                                             vertex_ranges)
from dgbench.trainers.experiment import run_experiments

BASE = dict(epochs=1, batch_size=150, memory_dim=8, seed=3, lr=0.01, extra={"dtype": "float64"})


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("tgcn") / "stream.zarr", users=40, items=30, events=1200, edge_dim=2,
                 seed=5)


TWO_RANK_RUNS = {"off": ("store", {"intervals": 3, "no_pipeline": True}), "on": ("store", {"intervals": 3}),
                 "given": ("users_first", {"intervals": 2, "id_order": "given"}),
                 "permuted": ("users_first", {"intervals": 2})}


@pytest.fixture(scope="module")
def users_first(tmp_path_factory) -> Path:
    """A stream whose ids put every user first: rank 1 of a 2-rank grid holds no source when ids are kept."""
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("tgcn") / "users_first.zarr", users=20, items=60, events=600, edge_dim=2,
                 seed=5)


@pytest.fixture(scope="module")
def two_rank_runs(store, users_first) -> dict[str, dict]:
    """Every 2-rank run of this file in one launch (starting ranks costs more than training these)."""
    stores = {"store": store, "users_first": users_first}
    configs = [RunConfig("tgcn", "dygnn", stores[where], nproc=2, options=options, **BASE)
               for where, options in TWO_RANK_RUNS.values()]
    return dict(zip(TWO_RANK_RUNS, run_experiments(configs)))


@pytest.mark.parametrize("parts", [2, 4, 8, 16])
def test_every_rank_meets_every_block_once_per_interval_and_blocks_return_home(parts):
    held = np.stack(held_blocks(parts))  # (steps, ranks)
    for rank in range(parts):
        assert sorted(held[:, rank].tolist()) == list(range(parts))
    assert np.array_equal(held[-1], np.arange(parts))  # home after the last step
    for step in held:
        assert sorted(step.tolist()) == list(range(parts))  # a permutation: one holder per block
    for partner in swap_partners(parts):  # every swap pairs ranks: an involution without fixed points
        assert np.array_equal(partner[partner], np.arange(parts)) and np.all(partner != np.arange(parts))


def test_eight_ranks_follow_alg6():
    assert held_blocks(8)[0].tolist() == [1, 0, 3, 2, 5, 4, 7, 6]  # (0,1)(2,3)(4,5)(6,7)
    assert swap_partners(8)[1].tolist() == [4, 2, 1, 7, 0, 6, 5, 3]  # (0,4)(1,2)(3,7)(5,6)
    assert [int(h[0]) for h in held_blocks(8)] == [1, 5, 3, 7, 6, 2, 4, 0]
    with pytest.raises(DgbenchError, match="power-of-two"):
        swap_partners(6)


def test_the_grid_holds_every_training_event_once_in_its_cell(store):
    stream = EventStream.from_store(open_store(store))
    a, b = stream.ranges["train"]
    ranges = vertex_ranges(stream.num_nodes, 4)
    grid = Grid.cut(stream, np.arange(a, b), ranges, 3, "width")
    seen = np.concatenate([g for k in grid.grids for row in k for g in row])
    assert np.array_equal(np.sort(seen), np.arange(a, b))
    edges = [stream.t[grid.grids[k][0][0]] for k in range(3)]
    for k in range(3):
        for i in range(4):
            for j in range(4):
                events = grid.grids[k][i][j]
                assert np.all(np.diff(events) > 0)  # stream order
                assert np.all((stream.src[events] >= ranges[i]) & (stream.src[events] < ranges[i + 1]))
                assert np.all((stream.dst[events] >= ranges[j]) & (stream.dst[events] < ranges[j + 1]))
    assert all(len(e) == 0 or len(f) == 0 or e.max() <= f.min() for e, f in zip(edges, edges[1:]))


def _losses(record):
    return record["extra"]["batch_losses_last_epoch"]


def test_two_ranks_equal_their_one_process_run_with_and_without_the_pipeline(store, two_rank_runs):
    one = run_experiments([RunConfig("tgcn", "dygnn", store, nproc=1, options={"grid_ranks": 2, "intervals": 3},
                                     **BASE)])[0]
    off, on = two_rank_runs["off"], two_rank_runs["on"]
    assert len(_losses(one)) > 5
    assert _losses(off) == _losses(one)  # exactly, float64
    assert _losses(on) == _losses(one)  # overlap changes no number
    for split in ("val", "test"):
        assert off["final_metrics"][split] == one["final_metrics"][split] == on["final_metrics"][split]
    for record in (off, on):
        counters = record["extra"]["per_rank_counters"]
        for rank, c in enumerate(counters):
            measured = record["epochs"][-1]["per_rank"][rank]["comm_by_tag"]
            for tag, predicted in c["tgcn_predicted_bytes"].items():
                assert measured[tag]["bytes"] == predicted, (rank, tag)
    _assert_blocks_met_once_per_interval(off, 2, 3)
    pipelined = on["extra"]["per_rank_counters"][0]
    assert pipelined["tgcn_async_swap_bytes"] > 0 and off["extra"]["per_rank_counters"][0]["tgcn_async_swap_bytes"] == 0
    assert pipelined["tgcn_async_swap_bytes"] + pipelined["tgcn_sync_swap_bytes"] == \
        on["epochs"][-1]["per_rank"][0]["comm_by_tag"][SWAP_LIVE_TAG]["bytes"] + \
        on["epochs"][-1]["per_rank"][0]["comm_by_tag"][SWAP_SNAPSHOT_TAG]["bytes"]


def _assert_blocks_met_once_per_interval(record: dict, nproc: int, intervals: int) -> None:
    for rank, counters in enumerate(record["extra"]["per_rank_counters"]):
        trace = counters["tgcn_swap_trace"]  # [interval][step][local rank] -> block held
        assert len(trace) == intervals
        for interval in trace:
            held = [step[0] for step in interval]
            assert sorted(held) == list(range(nproc)) and held[-1] == rank


def test_four_real_ranks_meet_every_block_once_per_interval(store):
    record = run_experiments([RunConfig("tgcn", "dygnn", store, nproc=4, options={"intervals": 2}, **BASE)])[0]
    _assert_blocks_met_once_per_interval(record, 4, 2)


def test_sparsified_live_and_refused_runs(store):
    full, half, live = run_experiments([RunConfig("tgcn", "dygnn", store, nproc=1, options=options, **BASE)
                                        for options in ({"intervals": 2}, {"intervals": 2, "sparsify": 0.5},
                                                        {"intervals": 1, "live": True})])
    assert 0.45 < half["epochs"][0]["work"] / full["epochs"][0]["work"] < 0.65  # Alg. 7: about half the events
    assert _losses(live) != _losses(full)
    with pytest.raises(DgbenchError, match="trains dygnn"):
        run_experiments([RunConfig("tgcn", "tgn", store, **BASE)])
    with pytest.raises(DgbenchError, match="--live"):
        run_experiments([RunConfig("tgcn", "dygnn", store, options={"live": True, "grid_ranks": 2}, **BASE)])


def test_permuted_ids_give_every_rank_training_events_on_a_users_first_stream(two_rank_runs):
    given, permuted = two_rank_runs["given"], two_rank_runs["permuted"]
    events = {name: [c["events"] for c in record["extra"]["per_rank_counters"]]
              for name, record in (("given", given), ("permuted", permuted))}
    assert events["given"][1] == 0  # ids 40..79 are items: no source in rank 1's range
    assert min(events["permuted"]) > 0.25 * sum(events["permuted"])
    assert sum(events["given"]) == sum(events["permuted"])
    assert permuted["extra"]["tgcn_id_order"] == "permuted" and given["extra"]["tgcn_id_order"] == "given"


def test_grid_positions_are_a_fixed_permutation_or_the_ids():
    from dgbench.trainers.continuous.tgcn.scheme import grid_positions
    permuted = grid_positions(50, "permuted")
    assert sorted(permuted.tolist()) == list(range(50)) and not np.array_equal(permuted, np.arange(50))
    assert np.array_equal(permuted, grid_positions(50, "permuted"))
    assert np.array_equal(grid_positions(50, "given"), np.arange(50))
