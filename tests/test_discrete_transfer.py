"""Snapshot transfer (base vs graph differences) and the link-prediction task data."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.errors import DgbenchError
from dgbench.generators.esdg_random import build
from dgbench.loaders.smoothing import m_product
from dgbench.trainers.discrete.data import TEST, TRAIN, VAL, DiscreteData
from dgbench.trainers.discrete.transfer import BASE, GRAPH_DIFFERENCE, SnapshotMover, coo_nbytes


@pytest.fixture(scope="module")
def smoothed(tmp_path_factory) -> Path:
    """An M-product-smoothed store: consecutive snapshots share most of their edges."""
    root = tmp_path_factory.mktemp("transfer")
    raw = build(out=root / "raw.zarr", nodes=60, snapshots=8, edge_factor=2.0, seed=3)
    return m_product(raw, root / "smooth.zarr", window=4)


def test_gd_rebuilds_every_snapshot_bit_exactly_and_moves_fewer_bytes(smoothed):
    data = DiscreteData(smoothed)
    base = SnapshotMover(data.adjacency, torch.device("cpu"), BASE)
    gd = SnapshotMover(data.adjacency, torch.device("cpu"), GRAPH_DIFFERENCE)
    steps = range(data.num_steps)
    for whole, rebuilt in zip(base.move(steps), gd.move(steps)):
        assert torch.equal(whole.rowptr, rebuilt.rowptr)
        assert torch.equal(whole.col, rebuilt.col)
        assert torch.equal(whole.val, rebuilt.val)  # bit-exact, not merely close
    assert gd.bytes_moved < base.bytes_moved
    # the paper's base: (index, value) pairs, int64 row and col and a float32 value per non-zero
    assert base.bytes_moved == sum(20 * len(a.col) for a in data.adjacency)
    assert base.bytes_by_mode["base_csr"] == sum(a.nbytes for a in data.adjacency)  # our compact CSR, counted
    assert gd.bytes_by_mode == base.bytes_by_mode  # both modes in both encodings are always counted


def test_gd_against_both_base_encodings_on_an_m_product_store(smoothed):
    """ESDG §3.2: GD moves the indices of the edges that changed plus all values. Against the paper's
    (index, value) base it saves more than against the compact CSR base (which already spends only
    ~8 B per non-zero): the ratio the paper's 4.1x is measured against is the COO one."""
    data = DiscreteData(smoothed)
    mover = SnapshotMover(data.adjacency, torch.device("cpu"), GRAPH_DIFFERENCE)
    mover.move(range(data.num_steps))
    moved = mover.bytes_by_mode
    coo_ratio, csr_ratio = moved["base"] / moved["gd"], moved["base_csr"] / moved["gd_csr"]
    assert coo_ratio > csr_ratio > 1.0
    changed = sum(len(mover.difference(t).removed) + len(mover.difference(t).added) for t in range(1, data.num_steps))
    values = sum(len(data.adjacency[t].val) for t in range(1, data.num_steps))
    assert moved["gd"] == coo_nbytes(data.adjacency[0]) + 16 * changed + 4 * values


def test_gd_on_unrelated_snapshots_still_rebuilds_exactly(tmp_path):
    data = DiscreteData(build(out=tmp_path / "r.zarr", nodes=30, snapshots=5, edge_factor=2.0, seed=4))
    moved = SnapshotMover(data.adjacency, torch.device("cpu"), GRAPH_DIFFERENCE).move(range(1, data.num_steps))
    for t, csr in zip(range(1, data.num_steps), moved):
        np.testing.assert_array_equal(csr.col.numpy(), data.adjacency[t].col)
        np.testing.assert_array_equal(csr.val.numpy(), data.adjacency[t].val)


def test_pairs_are_deterministic_and_negatives_are_non_edges(esdg_store):
    data, again = DiscreteData(esdg_store, theta=0.2, seed=5), DiscreteData(esdg_store, theta=0.2, seed=5)
    for split in (TRAIN, VAL, TEST):
        for step in data.steps_of(split):
            a, b = data.pairs(step, split, epoch=1), again.pairs(step, split, epoch=1)
            assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
            keys = data.target_keys[step + 1]
            pair_keys = a.src * data.num_nodes + a.dst
            assert np.isin(pair_keys[a.label == 1], keys).all()
            assert not np.isin(pair_keys[a.label == 0], keys).any()
            assert (a.label == 1).sum() == round(0.2 * len(keys)) == (a.label == 0).sum()
    assert not np.array_equal(data.pairs(0, TRAIN, epoch=0).src, data.pairs(0, TRAIN, epoch=1).src)
    assert set(data.steps_of(TRAIN)) | set(data.steps_of(VAL)) | set(data.steps_of(TEST)) == set(range(data.num_steps))


def test_too_few_snapshots_is_one_clear_error(tmp_path):
    with pytest.raises(DgbenchError, match="at least 4 snapshots"):
        DiscreteData(build(out=tmp_path / "s.zarr", nodes=10, snapshots=3, seed=0))


def test_a_streamed_placement_on_a_cpu_device_counts_every_move_and_copies_once(smoothed):
    """On a CPU the device's memory is the host's: `checkpoint` counts the bytes a GPU run moves per
    use, as many times as it uses a block, but builds each block's operator once."""
    from dgbench.dist import Comm, DistContext, PhaseTimer
    from dgbench.trainers.discrete.placement import TimePlacement
    cpu = torch.device("cpu")
    data = DiscreteData(smoothed)
    placement = TimePlacement(DistContext(0, 1, "gloo", cpu, Comm(0, 1, cpu)), data, blocks=2, streamed=True)
    timer = PhaseTimer(cpu)
    first = [placement.view(b, timer) for b in range(2)]
    once = dict(placement.mover.bytes_by_mode)
    again = [placement.view(b, timer) for b in range(2)]
    assert all(a is b for a, b in zip(first, again))  # no second copy of host memory
    assert placement.mover.bytes_by_mode == {mode: 2 * moved for mode, moved in once.items()}
    assert once["base"] == sum(20 * len(a.col) for a in data.adjacency)
    assert placement.extra()["transfer_copies"].startswith("none")
