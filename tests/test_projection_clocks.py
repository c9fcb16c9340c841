"""The calibration's timed runs (trainers/projection/calibrate.py): every epoch read on both clocks at
once, at the thread count asked for, and the warm-up epochs left out of the median."""
from __future__ import annotations

import pytest
import torch

from dgbench.trainers.projection.calibrate import PROCESS, WALL, WARMUP_EPOCHS, median_epoch, run_timed
from dgbench.trainers.config import RunConfig


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory):
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path_factory.mktemp("clocks") / "tiny.zarr", nodes=64, snapshots=5, edge_factor=3.0, seed=0)


def test_a_timed_run_reads_both_clocks_around_the_same_epochs_at_the_threads_asked(tiny_store):
    before = torch.get_num_threads()
    epochs = WARMUP_EPOCHS + 2
    config = RunConfig("single", "cdgcn", tiny_store, nproc=1, epochs=epochs, seed=0, out=tiny_store.parent / "runs",
                       hidden=4)
    record = run_timed([config], PROCESS, threads=1)[0]
    clocks = record["extra"]["clocks"]
    assert record["extra"]["threads_per_rank"] == [1]
    assert torch.get_num_threads() == before  # the caller's count is given back
    assert sorted(clocks) == [PROCESS, WALL]
    for clock in (WALL, PROCESS):
        assert len(clocks[clock]["epochs"]) == epochs and clocks[clock]["per_rank"] == [clocks[clock]["epochs"]]
        assert all(seconds > 0 for seconds in clocks[clock]["epochs"])
    # the record's own epoch times are the clock asked for, read at the same instants as the other clock
    assert [e["time_s"] for e in record["epochs"]] == clocks[PROCESS]["epochs"]
    with pytest.raises(ValueError, match="warm-up"):
        median_epoch(record, WALL, warmup=epochs)


def test_the_median_leaves_out_the_warm_up_epochs():
    record = {"extra": {"clocks": {WALL: {"epochs": [9.0] * WARMUP_EPOCHS + [1.0, 2.0, 6.0]}}}}
    assert median_epoch(record, WALL) == 2.0


def test_two_ranks_each_read_both_clocks_and_the_slowest_rank_is_the_epoch(tiny_store):
    config = RunConfig("snapshot", "cdgcn", tiny_store, nproc=2, epochs=3, seed=0, out=tiny_store.parent / "runs",
                       hidden=4)
    record = run_timed([config], WALL, threads=1)[0]
    assert record["extra"]["threads_per_rank"] == [1, 1]
    for clock in (WALL, PROCESS):
        per_rank = record["extra"]["clocks"][clock]["per_rank"]
        assert len(per_rank) == 2 and all(len(rank) == 3 for rank in per_rank)
        assert record["extra"]["clocks"][clock]["epochs"] == [max(a, b) for a, b in zip(*per_rank)]
    assert [e["time_s"] for e in record["epochs"]] == record["extra"]["clocks"][WALL]["epochs"]
