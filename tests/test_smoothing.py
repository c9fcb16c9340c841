"""Edge-life and M-product smoothing against a dense T×N×N reference, and on a real e-mail graph."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError, StoreError
from dgbench.store import SnapshotStoreWriter, open_store
from dgbench.store.validate import validate_store
from dgbench.loaders.smoothing import default_output_path, distinct_entries, edge_life, m_product

NODES, SNAPSHOTS, FEATURES = 7, 6, 3
EMPTY_SNAPSHOT = 2


def write_random_store(path: Path, seed: int = 0, weighted: bool = True) -> Path:
    """Small snapshots with repeated (src, dst) pairs, one empty snapshot, frames and node arrays."""
    rng = np.random.default_rng(seed)
    provenance = {"source": "test", "transforms": []}
    with SnapshotStoreWriter(path, num_nodes=NODES, directed=True, cut={"method": "test", "unit": "day"},
                             provenance=provenance, time_dtype=np.int64) as writer:
        for t in range(SNAPSHOTS):
            m = 0 if t == EMPTY_SNAPSHOT else int(rng.integers(5, 25))
            src, dst = rng.integers(0, NODES, m), rng.integers(0, NODES, m)
            writer.append_snapshot(src, dst, weight=rng.uniform(0.5, 2.0, m) if weighted else None,
                                   time=np.full(m, 10 * t + 1), label=rng.integers(0, 2, m),
                                   start=float(10 * t), features=rng.normal(size=(NODES, FEATURES)))
        writer.write_array("node_ids", np.arange(NODES) * 3 + 100)
        writer.write_array("node_label", rng.integers(0, 2, (SNAPSHOTS, NODES)).astype(np.int8))
        return writer.close()


def dense_adjacency(path: Path) -> np.ndarray:
    """The T×N×N tensor of weighted adjacencies (duplicate pairs summed, weight 1 when absent)."""
    store = open_store(path)
    tensor = np.zeros((store.num_snapshots, store.num_nodes, store.num_nodes))
    for snap in store.snapshots():
        weight = np.ones(snap.num_edges) if snap.weight is None else snap.weight.astype(np.float64)
        np.add.at(tensor[snap.index], (snap.src, snap.dst), weight)
    return tensor


def window_reference(tensor: np.ndarray, window: int, average: bool) -> np.ndarray:
    """Dense A ×1 M: row t of M covers snapshots max(0, t-w+1)..t with 1 (edge-life) or 1/len (M-product)."""
    steps = len(tensor)
    m = np.zeros((steps, steps))
    for t in range(steps):
        first = max(0, t - window + 1)
        m[t, first:t + 1] = 1.0 / (t + 1 - first) if average else 1.0
    return np.einsum("tk,kij->tij", m, tensor)


@pytest.fixture
def random_store(tmp_path: Path) -> Path:
    return write_random_store(tmp_path / "random.zarr")


@pytest.mark.parametrize("window", [1, 2, 3, SNAPSHOTS, SNAPSHOTS + 4])
@pytest.mark.parametrize("transform, average", [(edge_life, False), (m_product, True)])
def test_matches_dense_reference(random_store: Path, tmp_path: Path, transform, average: bool, window: int):
    out = transform(random_store, tmp_path / "out.zarr", window)
    expected = window_reference(dense_adjacency(random_store), window, average)
    got = dense_adjacency(out)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    result = open_store(out)
    # Coalesced: one row per nonzero of the reference (all input weights are positive).
    np.testing.assert_array_equal(result.edges_per_snapshot(), (expected != 0).sum(axis=(1, 2)))
    assert validate_store(out) == []


@pytest.mark.parametrize("window", [1, 2, SNAPSHOTS + 1])
def test_m_product_averages_frames_and_edge_life_keeps_them(random_store: Path, tmp_path: Path, window: int):
    source = open_store(random_store)
    frames = np.stack([source.frame(t) for t in range(SNAPSHOTS)]).astype(np.float64)
    averaged = open_store(m_product(random_store, tmp_path / "m.zarr", window))
    kept = open_store(edge_life(random_store, tmp_path / "e.zarr", window))
    for t in range(SNAPSHOTS):
        expected = frames[max(0, t - window + 1):t + 1].mean(axis=0)
        np.testing.assert_allclose(averaged.frame(t), expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(kept.frame(t), source.frame(t))


def test_window_one_is_the_coalesced_input(random_store: Path, tmp_path: Path):
    out = open_store(m_product(random_store, tmp_path / "m1.zarr", 1))
    source = open_store(random_store)
    for t in range(SNAPSHOTS):
        pairs = {(int(s), int(d)) for s, d in zip(source.snapshot(t).src, source.snapshot(t).dst)}
        snap = out.snapshot(t)
        assert list(zip(snap.dst.tolist(), snap.src.tolist())) == sorted((d, s) for s, d in pairs)


def test_output_records_the_transform_and_keeps_node_arrays(random_store: Path, tmp_path: Path):
    source = open_store(random_store)
    out = open_store(edge_life(random_store, tmp_path / "e.zarr", 3))
    m_out = open_store(m_product(out.path, tmp_path / "em.zarr", 2))
    assert out.provenance["source"] == "test"
    assert out.provenance["transforms"] == [{"name": "edge-life", "life": 3,
                                             "input_fingerprint": source.fingerprint}]
    assert m_out.provenance["transforms"][1] == {"name": "m-product", "window": 2,
                                                 "input_fingerprint": out.fingerprint}
    assert source.provenance["transforms"] == []  # the input's record is copied, not mutated
    assert out.attrs["cut"] == source.attrs["cut"] and out.num_snapshots == SNAPSHOTS
    for name in ("node_ids", "node_label", "snapshot_start"):
        np.testing.assert_array_equal(out.read(name), source.read(name))
    assert not out.has("time") and not out.has("label")
    assert out.read("weight").dtype == np.float32


def test_unweighted_store_counts_edge_occurrences(esdg_store: Path, tmp_path: Path):
    out = edge_life(esdg_store, tmp_path / "e.zarr", 4)
    expected = window_reference(dense_adjacency(esdg_store), 4, average=False)
    np.testing.assert_array_equal(dense_adjacency(out), expected)
    assert open_store(out).num_edges > open_store(esdg_store).num_edges


def test_refuses_bad_windows_stream_stores_and_overwriting(random_store: Path, stream_store: Path,
                                                          tmp_path: Path):
    with pytest.raises(DgbenchError, match="at least 1"):
        edge_life(random_store, tmp_path / "e.zarr", 0)
    with pytest.raises(StoreError, match="snapshots store is needed"):
        m_product(stream_store, tmp_path / "m.zarr", 2)
    with pytest.raises(DgbenchError, match="must differ"):
        m_product(random_store, random_store, 2, overwrite=True)
    edge_life(random_store, tmp_path / "e.zarr", 2)
    with pytest.raises(StoreError, match="already exists"):
        edge_life(random_store, tmp_path / "e.zarr", 2)
    assert edge_life(random_store, tmp_path / "e.zarr", 3, overwrite=True) == tmp_path / "e.zarr"


def test_growth_is_measured_against_distinct_entries(random_store: Path):
    dense = dense_adjacency(random_store)
    assert distinct_entries(random_store) == np.count_nonzero(dense)
    assert open_store(random_store).num_edges > np.count_nonzero(dense)  # the store holds repeated rows


def test_cli_writes_default_name_and_rejects_ambiguous_requests(random_store: Path):
    runner = CliRunner()
    result = runner.invoke(cli, ["--quiet", "transform", str(random_store), "--edge-life", "3"])
    assert result.exit_code == 0, result.output
    expected = random_store.with_name("random.edgelife3.zarr")
    assert expected == default_output_path(random_store, "edge-life", 3)
    assert f"wrote {expected}" in result.output and validate_store(expected) == []
    assert f"{distinct_entries(random_store):,} distinct per snapshot" in result.output
    again = runner.invoke(cli, ["transform", str(random_store), "--edge-life", "3"])
    assert again.exit_code == 1 and "already exists" in again.output
    both = runner.invoke(cli, ["transform", str(random_store), "--edge-life", "3", "--m-product", "2"])
    neither = runner.invoke(cli, ["transform", str(random_store)])
    assert both.exit_code == neither.exit_code == 2 and "exactly one" in neither.output
    custom = random_store.with_name("smooth.zarr")
    named = runner.invoke(cli, ["--quiet", "transform", str(random_store), "--m-product", "2", "-o", str(custom)])
    assert named.exit_code == 0 and open_store(custom).provenance["transforms"][0]["window"] == 2


# --------------------------------------------------------------------------- real data

def daily_store(path: Path, edges_file: Path) -> Path:
    """A real Network Repository `.edges` file cut into daily snapshots by the loader (multi-edges kept)."""
    from dgbench.loaders.prepare import build_file
    return build_file(path, fmt="network-repository", raw=edges_file, to="snapshots", window="1d")


def union_count_per_window(path: Path, window: int) -> np.ndarray:
    """Distinct (src, dst) pairs in each window, by Python set union (independent of the transform)."""
    store = open_store(path)
    src, dst, bounds = store.read("src").tolist(), store.read("dst").tolist(), store.offsets.tolist()
    pairs = [set(zip(src[a:b], dst[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]
    return np.array([len(set().union(*pairs[max(0, t - window + 1):t + 1])) for t in range(len(pairs))])


@pytest.mark.realdata
@pytest.mark.parametrize("file_name, events", [("ia-enron-employees.edges", 50_572), ("fb-forum.edges", 33_720)])
def test_nnz_growth_on_real_daily_snapshots(shared_data: Path, tmp_path: Path, file_name: str, events: int):
    edges_file = shared_data / "networkrepository_dynamic" / file_name
    if not edges_file.is_file():
        pytest.skip(f"{edges_file} is absent")
    source = open_store(daily_store(tmp_path / "daily.zarr", edges_file))
    assert source.num_edges == events and source.num_snapshots > 100
    window = 7
    expected = union_count_per_window(source.path, window)
    for transform in (edge_life, m_product):
        out = open_store(transform(source.path, tmp_path / f"{transform.__name__}.zarr", window))
        np.testing.assert_array_equal(out.edges_per_snapshot(), expected)
        assert source.num_edges < out.num_edges <= window * source.num_edges
    # Edge-life keeps every event's weight: each input event counts in `window` output snapshots,
    # less those pushed past the last snapshot.
    life = open_store(tmp_path / "edge_life.zarr")
    per_snapshot = source.edges_per_snapshot()
    tail = sum(int(per_snapshot[t]) * (window - (source.num_snapshots - t))
               for t in range(max(0, source.num_snapshots - window + 1), source.num_snapshots))
    assert float(life.read("weight").astype(np.float64).sum()) == pytest.approx(window * source.num_edges - tail)
