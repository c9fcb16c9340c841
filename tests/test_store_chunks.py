"""Reads straight from chunk files (dgbench/store/chunks.py) return what zarr returns and refuse what it would."""
from __future__ import annotations

import numpy as np
import pytest

import dgbench.store.write as store_write
from dgbench.errors import StoreError
from dgbench.store import EdgeStreamStoreWriter, open_store
from dgbench.store.chunks import direct_layout

EVENTS, NODES = 5_000, 300


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(store_write, "CHUNK_ELEMENTS", 512)  # many chunks, some partly read


def write_stream(path, *, features: bool = True):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, NODES, EVENTS), rng.integers(0, NODES, EVENTS)
    src[1024:2048] = 0  # whole chunks of zeros are never written: they must read back as zeros
    with EdgeStreamStoreWriter(path, num_nodes=NODES, directed=True, provenance={},
                               edge_feature_dim=3 if features else 0) as writer:
        writer.append_events(src, dst, np.arange(EVENTS), edge_features=rng.random((EVENTS, 3)) if features else None)
        return writer.close()


@pytest.mark.parametrize("verify", [True, False], ids=["verified", "unverified"])
def test_direct_reads_equal_zarr_reads_for_any_range(tmp_path, small_chunks, verify):
    store = open_store(write_stream(tmp_path / "s.zarr"), verify=verify)
    for name in ("src", "dst", "t", "edge_features"):
        array = store.array(name)
        assert direct_layout(array) is not None  # what the writer writes is read directly
        for start, stop in [(None, None), (0, 1), (100, 1500), (511, 513), (1024, 2048), (4999, None), (7, 7)]:
            np.testing.assert_array_equal(store.read(name, start, stop), array[start:stop])
    assert not store.read("src", 1024, 2048).any()


def test_a_frame_whose_header_disagrees_with_its_file_is_unreadable(tmp_path, small_chunks):
    """Blosc trusts its header: a cut frame must fail, not decode garbage (unverified reads have no digest)."""
    path = write_stream(tmp_path / "s.zarr", features=False)
    chunk = path / "dst" / "c" / "3"
    chunk.write_bytes(chunk.read_bytes()[:-5])
    store = open_store(path, verify=False)
    with pytest.raises(StoreError, match=r"array 'dst' rows 1000\.\.2000 unreadable .*its header records"):
        store.read("dst", 1000, 2000)
    np.testing.assert_array_equal(store.read("dst", 0, 1000), store.array("dst")[0:1000])



def test_a_forked_child_reads_with_its_own_threads(tmp_path, small_chunks):
    """Ranks may be forked after the parent read a store: the child must not wait on the parent's threads."""
    import multiprocessing
    path = write_stream(tmp_path / "s.zarr", features=False)
    expected = open_store(path).read("dst")  # the parent's pool now exists
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        result = pool.apply_async(_read_dst, (str(path),))
        assert np.array_equal(result.get(timeout=60), expected)


def _read_dst(path: str) -> np.ndarray:
    return open_store(path).read("dst")
